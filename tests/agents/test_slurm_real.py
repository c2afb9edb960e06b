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

Skips, saying what failed, where Slurm or munge is not installed or not root.
"""

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
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

    @property
    def root(self) -> Path:
        return self.slurm.root

    @property
    def agent_state_dir(self) -> Path:
        return self.slurm.agent_state_dir

    def logs(self) -> list[Path]:
        """The daemons', the service's and the agents' logs, for a failure message."""
        return [*self.slurm.logs(), self.root / "log/serve.log"]

    def node_record(self) -> dict | None:
        """The service's record of the node, None before it knows the node."""
        nodes = self.get("/v1/nodes")["data"]
        return next((node for node in nodes if node["name"] == NODE), None)

    def get(self, path: str) -> dict:
        """GET a service path as admin."""
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        response = httpx.get(f"{self.server_url}{path}", headers=headers, timeout=5)
        response.raise_for_status()
        return response.json()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """``interstice serve`` on SQLite, then munged, slurmctld and slurmd; all stopped after."""
    require_slurm()
    interstice = interstice_bin()
    (tmp_path / "log").mkdir()
    database = f"sqlite:///{tmp_path}/interstice.db"
    tokens = {
        role: subprocess.run(
            [interstice, "token", "create", "--role", role, "--db", database],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        for role in ("admin", "agent")
    }
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
        with slurm_cluster(tmp_path, [NODE], GRACE_S, agent_conf) as slurm:
            yield Cluster(slurm=slurm, server_url=server_url, admin_token=tokens["admin"])
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
