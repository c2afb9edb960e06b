"""A broken node is no black hole: an agent whose Python cannot import torch (a ``torch``
package on its ``PYTHONPATH`` that raises what a Python without torch raises), next to a
healthy agent, and 6 one-node jobs submitted as soon as the broken agent registered. The
broken agent registers with its launcher's fault, so the service quarantines its node: it
shows so in ``/v1/nodes`` and ``interstice_nodes_quarantined``, and the jobs run on the
healthy node, one after the other; at most 1 of the 6 fails.

The service and both agents are real processes (:class:`LocalCluster`); every wait is on a
condition with a bound.
"""

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")
pytest.importorskip("fastapi", reason="the service's dependencies are not installed")

from interstice.agents.local_cluster import LocalCluster  # noqa: E402
from local_jobs import start_cluster  # noqa: E402
from shadow_torch import NO_TORCH, shadow_torch  # noqa: E402

JOBS = 6
ENDED = ("finished", "failed", "cancelled")


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    """The service, the agent of ``broken`` (its Python finds no torch) registered, and the
    agent of ``healthy`` started; both nodes idle."""
    cluster = start_cluster(LocalCluster(tmp_path / "cluster", [], heartbeat_s=1.0))
    try:
        shadow_torch(tmp_path, monkeypatch, NO_TORCH)
        cluster.start_agent("broken")
        monkeypatch.undo()  # the broken agent has its environment
        cluster.start_agent("healthy")
        cluster.node_events("idle", ["broken", "healthy"])
        cluster.wait_for(
            lambda: nodes(cluster)["broken"]["agent"], 60, "the broken agent registered"
        )
        yield cluster
    finally:
        cluster.close()


def nodes(cluster: LocalCluster) -> dict[str, dict]:
    return {node["name"]: node for node in cluster.service_nodes("admin")}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_node_without_torch_fails_at_most_one_of_six_jobs(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text("print('training')\n")
    body = {
        "min_nodes": 1,
        "max_nodes": 1,
        "total_samples": 1000,
        "command": ["train.py"],
        "workdir": str(tmp_path),
    }
    jobs = [cluster.request("user", "POST", "/v1/jobs", json=body)["job_id"] for _ in range(JOBS)]

    def states() -> list[str]:
        return [cluster.request("user", "GET", f"/v1/jobs/{job}")["state"] for job in jobs]

    cluster.wait_for(lambda: all(s in ENDED for s in states()), 540, "every job ended", 0.5)
    assert states().count("failed") <= 1, states()

    broken, healthy = nodes(cluster)["broken"], nodes(cluster)["healthy"]
    assert broken["quarantined_at"] is not None and broken["allocatable"] is False
    assert "ModuleNotFoundError: No module named 'torch'" in broken["quarantine_reason"]
    assert healthy["quarantined_at"] is None and healthy["quarantine_reason"] is None
    metrics = httpx.get(f"{cluster.url}/metrics", timeout=30).text
    assert "interstice_nodes_quarantined 1.0" in metrics.splitlines()
