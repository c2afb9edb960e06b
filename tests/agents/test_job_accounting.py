"""What the service records of a job agrees with the job's own files.

Timeline, with the service and two real agents as subprocesses (:class:`LocalCluster`), one
one-node job of the built-in worker:

1. only ``c0`` is idle: the job starts there (generation 1);
2. ``c0`` is reclaimed and ``c1`` falls idle: the job moves to ``c1`` (its generation on no
   node in between, then one on ``c1``). Each generation's ``cost_s`` equals the rescale cost
   of docs/concepts.md computed from the job's ``metrics.jsonl``: from the rescale's ``at``
   to the ``time`` of the generation's first line beyond its first step;
3. the job is cancelled: once its workers have stopped, its ``samples_done`` is the sample
   count of its last checkpoint (the workers' last report, sent after the cancel).

Every wait is bounded and on a condition.
"""

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")
pytest.importorskip("fastapi", reason="the service's dependencies are not installed")

import torch  # noqa: E402
from interstice.agents.local_cluster import LocalCluster  # noqa: E402
from local_jobs import start_cluster  # noqa: E402

from interstice import wire  # noqa: E402

NODES = ["c0", "c1"]
WAIT_S = 180.0  # a start on a loaded 2-core machine, with torch imported by the spare
JOB = {
    "model": "tinycnn",
    "min_nodes": 1,
    "max_nodes": 1,
    "total_samples": 10**9,
    "global_batch_size": 32,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = start_cluster(LocalCluster(tmp_path_factory.mktemp("accounting"), NODES))
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def job_id(cluster: LocalCluster) -> str:
    """The job, started on c0, then moved to c1, each generation's cost measured."""
    cluster.node_events("idle", NODES[:1])
    job_id = cluster.request("user", "POST", "/v1/jobs", json=JOB)["job_id"]
    cluster.wait_for(lambda: measured_on(cluster, job_id, "c0"), WAIT_S, "a cost on c0")
    cluster.node_events("busy", NODES[:1], grace_s=10.0)
    cluster.node_events("idle", NODES[1:])
    cluster.wait_for(lambda: measured_on(cluster, job_id, "c1"), WAIT_S, "a cost on c1")
    return job_id


def measured_on(cluster: LocalCluster, job_id: str, node: str) -> bool:
    """Whether the job's newest rescale put it on ``node`` and has its cost."""
    rescales = cluster.request("user", "GET", f"/v1/jobs/{job_id}")["rescales"]
    return (
        bool(rescales) and rescales[-1]["to_nodes"] == [node] and rescales[-1]["cost_s"] is not None
    )


def cost_from_metrics(cluster: LocalCluster, job: dict[str, Any], rescale: dict) -> float:
    """The rescale cost of docs/concepts.md from the job's files: the generation's lines of
    ``metrics.jsonl`` are those written after its workers resumed (the ``resume`` line of the
    built-in worker's step log; the workers of the generation before have exited by then,
    they hold the checkpoint's lock); the cost ends at the first beyond the first's step."""
    rendezvous = f"{job['job_id']}-g{rescale['generation']}"
    (resumed,) = [
        record["time"]
        for record in cluster.worker_records(job["job_id"])
        if record["event"] == "resume" and record["rendezvous_id"] == rendezvous
    ]
    text = wire.metrics_path(Path(job["job_dir"])).read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.endswith("}")]
    first, *later = [line for line in lines if line["time"] >= resumed]
    beyond = next(line for line in later if line["step"] > first["step"])
    return beyond["time"] - datetime.fromisoformat(rescale["at"]).timestamp()


def test_each_rescale_cost_is_the_one_of_the_metrics_file(cluster: LocalCluster, job_id: str):
    job = cluster.request("user", "GET", f"/v1/jobs/{job_id}")
    measured = [r for r in job["rescales"] if r["to_nodes"]]
    assert [r["to_nodes"] for r in measured] == [["c0"], ["c1"]]
    for rescale in measured:
        assert rescale["cost_s"] == pytest.approx(
            cost_from_metrics(cluster, job, rescale), abs=0.01
        ), rescale


def test_a_cancelled_job_shows_the_samples_of_its_last_checkpoint(
    cluster: LocalCluster, job_id: str
) -> None:
    job = cluster.request("user", "DELETE", f"/v1/jobs/{job_id}")
    assert job["state"] == "cancelled"
    rendezvous = f"{job_id}-g{job['rescales'][-2]['generation']}"  # the last one with a node
    cluster.wait_for(
        lambda: any(
            r["event"] == "exit" and r["rendezvous_id"] == rendezvous
            for r in cluster.worker_records(job_id)
        ),
        WAIT_S,
        "the workers' exit after the cancel",
    )
    checkpoint = torch.load(
        Path(job["checkpoint_dir"]) / "checkpoint.pt", map_location="cpu", weights_only=False
    )
    shown = cluster.wait_for(
        lambda: (
            (j := cluster.request("user", "GET", f"/v1/jobs/{job_id}"))["samples_done"]
            == checkpoint["samples"]
            and j
        ),
        30.0,
        f"samples_done {checkpoint['samples']}, the last checkpoint's",
    )
    assert shown["state"] == "cancelled"
