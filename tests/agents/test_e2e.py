"""End to end on this machine: ``interstice serve`` on SQLite and 4 real agents, one cluster
for the module, running two jobs one after the other (each test starts with no node idle and
no job running), both through the same timeline:

2 nodes idle -> the job trains at world size 2; 2 more idle -> it rescales to 4; one node
reclaimed with a grace of a few seconds -> released within the grace, training goes on at
world size 3.

1. A user's own script, ``examples/train_digits.py``, submitted with ``interstice job submit
   examples/digits.toml``: it trains at world size 3 until its sample budget is spent.
2. The built-in worker: then the service restarts and a training node's agent gets SIGTERM
   (Slurm preemption).

World sizes are judged from what the workers reported or logged, never from what the service
planned. A rescale may reach a node while its spare launcher still imports torch (tens of
seconds on a loaded 2-core machine): the agents' rendezvous wait :data:`JOIN_TIMEOUT_S` for
every node's launcher.
"""

import json
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from installed import skip_unless_installed

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")
skip_unless_installed("sklearn", reason="scikit-learn is not installed (pip install -e .[train])")
pytest.importorskip("fastapi", reason="the service's dependencies are not installed")

from interstice.agents.local_cluster import LocalCluster  # noqa: E402
from local_jobs import job_cli, last_json_line, reported_world_sizes, start_cluster  # noqa: E402

from interstice import wire  # noqa: E402

NODES = ["n0", "n1", "n2", "n3"]
RECLAIM_GRACE_S = 8.0
AGENT_GRACE_S = 10.0
JOIN_TIMEOUT_S = 120.0
RESCALE_TIMEOUT_S = 180.0  # bounds a wait that may include a spare's torch import
DIGITS_TOML = Path(__file__).parents[2] / "examples" / "digits.toml"
TOTAL = "40000"  # samples: about 28 epochs of digits
# Linear scaling, so the optimizer gives the built-in worker's job every idle node.
SCALABILITY_CSV = "model,nodes,samples_per_s\n" + "".join(
    f"tinycnn,{nodes},{100.0 * nodes}\n" for nodes in range(5)
)
ENDED = {"finished", "cancelled", "failed"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's service and agents (closed after its last test)."""
    cluster = LocalCluster(
        tmp_path_factory.mktemp("e2e"),
        NODES,
        heartbeat_s=1.0,
        grace_s=AGENT_GRACE_S,
        join_timeout_s=JOIN_TIMEOUT_S,
        scalability_csv=SCALABILITY_CSV,
    )
    start_cluster(cluster)
    try:
        yield cluster
    finally:
        cluster.close()


def no_node_idle(cluster: LocalCluster) -> None:
    """Cancel what an earlier test left running, mark every node busy, wait until every
    node is released and out of quarantine (an agent whose launcher warmed up slower than
    its registration wait registers with that fault, until its health check passes)."""
    for job in cluster.request("user", "GET", "/v1/jobs")["data"]:
        if job["state"] not in ENDED:
            cluster.request("user", "DELETE", f"/v1/jobs/{job['job_id']}")
    cluster.node_events("busy", NODES)
    cluster.wait_for(
        lambda: all(
            node["holder"] is None and node["quarantined_at"] is None
            for node in cluster.service_nodes()
        ),
        RESCALE_TIMEOUT_S,
        "every node released and out of quarantine",
    )


def holder_of(cluster: LocalCluster, node: str) -> str | None:
    nodes = cluster.service_nodes()
    return next(n for n in nodes if n["name"] == node)["holder"]


def steps_of(records: list[dict], **match: object) -> list[dict]:
    return [r for r in records if r["event"] == "step" and all(r[k] == v for k, v in match.items())]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_digits_job_grows_shrinks_on_reclaim_and_reaches_its_accuracy(
    cluster: LocalCluster,
) -> None:
    """The digits script through the timeline, then trained at world size 3 until the
    sample budget is spent: its held-out accuracy (its final JSON line in rank 0's log, read
    with ``interstice job logs``) is at least 0.95, the checkpoint and the final model are in
    the job directory, and the metrics the script reported come back through
    ``GET /v1/jobs/{id}/metrics`` and ``interstice job show``."""
    no_node_idle(cluster)
    cluster.node_events("idle", ["n0", "n1"])
    # A budget long enough for both rescales to happen while it trains (training pauses
    # while a rescale waits for a launcher).
    submitted = job_cli(cluster, "submit", str(DIGITS_TOML), "--total-samples", TOTAL)
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.split()[-1]

    cluster.wait_for(
        lambda: reported_world_sizes(cluster, job_id)[-1:] == [2],
        RESCALE_TIMEOUT_S,
        "world size 2 reported",
        period_s=0.2,
    )
    cluster.node_events("idle", ["n2", "n3"])
    cluster.wait_for(
        lambda: reported_world_sizes(cluster, job_id)[-1:] == [4],
        RESCALE_TIMEOUT_S,
        "world size 4 reported",
        period_s=0.2,
    )
    reclaimed_at = cluster.node_events("busy", ["n3"], grace_s=RECLAIM_GRACE_S)
    cluster.wait_for(lambda: holder_of(cluster, "n3") is None, RECLAIM_GRACE_S + 10, "n3 released")
    released_after_s = time.time() - reclaimed_at.timestamp()
    timeout = str(int(RESCALE_TIMEOUT_S + 120))
    waited = job_cli(cluster, "wait", job_id, "--timeout-s", timeout, "--period-s", "0.2")
    assert waited.exit_code == 0, (waited.output, cluster.diagnostics())
    job = json.loads(job_cli(cluster, "show", job_id, "--json").stdout)
    metrics = cluster.request("user", "GET", f"/v1/jobs/{job_id}/metrics")
    api_log = cluster.request("user", "GET", f"/v1/jobs/{job_id}/logs", params={"rank": 0})
    cli_log = job_cli(cluster, "logs", job_id, "--rank", "0", "--tail", "20")
    shown = job_cli(cluster, "show", job_id)

    # The reclaim was honoured within its grace (polling adds at most 0.1 s).
    assert released_after_s <= RECLAIM_GRACE_S + 0.2, released_after_s
    # Two rescales the workers saw: 2 -> 4, then 4 -> 3.
    sizes = [p["world_size"] for p in metrics["data"] if p["world_size"]]
    merged = [s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s]
    assert merged[:3] == [2, 4, 3], merged
    reasons = [r["reason"] for r in job["rescales"]]
    assert "reclaim" in reasons, job["rescales"]

    # The job spent its budget; the series is the job's cumulative samples.
    assert job["state"] == "finished" and job["samples_done"] >= job["total_samples"]
    samples = [p["samples"] for p in metrics["data"]]
    assert metrics["count"] == len(metrics["data"]) >= 3
    assert samples == sorted(samples)  # no sample counted twice across the rescales
    # whole global batches: the last step may pass the budget by less than one
    assert samples[-1] < job["total_samples"] + job["global_batch_size"]
    losses = [p["loss"] for p in metrics["data"] if p["loss"] is not None]
    assert 0 <= job["last_loss"] < losses[0]
    assert job_id in shown.stdout and "finished" in shown.stdout

    # Held-out accuracy from the script's final JSON line, through the CLI and the API.
    assert cli_log.exit_code == 0, cli_log.output
    final = last_json_line(cli_log.stdout)
    assert final == last_json_line(api_log["text"])
    accuracy = next(v for k, v in final.items() if "accuracy" in k)
    assert accuracy >= 0.95, final
    assert set(final["world_sizes"]) >= {2, 4, 3}, final

    # What the job leaves behind in its directory.
    job_dir = Path(job["job_dir"])
    assert any(wire.checkpoint_dir(job_dir).iterdir())
    assert (wire.final_dir(job_dir) / wire.FINAL_MODEL_FILE).is_file()
    assert len(wire.rank_log_files(job_dir, 0)) >= 3  # a log per generation
    assert job_dir.stat().st_mode & 0o777 == 0o700


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rescale_reclaim_restart_and_preemption_keep_every_step(cluster: LocalCluster) -> None:
    """The built-in worker through the timeline; the service restarts -> the agents report
    to it again, none counted lost, and training goes on; then a training node's agent gets
    SIGTERM (Slurm preemption) -> its workers checkpoint, it exits 0 within its grace and the
    service shows its node released.

    The training assertions are on what the workers logged (their step logs): the world sizes
    they saw, that the step counter continued exactly across each rescale (no step lost or
    repeated), and when the reclaimed node's worker exited.
    """
    no_node_idle(cluster)
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
    cluster.wait_for(
        lambda: cluster.latest_world_size(job_id) == 2, RESCALE_TIMEOUT_S, "world size 2"
    )

    cluster.node_events("idle", ["n2", "n3"])
    cluster.wait_for(
        lambda: cluster.latest_world_size(job_id) == 4, RESCALE_TIMEOUT_S, "world size 4"
    )

    reclaimed_at = cluster.node_events("busy", ["n3"], grace_s=RECLAIM_GRACE_S)
    cluster.wait_for(
        lambda: cluster.latest_world_size(job_id) == 3, RESCALE_TIMEOUT_S, "world size 3"
    )
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
    cluster.restart_service(down_s=0.5, timeout_s=RESCALE_TIMEOUT_S)
    cluster.wait_for(
        lambda: cluster.request("user", "GET", f"/v1/jobs/{job_id}")["samples_done"] > done_before,
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
