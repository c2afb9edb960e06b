"""A launch that fails on the node fails the job at once: its error holds the launch's last
lines, its node goes back to the pool, and ``interstice job wait`` returns at once with
exit code 1.

Two launches that cannot work: a ``command`` whose program the OS cannot execute (a file
with the executable bit that is no program: ``Exec format error``), and an agent whose
Python has no torch (its launcher dies importing it, before it could run anything: a
``torch`` package on the agent's ``PYTHONPATH`` that raises what a Python without torch
raises). Timeline of each: a service and one real agent start; the node is idle; the job is
submitted; ``interstice job wait`` returns failed.
"""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")
pytest.importorskip("fastapi", reason="the service's dependencies are not installed")

from interstice.agents.local_cluster import LocalCluster  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from interstice.cli import app  # noqa: E402

NODE = "f0"
WAIT_TIMEOUT_S = 120.0  # torch imports and a heartbeat on a loaded machine; a hang is 600 s
NO_TORCH = 'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n'


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request) -> Iterator[LocalCluster]:
    """The service and the agent of NODE, idle; with ``request.param == "no torch"`` the
    agent's Python finds no torch."""
    cluster = LocalCluster(tmp_path / "cluster", [], heartbeat_s=1.0)
    cluster.start()
    try:
        if request.param == "no torch":
            shadow = tmp_path / "no-torch"
            (shadow / "torch").mkdir(parents=True)
            (shadow / "torch" / "__init__.py").write_text(NO_TORCH)
            paths = [str(shadow), os.environ.get("PYTHONPATH", "")]
            monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
        cluster.start_agent(NODE)
        monkeypatch.undo()  # the agent has its environment
        cluster.node_events("idle", [NODE])
        yield cluster
    finally:
        cluster.close()


def unexecutable(folder: Path) -> list[str]:
    """A command naming a file with the executable bit that the OS cannot execute."""
    program = folder / "train"
    program.write_bytes(b"\x7fELF\x00not a program\n")
    program.chmod(0o755)
    return ["./train", "--epochs", "3"]


def script(folder: Path) -> list[str]:
    """A plain script (this Python runs it, as torchrun would)."""
    (folder / "train.py").write_text("print('training')\n")
    return ["train.py"]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("cluster", "make_command", "expected"),
    [
        ("plain", unexecutable, "Exec format error"),
        ("no torch", script, "ModuleNotFoundError: No module named 'torch'"),
    ],
    indirect=["cluster"],
    ids=["unexecutable-command", "no-torch"],
)
def test_a_failed_launch_fails_the_job_with_its_last_lines_and_frees_the_node(
    cluster: LocalCluster, tmp_path: Path, make_command, expected: str
) -> None:
    body = {
        "min_nodes": 1,
        "max_nodes": 1,
        "total_samples": 1000,
        "command": make_command(tmp_path),
        "workdir": str(tmp_path),
    }
    job_id = cluster.request("user", "POST", "/v1/jobs", json=body)["job_id"]

    flags = ["--server", cluster.url, "--token", cluster.tokens["user"]]
    wait = ["job", "wait", job_id, "--timeout-s", str(WAIT_TIMEOUT_S), "--period-s", "0.5"]
    result = CliRunner().invoke(app, [*wait, *flags])
    assert result.exit_code == 1, (result.output, cluster.diagnostics())
    assert result.stderr.startswith(f"job {job_id} failed: "), result.stderr
    assert expected in result.stderr, result.stderr

    job = cluster.request("user", "GET", f"/v1/jobs/{job_id}")
    assert job["state"] == "failed" and expected in job["error"], job
    cluster.wait_for(
        lambda: all(
            node["holder"] is None
            for node in cluster.request("scheduler", "GET", "/v1/nodes")["data"]
        ),
        30,
        "the node unheld",
        period_s=0.5,
    )
