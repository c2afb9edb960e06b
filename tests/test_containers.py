"""Dockerfile and compose.yaml against the code (docker itself is not needed): the image
copies every package folder, the commands the containers run take the flags they are given,
and their INTERSTICE_* variables are settings of the service."""

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from interstice.api.settings import Settings

yaml = pytest.importorskip(
    "yaml", reason="PyYAML absent (it comes with schemathesis, the dev extra)"
)

ROOT = Path(__file__).resolve().parents[1]
INTERSTICE = [sys.executable, "-c", "from interstice.cli import app; app()"]


def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_the_image_copies_every_package_folder() -> None:
    copied = {
        line.split()[1]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ")
    }
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    assert set(package_dirs.values()) <= copied
    assert all((ROOT / path).exists() for path in copied)


def interstice_commands() -> list[list[str]]:
    """Every ``interstice ...`` command line of compose.yaml's services."""
    found = []
    for service in compose()["services"].values():
        command = service.get("command")
        if isinstance(command, list) and command[:1] == ["interstice"]:
            found.append(command[1:])
        elif command:  # sh -c scripts
            for script in command if isinstance(command, list) else [command]:
                for match in re.finditer(r"interstice ([^;\n&|>]+)", script):
                    found.append(shlex.split(match.group(1).replace("$$", "$")))
    return found


@pytest.mark.parametrize("command", interstice_commands(), ids=lambda c: " ".join(c[:2]))
def test_compose_commands_take_their_flags(command: list[str]) -> None:
    words = [w for w in command if not w.startswith("-")]
    subcommand = words[:2] if words[:1] in (["token"], ["job"]) else words[:1]
    shown = subprocess.run(
        [*INTERSTICE, *subcommand, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert shown.returncode == 0, shown.stderr
    for flag in (w for w in command if w.startswith("--")):
        assert flag in shown.stdout, f"interstice {' '.join(subcommand)} has no {flag}"


def test_compose_environment_names_settings() -> None:
    fields = {f"INTERSTICE_{name.upper()}" for name in Settings.model_fields}
    for name, service in compose()["services"].items():
        environment = service.get("environment") or {}
        for variable in environment:
            if variable.startswith("INTERSTICE_"):
                assert variable in fields, f"{name}: {variable} is no setting"


def test_compose_builds_on_the_dockerfiles_default_base() -> None:
    """compose.yaml's INTERSTICE_BASE falls back to the Dockerfile's own base (a registry's
    python:3.11-slim), so that compose without the variable builds what docker build does."""
    base = re.search(r"^ARG BASE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert base, "the Dockerfile takes no ARG BASE"
    defaults = re.findall(r"\$\{INTERSTICE_BASE:-([^}]+)\}", (ROOT / "compose.yaml").read_text())
    assert defaults and set(defaults) == {base.group(1)}
