"""The generated sbatch script and slurm.conf fragment against golden files, and the shipped
shell scripts' syntax and modes.

Regenerate the golden files after an intended change of a template, then review the diff:

    INTERSTICE_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/agents/test_slurm_scripts.py
"""

import os
import stat
import subprocess
from pathlib import Path

import pytest
from interstice.agents.slurm.scripts import (
    PlaceholderJob,
    ScavengerPartition,
    render_conf_fragment,
    render_sbatch,
    slurm_dir,
)
from typer.testing import CliRunner

from interstice.cli import app

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("INTERSTICE_REGEN_GOLDEN") == "1"
SCRIPTS_DIR = Path("/opt/interstice/slurm")
"""A fixed install path, so the golden fragment does not depend on where the repo is."""

runner = CliRunner()


def assert_golden(name: str, text: str) -> None:
    """Compare ``text`` with tests/agents/golden/<name>, or rewrite it when regenerating."""
    path = GOLDEN / name
    if REGENERATE:
        path.write_text(text)
    assert path.read_text() == text, f"{name} differs from its golden file (see module doc)"


def test_sbatch_golden() -> None:
    script = render_sbatch(PlaceholderJob(partition="scavenger", time_limit="12:00:00"))
    assert_golden("placeholder.sbatch", script)


def test_conf_fragment_golden() -> None:
    fragment = render_conf_fragment(
        ScavengerPartition(
            prolog=SCRIPTS_DIR / "prolog.sh",
            epilog=SCRIPTS_DIR / "epilog.sh",
            nodes="a01n[01-64]",
            grace_s=45,
        )
    )
    assert_golden("slurm.conf.fragment", fragment)


def test_cli_prints_the_golden_files() -> None:
    fragment = runner.invoke(
        app,
        ["slurm", "conf", "--nodes", "a01n[01-64]", "--grace-s", "45"]
        + ["--scripts-dir", str(SCRIPTS_DIR)],
    )
    assert fragment.exit_code == 0, fragment.output
    assert fragment.output == (GOLDEN / "slurm.conf.fragment").read_text()
    sbatch = runner.invoke(app, ["slurm", "sbatch", "--time-limit", "12:00:00"])
    assert sbatch.exit_code == 0, sbatch.output
    assert sbatch.output == (GOLDEN / "placeholder.sbatch").read_text()


def test_fragment_settings_reach_slurm_conf_lines() -> None:
    fragment = render_conf_fragment(
        ScavengerPartition(prolog=Path("/p.sh"), epilog=Path("/e.sh"), partition="idle", grace_s=7)
    )
    lines = [line for line in fragment.splitlines() if line and not line.startswith("#")]
    assert "PreemptType=preempt/partition_prio" in lines
    assert "Prolog=/p.sh" in lines and "Epilog=/e.sh" in lines
    (partition,) = [line for line in lines if line.startswith("PartitionName=")]
    assert partition.split()[:1] == ["PartitionName=idle"]
    assert "GraceTime=7" in partition.split() and "PreemptMode=CANCEL" in partition.split()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"nodes": "a b"}, "nodes='a b' must be one word"),
        ({"partition": ""}, "partition='' must be one word"),
        ({"grace_s": -1}, "grace_s and priority_tier must be >= 0"),
    ],
)
def test_fragment_rejects(changes: dict, message: str) -> None:
    settings = {"prolog": Path("/p.sh"), "epilog": Path("/e.sh"), **changes}
    with pytest.raises(ValueError, match=message):
        render_conf_fragment(ScavengerPartition(**settings))


def test_sbatch_rejects_a_newline() -> None:
    with pytest.raises(ValueError, match="output must not hold a newline"):
        render_sbatch(PlaceholderJob(output="x\n#SBATCH --partition=batch"))


def test_cli_bad_setting_is_one_line_exit_2() -> None:
    result = runner.invoke(app, ["slurm", "conf", "--nodes", "a b"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: nodes='a b' must be one word for slurm.conf"
    ]


@pytest.mark.parametrize("name", ["prolog.sh", "epilog.sh"])
def test_hook_scripts_are_executable_bash(name: str) -> None:
    path = slurm_dir() / name
    assert path.stat().st_mode & stat.S_IXUSR, f"{name} is not executable"
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=10)
    subprocess.run(["bash", "-n", str(slurm_dir() / "hook.sh")], check=True, timeout=10)
