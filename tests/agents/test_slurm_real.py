"""The Slurm integration on a real single-host Slurm: placeholder, Prolog, preemption, Epilog.

A temporary cluster (munged, slurmctld and one slurmd of Debian's ``slurm-wlm``, this host
as controller and as the one compute node ``n1``, cgroup-free; tests/slurm_cluster.py) runs
the shipped slurm.conf fragment, Prolog, Epilog and placeholder job against the real
``interstice serve`` and ``interstice agent``:

1. ``interstice slurm fill --once`` submits a placeholder to the scavenger partition; the
   Prolog starts the agent, and the service shows the node idle with the agent alive.
2. A job of the ``batch`` partition (higher PriorityTier) preempts it; within GraceTime the
   service shows the agent left and the node not allocatable, and the batch job starts only
   after that (the Epilog holds the node until the agent is gone).

And Slurm's plan as forecasts, on two nodes: a batch job runs on ``n1`` with a
time limit, the placeholder on ``n2``; a two-node batch job waits behind the first, so the
backfill planner gives it a StartTime on ``n[1-2]``. ``interstice slurm fill --server``
running every second posts ``n2``'s ``until`` equal to that StartTime (``n1`` is Slurm's,
unknown to the service: nothing is posted for it); after ``scancel`` it withdraws it.

Skips, saying what failed, where Slurm or munge is not installed or not root.
"""

import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from slurm_cluster import (
    START_TIMEOUT_S,
    SlurmCluster,
    free_port,
    interstice_bin,
    require_slurm,
    slurm_cluster,
    start_process,
    stop_process,
    wait_for,
    write_agent_conf,
)

from interstice.demo.session import migrated_with_tokens

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

GRACE_S = 15
"""GraceTime of the test's scavenger partition, and the agent's grace."""
NODE = "n1"
"""The cluster's one compute node."""


@dataclass
class Cluster:
    """The running test cluster and service."""

    slurm: SlurmCluster
    server_url: str
    admin_token: str
    scheduler_token: str

    @property
    def root(self) -> Path:
        return self.slurm.root

    @property
    def agent_state_dir(self) -> Path:
        return self.slurm.agent_state_dir

    def logs(self) -> list[Path]:
        """The daemons', the service's and the agents' logs, for a failure message."""
        return [*self.slurm.logs(), self.root / "log/serve.log"]

    def node_record(self, name: str = NODE) -> dict | None:
        """The service's record of node ``name``, None before it knows the node."""
        nodes = self.get("/v1/nodes")["data"]
        return next((node for node in nodes if node["name"] == name), None)

    def get(self, path: str) -> dict:
        """GET a service path as admin."""
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        response = httpx.get(f"{self.server_url}{path}", headers=headers, timeout=5)
        response.raise_for_status()
        return response.json()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """``interstice serve`` on SQLite, then munged, slurmctld and slurmd; all stopped after."""
    with running_cluster(tmp_path, [NODE]) as running:
        yield running


@contextmanager
def running_cluster(tmp_path: Path, nodes: Sequence[str]) -> Iterator[Cluster]:
    """``interstice serve`` on SQLite, then munged, slurmctld and a slurmd per node of
    ``nodes``; all stopped after."""
    require_slurm()
    interstice = interstice_bin()
    (tmp_path / "log").mkdir()
    database = f"sqlite:///{tmp_path}/interstice.db"
    tokens = migrated_with_tokens(database, ("admin", "agent", "scheduler"))
    port = free_port()
    server_url = f"http://127.0.0.1:{port}"
    service = start_process(
        [interstice, "serve", "--db", database, "--port", str(port)],
        tmp_path / "log/serve.log",
        dict(os.environ),
    )
    try:

        def service_up() -> bool:
            try:
                return httpx.get(f"{server_url}/docs", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        logs = [tmp_path / "log/serve.log"]
        wait_for("interstice serve to listen", service_up, START_TIMEOUT_S, lambda: logs)
        agent_conf = write_agent_conf(tmp_path, [server_url], tokens["agent"], GRACE_S)
        with slurm_cluster(tmp_path, nodes, GRACE_S, agent_conf) as slurm:
            yield Cluster(slurm, server_url, tokens["admin"], tokens["scheduler"])
    finally:
        stop_process(service)


def test_placeholder_prolog_preemption_epilog(cluster: Cluster) -> None:
    # 1. fill submits one placeholder (one usable node); the Prolog starts the agent.
    assert (
        "1 usable nodes, 0 placeholders queued or running, submitted 1" in cluster.slurm.fill_once()
    )

    def agent_alive_on_idle_node() -> dict | None:
        node = cluster.node_record()
        if node is None or node["agent"] is None:
            return None
        alive = node["state"] == "idle" and node["allocatable"]
        return node if alive and node["agent"]["state"] == "alive" else None

    what = "the service to show the node idle with an alive agent"
    node = wait_for(what, agent_alive_on_idle_node, START_TIMEOUT_S, cluster.logs)
    agent_id = node["agent"]["agent_id"]
    agents = cluster.get("/v1/agents")["data"]
    assert [(a["agent_id"], a["node"], a["state"]) for a in agents] == [(agent_id, NODE, "alive")]
    (placeholder_id,) = cluster.slurm.slurm("squeue", "-h", "-t", "R", "-o", "%i").split()
    assert "1 placeholders queued or running, submitted 0" in cluster.slurm.fill_once()

    # 2. A batch job preempts the placeholder; the agent leaves within GraceTime.
    started_file = cluster.root / "batch-started"
    submitted_at = time.time()
    stamp = "python3 -c 'import time; print(time.time())'"
    cluster.slurm.slurm(
        "sbatch", "-p", "batch", "-o", "/dev/null", f"--wrap={stamp} > {started_file}; sleep 2"
    )

    def agent_left() -> dict | None:
        agent = next(a for a in cluster.get("/v1/agents")["data"] if a["agent_id"] == agent_id)
        return agent if agent["state"] == "left" else None

    wait_for("the agent to leave the service", agent_left, GRACE_S + 5, cluster.logs)
    released_s = time.time() - submitted_at
    node = cluster.node_record()
    assert node is not None and not node["allocatable"] and node["holder"] is None

    wait_for("the batch job to start", started_file.is_file, START_TIMEOUT_S, cluster.logs)
    what = "the batch job's start time"
    batch_started_at = float(wait_for(what, started_file.read_text, 5, cluster.logs))
    epilog_line = (cluster.agent_state_dir / f"agent-{placeholder_id}.log").read_text()
    print(
        f"release {released_s:.2f} s after the preempting submission; "
        f"batch job started {batch_started_at - submitted_at:.2f} s after it; "
        f"{epilog_line.splitlines()[-1]}"
    )
    assert released_s < GRACE_S, f"node released {released_s:.1f} s after preemption"
    # The Epilog holds the node until the agent is gone: the real job never shares it.
    assert batch_started_at >= submitted_at + released_s - 0.5
    assert "exited" in epilog_line and "killed" not in epilog_line
    assert not (cluster.agent_state_dir / f"agent-{placeholder_id}.pid").exists()

    # 3. fill queues a new placeholder behind the batch job; when the batch job ends, the
    # node returns to interstice: idle, with its agent registered again.
    assert "0 placeholders queued or running, submitted 1" in cluster.slurm.fill_once()
    what = "the node to return idle after the batch job"
    node = wait_for(what, agent_alive_on_idle_node, START_TIMEOUT_S, cluster.logs)
    assert node["agent"]["agent_id"] == agent_id, "re-registration keeps the agent id"


def test_slurm_plan_reaches_the_service_as_until(tmp_path: Path) -> None:
    with running_cluster(tmp_path, ["n1", "n2"]) as cluster:
        slurm = cluster.slurm
        # 1. A batch job holds n1 up to its 2-minute limit; the placeholder takes n2.
        slurm.slurm(
            "sbatch", "-p", "batch", "-w", "n1", "-t", "2", "-o", "/dev/null", "--wrap=sleep 300"
        )
        wait_for(
            "the batch job to run on n1",
            lambda: slurm.node_states().get("n1") == "allocated",
            START_TIMEOUT_S,
            cluster.logs,
        )
        assert (
            "submitted 1"
            in subprocess.run(
                slurm.fill_command("--once", "--max-jobs", "1"),
                env=slurm.env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        )

        def n2_allocatable() -> dict | None:
            node = cluster.node_record("n2")
            return node if node is not None and node["allocatable"] else None

        wait_for("n2 idle with an alive agent", n2_allocatable, START_TIMEOUT_S, cluster.logs)
        # 2. fill with the service, every second, in the background.
        token_file = tmp_path / "scheduler.token"
        token_file.write_text(cluster.scheduler_token)
        token_file.chmod(0o600)
        fill_log = tmp_path / "log/fill.log"
        command = slurm.fill_command(
            "--max-jobs",
            "1",
            "--interval-s",
            "1",
            "--server",
            cluster.server_url,
            "--token-file",
            str(token_file),
        )
        fill = start_process(command, fill_log, slurm.env)
        logs = lambda: [*cluster.logs(), fill_log]  # noqa: E731
        try:
            # 3. A two-node job waits behind n1's; the planner gives it a start on n[1-2].
            waiting = slurm.slurm(
                "sbatch",
                "--parsable",
                "-p",
                "batch",
                "-N",
                "2",
                "-t",
                "1",
                "-o",
                "/dev/null",
                "--wrap=true",
            ).strip()

            def planned_start() -> str | None:
                out = slurm.slurm("squeue", "--start", "-h", "-j", waiting, "-o", "%S %Y")
                start, nodes = (out.split() + ["", ""])[:2]
                return start if nodes == "n[1-2]" and start not in ("N/A", "") else None

            start = wait_for("the backfill plan of the waiting job", planned_start, 20, logs)
            # squeue prints the controller's local time (the test runs in this host's zone)
            expected = datetime.fromisoformat(start).astimezone(UTC)
            expected_iso = expected.isoformat().replace("+00:00", "Z")

            def n2_until() -> str | None:
                node = cluster.node_record("n2")
                return None if node is None else node["until"]

            assert wait_for("n2's until in the service", n2_until, 10, logs) == expected_iso
            assert cluster.node_record("n1") is None, "n1 is Slurm's: no event for it"
            # 4. The waiting job is cancelled: the forecast is withdrawn within a pass.
            slurm.slurm("scancel", waiting)
            wait_for("n2's until withdrawn", lambda: n2_until() is None or None, 10, logs)
            node = cluster.node_record("n2")
            assert node is not None and node["state"] == "idle" and node["allocatable"]
            assert "withdrawn 1" in fill_log.read_text()
        finally:
            stop_process(fill)
