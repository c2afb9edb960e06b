"""The live service the guides' bash blocks run against: ``interstice serve`` on SQLite and
:data:`NODES` real agents on this machine that report their nodes idle at once (as a Slurm
Prolog's agent does), so a job submitted by a block trains. One for all the pages: it starts
in about 25 s on 2 cores, while a page's blocks take seconds."""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

NODES = ["g0", "g1"]
"""The agents' node names: two nodes, so an elastic job can run at world size 2."""
READY_TIMEOUT_S = 120.0
"""Most seconds for the service and the agents to be ready (torch imports on 2 cores)."""
ACTIVE_STATES = ("queued", "running")


@dataclass
class GuideService:
    """The running service, for the bash blocks and the cleaning between pages."""

    cluster: object  # interstice.agents.local_cluster.LocalCluster
    env: dict[str, str]

    def cancel_active_jobs(self) -> list[str]:
        """Cancel every queued or running job (a page's leftovers); their ids."""
        cancelled = []
        for state in ACTIVE_STATES:
            params = {"state": state, "limit": 1000}
            for job in self.cluster.request("admin", "GET", "/v1/jobs", params=params)["data"]:
                try:
                    self.cluster.request("admin", "DELETE", f"/v1/jobs/{job['job_id']}")
                except httpx.HTTPStatusError as error:
                    if error.response.status_code != 409:  # 409: it ended meanwhile
                        raise
                else:
                    cancelled.append(job["job_id"])
        return cancelled


@pytest.fixture(scope="module")  # stopped after the module: its agents hold torch in memory
def guide_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuideService]:
    """The service and its agents, every node idle with a ready agent."""
    pytest.importorskip("fastapi", reason="the service's dependencies are not installed")
    pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")
    from interstice.agents.local_cluster import LocalCluster
    from local_jobs import start_cluster

    root: Path = tmp_path_factory.mktemp("guide-service")
    cluster = LocalCluster(root, nodes=[], heartbeat_s=1.0, grace_s=10.0)
    try:
        start_cluster(cluster, timeout_s=READY_TIMEOUT_S)
        for node in NODES:
            cluster.start_agent(node, "--report-idle")
        cluster.wait_for(
            lambda: (
                all(n["allocatable"] for n in cluster.service_nodes())
                and len(cluster.service_nodes()) == len(NODES)
            ),
            READY_TIMEOUT_S,
            "every guide node idle with an alive agent",
            period_s=0.5,
        )
        yield GuideService(
            cluster=cluster,
            env={
                "INTERSTICE_SERVER": cluster.url,
                "INTERSTICE_TOKEN": cluster.tokens["user"],
                "INTERSTICE_SCHEDULER_TOKEN": cluster.tokens["scheduler"],
                "INTERSTICE_DB_URL": f"sqlite:///{root / 'interstice.db'}",
            },
        )
    finally:
        cluster.close()
