"""End to end with a user's own script: ``interstice serve`` + 4 real agents +
``examples/train_digits.py`` submitted with ``interstice job submit examples/digits.toml``.

2 nodes idle -> the job trains at world size 2; 2 more idle -> it grows to 4; one node
reclaimed with a grace -> the node is released within the grace and training goes on at
world size 3 until the sample budget is spent. Then: the script's held-out accuracy (its
final JSON line in rank 0's log, read with ``interstice job logs``) is at least 0.95, the
checkpoint and the final model are in the job directory, the metrics the script reported
come back through ``GET /v1/jobs/{id}/metrics`` and ``interstice job show``.

World sizes are judged from what the workers reported (the metrics series), not from what
the service planned.
"""

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")
pytest.importorskip("sklearn", reason="scikit-learn is not installed (pip install -e .[train])")
pytest.importorskip("fastapi", reason="the service's dependencies are not installed")

from interstice.agents.local_cluster import LocalCluster  # noqa: E402
from local_jobs import job_cli, last_json_line, reported_world_sizes, start_cluster  # noqa: E402

from interstice import wire  # noqa: E402

NODES = ["n0", "n1", "n2", "n3"]
RECLAIM_GRACE_S = 8.0
AGENT_GRACE_S = 10.0
DIGITS_TOML = Path(__file__).parents[2] / "examples" / "digits.toml"
TOTAL = "100000"  # samples: about 70 epochs of digits
RESCALE_TIMEOUT_S = 120.0  # a new generation on a shared 2-core machine: torch imports


def holder_of(cluster: LocalCluster, node: str) -> str | None:
    nodes = cluster.service_nodes()
    return next(n for n in nodes if n["name"] == node)["holder"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_digits_job_grows_shrinks_on_reclaim_and_reaches_its_accuracy(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, NODES, heartbeat_s=1.0, grace_s=AGENT_GRACE_S)
    start_cluster(cluster)
    try:
        cluster.node_events("idle", ["n0", "n1"])
        # A budget long enough for both rescales to happen while it trains.
        submitted = job_cli(cluster, "submit", str(DIGITS_TOML), "--total-samples", TOTAL)
        assert submitted.exit_code == 0, submitted.output
        job_id = submitted.stdout.split()[-1]

        cluster.wait_for(
            lambda: reported_world_sizes(cluster, job_id)[-1:] == [2],
            RESCALE_TIMEOUT_S,
            "world size 2 reported",
            period_s=0.5,
        )
        cluster.node_events("idle", ["n2", "n3"])
        cluster.wait_for(
            lambda: reported_world_sizes(cluster, job_id)[-1:] == [4],
            RESCALE_TIMEOUT_S,
            "world size 4 reported",
            period_s=0.5,
        )
        reclaimed_at = cluster.node_events("busy", ["n3"], grace_s=RECLAIM_GRACE_S)
        cluster.wait_for(
            lambda: holder_of(cluster, "n3") is None,
            RECLAIM_GRACE_S + 10,
            "n3 released",
            period_s=0.1,
        )
        released_after_s = time.time() - reclaimed_at.timestamp()
        waited = job_cli(cluster, "wait", job_id, "--timeout-s", "300", "--period-s", "1")
        assert waited.exit_code == 0, (waited.output, cluster.diagnostics())
        job = json.loads(job_cli(cluster, "show", job_id, "--json").stdout)
        metrics = cluster.request("user", "GET", f"/v1/jobs/{job_id}/metrics")
        api_log = cluster.request("user", "GET", f"/v1/jobs/{job_id}/logs", params={"rank": 0})
        cli_log = job_cli(cluster, "logs", job_id, "--rank", "0", "--tail", "20")
        shown = job_cli(cluster, "show", job_id)
    finally:
        cluster.close()

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
