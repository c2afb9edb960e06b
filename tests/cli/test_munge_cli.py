"""``interstice job`` without a token, against a real ``interstice serve`` in multi-user mode
with MUNGE: every request carries a fresh credential of the caller's account from a real
munged, so submit, list, show and cancel work as that account; with neither a token nor the
``munge`` command the CLI says so in one line (exit code 2); a service told to take MUNGE
credentials does not start without munged.

The CLI runs in this process (the test's Python may sit where a test account cannot read
it, such as root's home), with a ``munge`` on PATH that runs the real one as the account
(``runuser``): the credentials are the account's own, made by munged.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from munge_daemon import (  # noqa: F401 (the fixtures alice and daemon)
    MungeDaemon,
    alice_fixture,
    daemon_fixture,
)
from polling import wait_until
from slurm_cluster import free_port
from test_job_cli import one_line_error, submitted_id
from typer.testing import CliRunner

from interstice.cli import app

SERVE_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def server(daemon: MungeDaemon, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``interstice serve`` with MUNGE credentials from ``daemon``, multi-user; its URL."""
    root = tmp_path_factory.mktemp("munge-service")
    port = free_port()
    env = {
        **os.environ,
        "INTERSTICE_AUTH_MUNGE": "true",
        "INTERSTICE_MUNGE_SOCKET": str(daemon.socket),
        "INTERSTICE_MULTI_USER": "true",
        "INTERSTICE_CHECKPOINT_ROOT": str(root / "checkpoints"),
    }
    with (root / "service.log").open("ab") as log:
        service = subprocess.Popen(
            [*interstice(), "serve", "--db", f"sqlite:///{root / 'i.db'}", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_until(
                lambda: healthy(url),
                SERVE_TIMEOUT_S,
                "interstice serve healthy",
                running=lambda: service.poll() is None,
            )
        except AssertionError as exc:
            tail = (root / "service.log").read_text()[-2000:]
            raise AssertionError(f"{exc}; its log ends: {tail}") from None
        yield url
    finally:
        service.terminate()
        service.wait(timeout=30)


def interstice() -> list[str]:
    found = shutil.which("interstice")
    assert found, "the interstice console script is not installed (pip install -e .)"
    return [found]


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def as_alice(
    alice: pwd.struct_passwd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, daemon
) -> Path:
    """A clean client environment whose ``munge`` makes alice's credentials."""
    for name in ("INTERSTICE_SERVER", "INTERSTICE_TOKEN", "INTERSTICE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("INTERSTICE_MUNGE_SOCKET", str(daemon.socket))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "munge"
    wrapper.write_text(
        f'#!/bin/sh\nexec runuser -u {alice.pw_name} -- {shutil.which("munge")} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def job(server: str, *args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["job", *args, "--server", server])


def test_submit_list_show_cancel_without_a_token(server: str, as_alice, alice) -> None:
    submitted = job(server, "submit", "--command", "train.py", "--nodes", "1:2",
                    "--total-samples", "100")  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted_id(submitted.stdout)

    listed = job(server, "list")
    assert listed.exit_code == 0 and job_id in listed.stdout, listed.output
    shown = job(server, "show", job_id, "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["owner"] == {"name": alice.pw_name, "uid": alice.pw_uid}
    cancelled = job(server, "cancel", job_id)
    assert cancelled.exit_code == 0 and "cancelled" in cancelled.stdout, cancelled.output


def test_no_token_and_no_munge_is_one_line(
    server: str, as_alice, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    line = one_line_error(job(server, "list"), 2)
    assert "no token and no MUNGE on this host" in line


def test_munged_down_on_the_client_is_one_line(
    server: str, as_alice, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("INTERSTICE_MUNGE_SOCKET", str(tmp_path / "no-such.socket"))
    line = one_line_error(job(server, "list"), 2)
    assert "MUNGE cannot make a credential here" in line and "no-such.socket" in line


def test_serve_without_munged_does_not_start(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("INTERSTICE_AUTH_MUNGE", "true")
    monkeypatch.setenv("INTERSTICE_MUNGE_SOCKET", str(tmp_path / "no-such.socket"))
    result = CliRunner().invoke(app, ["serve", "--db", f"sqlite:///{tmp_path / 'i.db'}"])
    line = one_line_error(result, 2)
    assert "INTERSTICE_AUTH_MUNGE is on but munged" in line and "no-such.socket" in line
