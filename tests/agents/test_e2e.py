"""End to end on this machine: the service on SQLite, 4 real agents, real elastic workers.

2 nodes idle -> the job trains at world size 2; 2 more idle -> it rescales to 4; one node
reclaimed with a grace of a few seconds -> released within the grace, training goes on at
world size 3; the service restarts -> the agents report to it again, none counted lost, and
training goes on; then a training node's agent gets SIGTERM (Slurm preemption) -> its
workers checkpoint, it exits 0 within its grace and the service shows its node released.

The training assertions are on what the workers logged (their step logs), never on what
the service planned: the world sizes they saw, that the step counter continued exactly
across each rescale (no step lost or repeated), and when the reclaimed node's worker exited.
"""

import time
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")
pytest.importorskip("fastapi", reason="the service's dependencies are not installed")

from interstice.agents.local_cluster import LocalCluster  # noqa: E402
from local_jobs import start_cluster  # noqa: E402

NODES = ["n0", "n1", "n2", "n3"]
RECLAIM_GRACE_S = 8.0
AGENT_GRACE_S = 10.0
# Linear scaling, so the optimizer gives the job every idle node.
SCALABILITY_CSV = "model,nodes,samples_per_s\n" + "".join(
    f"tinycnn,{nodes},{100.0 * nodes}\n" for nodes in range(5)
)


def steps_of(records: list[dict], **match: object) -> list[dict]:
    return [r for r in records if r["event"] == "step" and all(r[k] == v for k, v in match.items())]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_rescale_reclaim_restart_and_preemption_keep_every_step(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path, NODES, heartbeat_s=1.0, grace_s=AGENT_GRACE_S, scalability_csv=SCALABILITY_CSV
    )
    start_cluster(cluster)
    try:
        cluster.node_events("idle", ["n0", "n1"])
        job = cluster.request(
            "user",
            "POST",
            "/v1/jobs",
            json={
                "model": "tinycnn",
                "min_nodes": 1,
                "max_nodes": 4,
                "total_samples": 10000000,
                "global_batch_size": 16,
                "parallelism": "dp",
            },
        )
        job_id = job["job_id"]
        cluster.wait_for(lambda: cluster.latest_world_size(job_id) == 2, 90, "world size 2")

        cluster.node_events("idle", ["n2", "n3"])
        cluster.wait_for(lambda: cluster.latest_world_size(job_id) == 4, 90, "world size 4")

        reclaimed_at = cluster.node_events("busy", ["n3"], grace_s=RECLAIM_GRACE_S)
        cluster.wait_for(lambda: cluster.latest_world_size(job_id) == 3, 90, "world size 3")
        resumed = max(r["step"] for r in steps_of(cluster.worker_records(job_id)))
        cluster.wait_for(
            lambda: (
                len(steps_of(cluster.worker_records(job_id), world_size=3, rank=0)) >= 5
                and max(r["step"] for r in steps_of(cluster.worker_records(job_id))) > resumed + 3
            ),
            60,
            "5 steps at world size 3",
        )
        # A service restart: the agents retry with backoff and report again; their workers
        # never noticed (no new generation is needed for that).
        done_before = cluster.request("user", "GET", f"/v1/jobs/{job_id}")["samples_done"]
        cluster.restart_service()
        cluster.wait_for(
            lambda: (
                cluster.request("user", "GET", f"/v1/jobs/{job_id}")["samples_done"] > done_before
            ),
            60,
            "heartbeats reaching the restarted service",
        )
        assert all(agent.process.poll() is None for agent in cluster.agents.values())
        # No agent was counted lost by the restarted service (they retry it at least once
        # per heartbeat interval), so no generation was stopped for it.
        rescales = cluster.request("user", "GET", f"/v1/jobs/{job_id}")["rescales"]
        assert "agent_lost" not in {r["reason"] for r in rescales}

        # Slurm preemption: SIGTERM to a training node's agent. Its workers checkpoint and
        # exit, it releases the node and exits 0, all within its grace period.
        signalled = time.monotonic()
        assert cluster.stop_agent("n0", timeout_s=AGENT_GRACE_S + 5) == 0
        assert time.monotonic() - signalled < AGENT_GRACE_S
        nodes = cluster.service_nodes()
        assert next(n for n in nodes if n["name"] == "n0")["holder"] is None
        records = cluster.worker_records(job_id)
    finally:
        cluster.close()
    on_n0 = [r for r in records if r["log_node"] == "n0"]
    assert on_n0[-1]["event"] == "exit" and on_n0[-1]["outcome"] == "stopped", (
        f"n0's last records {on_n0[-3:]}\n{cluster.diagnostics()}"
    )

    # The world sizes the workers saw, in order: 2, then 4, then 3 (then maybe 2 after n0
    # left: the records end there).
    generations: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        generations[record["rendezvous_id"]].append(record)
    # (A generation replaced before its first step, e.g. by a second replan within
    # moments, trained nothing and is left out.)
    ordered = sorted(
        (rs for rs in generations.values() if steps_of(rs)), key=lambda rs: rs[0]["time"]
    )
    assert [rs[0]["world_size"] for rs in ordered][:3] == [2, 4, 3], cluster.diagnostics()

    # Within a generation every rank did every step once, in order; the next generation
    # resumes at the step where the last one checkpointed and exited.
    previous_exit = 0
    for generation in ordered:
        world_size = generation[0]["world_size"]
        assert {r["world_size"] for r in generation} == {world_size}
        resumes = [r["step"] for r in generation if r["event"] == "resume"]
        assert resumes == [previous_exit] * world_size
        per_rank = defaultdict(list)
        for record in steps_of(generation):
            per_rank[record["rank"]].append(record["step"])
        for steps in per_rank.values():
            assert steps == list(range(previous_exit + 1, previous_exit + 1 + len(steps)))
        if generation is not ordered[-1]:  # the last one may still be running
            assert sorted(per_rank) == list(range(world_size))
            exits = [r["step"] for r in generation if r["event"] == "exit"]
            assert exits == [previous_exit + len(per_rank[0])] * world_size
            previous_exit = exits[0]

    # The reclaimed node's worker checkpointed and exited within the grace period, and
    # no worker ran on it afterwards.
    on_n3 = [r for r in records if r["log_node"] == "n3"]
    assert on_n3[-1]["event"] == "exit"
    assert on_n3[-1]["time"] <= reclaimed_at.timestamp() + RECLAIM_GRACE_S
