"""The Lightning example (``examples/train_lightning.py``: ``Trainer.fit`` with
interstice.elastic.lightning's callback) under real ``torchrun`` (CPU, gloo).

Timeline of the main test: a run at world size 2 gets SIGTERM after some steps; the next, at
3, runs under GNU ``timeout``, which is signalled, so ``torchrun`` and its workers get
SIGTERM twice; the last, at 1, trains to the budget. Every index of every epoch is trained
exactly once, and the final loss, weights, learning rate and Lightning's ``global_step``
are an uninterrupted ``python script.py`` run's. Then: a run killed (SIGKILL) before its
first checkpoint, restarted at another world size.

The multi-process tests take tens of seconds each: marked slow.
"""

import doctest
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning", reason="the lightning extra is not installed")

from elastic_records import (  # noqa: E402
    EXAMPLES,
    assert_same_models,
    coverage_problems,
    read_records,
    result_of,
    torchrun,
    worker_env,
)
from polling import wait_until  # noqa: E402

SCRIPT = "train_lightning.py"
DIGITS_TRAIN_LEN = 1437
BATCH = 64
TOTAL = 10 * DIGITS_TRAIN_LEN  # 225 steps of 64: the StepLR halves the LR at steps 100, 200
STEPS_PER_RUN = 10  # at least this many steps before a run is stopped
RUN_TIMEOUT_S = 300.0  # a run on a loaded 2-core machine, Lightning's imports included
# The rescaled job and the uninterrupted run train the same global batches; the ranks'
# gradients are weighted by their shares and summed in another order (gloo, 2 then 3
# ranks), in float64, through SGD with momentum and a step schedule. One sample skipped,
# repeated or reordered, or one schedule step lost, moves the weights by about
# lr * gradient, orders of magnitude above these bounds.
TOLERANCE = {"rtol": 1e-9, "atol": 1e-11}


def stopped_run(run: subprocess.Popen, records, trained: int, stop) -> dict:
    """Wait for ``STEPS_PER_RUN`` steps beyond ``trained`` recorded, ``stop(run)``, and
    return the stopped run's result line."""
    wait_until(
        lambda: len(read_records(records)) >= trained + STEPS_PER_RUN * BATCH,
        RUN_TIMEOUT_S,
        f"{STEPS_PER_RUN} steps recorded",
        running=lambda: run.poll() is None,
    )
    stop(run)
    result = result_of(run, RUN_TIMEOUT_S)
    assert result["state"] == "stopped" and result["stop_reason"] == "signal", result
    assert result["samples"] == len(read_records(records)) > trained
    assert result["global_step"] == result["steps"]
    return result


@pytest.mark.slow
def test_rescales_train_each_sample_once_and_end_as_an_uninterrupted_run(tmp_path):
    records = tmp_path / "records"
    common = ["--global-batch-size", str(BATCH), "--total-samples", str(TOTAL), "--seed", "3",
              "--float64"]  # fmt: skip
    job = [*common, "--checkpoint-dir", str(tmp_path / "job"), "--record-samples", str(records)]

    first = stopped_run(torchrun(2, SCRIPT, *job), records, 0, lambda run: run.terminate())
    twice = ("timeout", "-s", "TERM", str(int(RUN_TIMEOUT_S)))  # relays a SIGTERM to the group
    second = stopped_run(
        torchrun(3, SCRIPT, *job, prefix=twice), records, first["samples"], lambda r: r.terminate()
    )
    assert second["world_sizes"] == [2, 3]
    last = result_of(torchrun(1, SCRIPT, *job), RUN_TIMEOUT_S)
    assert last["state"] == "finished" and last["world_sizes"] == [2, 3, 1], last

    pairs = read_records(records)
    assert len(pairs) == last["samples"] >= TOTAL
    assert coverage_problems(pairs, DIGITS_TRAIN_LEN, last["samples"] // DIGITS_TRAIN_LEN) == []

    dedicated = subprocess.Popen(
        [sys.executable, str(EXAMPLES / SCRIPT), *common, "--checkpoint-dir", str(tmp_path / "d")],
        env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    reference = result_of(dedicated, RUN_TIMEOUT_S)  # python script.py: no torchrun
    assert reference["world_sizes"] == [1]
    for key in ("steps", "global_step", "epoch", "lr"):
        assert last[key] == reference[key], key
    assert last["loss"] == pytest.approx(reference["loss"], rel=TOLERANCE["rtol"])
    assert_same_models(
        tmp_path / "job" / "final" / "model.pt", tmp_path / "d" / "final" / "model.pt", **TOLERANCE
    )


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_starts_over_at_another_world_size(tmp_path):
    """SIGKILL to torchrun and its workers a few steps in, before any save (timed saves every
    60 s): nothing to resume, so the next run, at world size 3, trains all from the start."""
    checkpoints, records = tmp_path / "job", tmp_path / "records"
    job = ["--global-batch-size", str(BATCH), "--checkpoint-dir", str(checkpoints),
           "--record-samples", str(records)]  # fmt: skip
    long = ("--total-samples", str(100 * DIGITS_TRAIN_LEN))  # killed long before its end
    first = torchrun(2, SCRIPT, *job, *long)
    wait_until(
        lambda: len(list(records.glob("*.txt"))) == 2 and len(read_records(records)) >= 3 * BATCH,
        RUN_TIMEOUT_S,
        "3 steps recorded by both ranks",
        running=lambda: first.poll() is None,
    )
    first.kill()  # torchrun, then its workers (in sessions of their own): their record files
    for path in records.iterdir():  # are named rank<R>-pid<PID>.txt
        os.kill(int(path.stem.split("-pid")[1]), signal.SIGKILL)
    first.communicate(timeout=60)
    assert not (checkpoints / "checkpoint.pt").exists()
    for path in records.iterdir():  # what the killed run trained is trained again
        path.unlink()

    last = result_of(torchrun(3, SCRIPT, *job, "--total-samples", str(2 * DIGITS_TRAIN_LEN)))
    assert last["state"] == "finished" and last["world_sizes"] == [3], last
    pairs = read_records(records)
    assert len(pairs) == last["samples"]
    assert coverage_problems(pairs, DIGITS_TRAIN_LEN, last["samples"] // DIGITS_TRAIN_LEN) == []


@pytest.mark.slow
def test_plain_mode_runs_lightnings_own_ddp_without_interstice(tmp_path):
    """``--plain``: Lightning's DistributedSampler and DDP (what bench/ compares against)."""
    run = torchrun(2, SCRIPT, "--plain", "--total-samples", "640", "--checkpoint-dir",
                   str(tmp_path))  # fmt: skip
    result = result_of(run, RUN_TIMEOUT_S)
    assert (result["steps"], result["samples"], result["world_sizes"]) == (10, 640, [2])
    assert not (tmp_path / "checkpoint.pt").exists()


def test_docstring_examples():
    from interstice.elastic import lightning

    result = doctest.testmod(lightning, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_as_a_job_it_grows_shrinks_and_leaves_its_model_metrics_and_logs(tmp_path):
    """``interstice serve`` + 2 agents + ``examples/lightning.toml``: n0 idle -> world size
    1; n1 idle -> it grows to 2; n1 reclaimed -> it shrinks to 1 and trains to the budget.
    World sizes are judged from what the workers reported (the metrics series)."""
    pytest.importorskip("fastapi", reason="the service's dependencies are not installed")
    from interstice.agents.local_cluster import LocalCluster
    from local_jobs import job_cli, last_json_line, reported_world_sizes

    from interstice import wire

    def reported(sizes: list[int]) -> None:
        cluster.wait_for(
            lambda: reported_world_sizes(cluster, job_id)[-len(sizes) :] == sizes,
            RUN_TIMEOUT_S,
            f"world sizes {sizes} reported",
            period_s=0.5,
        )

    cluster = LocalCluster(tmp_path, ["n0", "n1"], heartbeat_s=1.0, grace_s=10.0)
    cluster.start()
    try:
        cluster.node_events("idle", ["n0"])
        # A budget that outlasts both rescales (about 200 epochs of the digits).
        toml = str(EXAMPLES / "lightning.toml")
        submitted = job_cli(cluster, "submit", toml, "--total-samples", "300000")
        assert submitted.exit_code == 0, submitted.output
        job_id = submitted.stdout.split()[-1]
        reported([1])
        cluster.node_events("idle", ["n1"])
        reported([1, 2])
        cluster.node_events("busy", ["n1"], grace_s=8.0)
        waited = job_cli(cluster, "wait", job_id, "--timeout-s", "400", "--period-s", "1")
        assert waited.exit_code == 0, (waited.output, cluster.diagnostics())
        job = job_cli(cluster, "show", job_id, "--json")
        metrics = cluster.request("user", "GET", f"/v1/jobs/{job_id}/metrics")["data"]
        log = job_cli(cluster, "logs", job_id, "--rank", "0", "--tail", "20")
    finally:
        cluster.close()

    job = json.loads(job.stdout)
    assert job["state"] == "finished" and job["samples_done"] >= job["total_samples"]
    sizes = [p["world_size"] for p in metrics if p["world_size"]]
    merged = [s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s]
    assert merged == [1, 2, 1], merged
    samples = [p["samples"] for p in metrics]
    assert samples == sorted(samples) and samples[-1] < job["total_samples"] + BATCH
    final = last_json_line(log.stdout)
    assert final["state"] == "finished" and final["world_sizes"] == [1, 2, 1], final
    job_dir = Path(job["job_dir"])
    assert (wire.checkpoint_dir(job_dir) / "checkpoint.pt").is_file()
    assert (wire.final_dir(job_dir) / wire.FINAL_MODEL_FILE).is_file()
    assert wire.metrics_path(job_dir).is_file()
    assert len(wire.rank_log_files(job_dir, 0)) >= 3  # a log per generation
