"""A launch that fails for a reason of the job fails the job at once: its error holds the
launch's last lines, its node goes back to the pool, and ``interstice job wait`` returns at
once with exit code 1.

The launch that cannot work: a ``command`` whose program the OS cannot execute (a file with
the executable bit that is no program: ``Exec format error``). Timeline: a service and one
real agent start; the node is idle; the job is submitted; ``interstice job wait`` returns
failed. (A launch that fails for a reason of the node, e.g. torch missing under the agent's
Python, quarantines the node instead: tests/agents/test_quarantine.py.)
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")
pytest.importorskip("fastapi", reason="the service's dependencies are not installed")

from interstice.agents.local_cluster import LocalCluster  # noqa: E402
from local_jobs import start_cluster  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from interstice.cli import app  # noqa: E402

NODE = "f0"
WAIT_TIMEOUT_S = 120.0  # torch imports and a heartbeat on a loaded machine; a hang is 600 s


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """The service and the agent of NODE, idle."""
    cluster = start_cluster(LocalCluster(tmp_path / "cluster", [], heartbeat_s=1.0))
    try:
        cluster.start_agent(NODE)
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


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_failed_launch_fails_the_job_with_its_last_lines_and_frees_the_node(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    expected = "Exec format error"
    body = {
        "min_nodes": 1,
        "max_nodes": 1,
        "total_samples": 1000,
        "command": unexecutable(tmp_path),
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
            node["holder"] is None and node["quarantined_at"] is None
            for node in cluster.request("scheduler", "GET", "/v1/nodes")["data"]
        ),
        30,
        "the node unheld and not quarantined",
        period_s=0.5,
    )
