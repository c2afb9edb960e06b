"""The Hugging Face examples under real ``torchrun`` (CPU, gloo): ``examples/train_hf.py``
(``transformers.Trainer`` with interstice.elastic.hf) and ``examples/train_accelerate.py``
(a plain Accelerate loop with interstice.elastic.accelerate).

Timeline of the main test, for each example: a run at world size 2 gets SIGTERM after some
steps; the next, at 3, runs under GNU ``timeout``, which is signalled, so ``torchrun`` and
its workers get SIGTERM twice; the last, as ``python script.py`` (world size 1), trains to
the budget. Every index of every epoch is trained exactly once, and the final loss and
weights are an uninterrupted run's. Then: a run stopped before its first step or
checkpoint, and the Trainer example as an interstice job that grows and shrinks.

The multi-process tests take tens of seconds each: marked slow.
"""

import doctest
import importlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the hf extra is not installed")
pytest.importorskip("accelerate", reason="the hf extra is not installed")

import torch  # noqa: E402
from elastic_records import (  # noqa: E402
    EXAMPLES,
    assert_same_models,
    coverage_problems,
    read_records,
    result_of,
    torchrun,
    worker_env,
)
from interstice.agents.local_cluster import LocalCluster  # noqa: E402
from local_jobs import job_cli, last_json_line, reported_world_sizes  # noqa: E402
from polling import wait_until  # noqa: E402

from interstice import wire  # noqa: E402

DIGITS_TRAIN_LEN = 1437  # 80 % of scikit-learn's 1,797 digits
BATCH = 64
TOTAL = 8 * DIGITS_TRAIN_LEN  # 8 epochs: 180 steps of 64
STEPS_PER_RUN = 5  # at least this many steps before a run is stopped
JOB_TOTAL = 150_000  # samples: about 100 epochs, 2,344 steps
RESCALE_TIMEOUT_S = 120.0  # a new generation on a shared 2-core machine: torch imports
EXAMPLE_SCRIPTS = ["train_hf.py", "train_accelerate.py"]
# The rescaled job and the uninterrupted run step through the same global batches, the
# ranks' gradients summed in another order (gloo all-reduce of 2, then 3 partial sums), in
# float64, through AdamW, a warm-up + cosine schedule and gradient clipping. One sample
# skipped, repeated or reordered, or one step of the schedule lost, moves the weights by
# about lr * gradient, orders of magnitude above these bounds.
TOLERANCE = {"rtol": 1e-7, "atol": 1e-9}


def python_run(script: str, *args: str) -> dict:
    """``python examples/<script> ARGS`` (world size 1, no torchrun): its result line."""
    return result_of(
        subprocess.Popen(
            [sys.executable, str(EXAMPLES / script), *args],
            env=worker_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS)
def test_rescales_train_each_sample_once_and_end_as_an_uninterrupted_run(tmp_path, script):
    records = tmp_path / "records"
    common = ["--global-batch-size", str(BATCH), "--total-samples", str(TOTAL), "--seed", "3",
              "--float64"]  # fmt: skip
    job = [*common, "--checkpoint-dir", str(tmp_path / "job"), "--record-samples", str(records)]
    trained = 0

    def stopped_run(nproc: int, prefix: tuple[str, ...] = ()) -> dict:
        nonlocal trained
        run = torchrun(nproc, script, *job, prefix=prefix)
        wait_until(
            lambda: len(read_records(records)) >= trained + STEPS_PER_RUN * BATCH,
            180,
            f"{STEPS_PER_RUN} steps recorded",
            running=lambda: run.poll() is None,
        )
        run.send_signal(signal.SIGTERM)  # to timeout: it signals torchrun, then its group
        result = result_of(run)
        assert result["state"] == "stopped" and result["stop_reason"] == "signal", result
        assert result["samples"] > trained and result["samples"] == len(read_records(records))
        trained = result["samples"]
        return result

    stopped_run(2)
    stopped_run(3, prefix=("timeout", "-s", "TERM", "600"))
    last = python_run(script, *job)
    assert last["state"] == "finished" and last["world_sizes"] == [2, 3, 1], last
    if "global_step" in last:  # the Trainer's own counter went on across the runs
        assert last["global_step"] == last["steps"] == -(-TOTAL // BATCH)

    pairs = read_records(records)
    assert len(pairs) == last["samples"] >= TOTAL
    assert coverage_problems(pairs, DIGITS_TRAIN_LEN, last["samples"] // DIGITS_TRAIN_LEN) == []

    dedicated = python_run(script, *common, "--checkpoint-dir", str(tmp_path / "dedicated"))
    assert dedicated["world_sizes"] == [1] and dedicated["steps"] == last["steps"]
    assert last["loss"] == pytest.approx(dedicated["loss"], rel=TOLERANCE["rtol"])
    final = Path("final") / "model.pt"
    assert_same_models(tmp_path / "job" / final, tmp_path / "dedicated" / final, **TOLERANCE)


@pytest.mark.slow
def test_a_trainer_stopped_before_its_first_checkpoint_resumes_at_another_world_size(tmp_path):
    """SIGTERM as soon as the Trainer has built its State (the workers' lock exists): before
    any step or checkpoint, or a few steps in; the next run, at world size 1, finishes with
    every sample trained once, whichever it was."""
    checkpoints, records = tmp_path / "job", tmp_path / "records"
    job = ["--global-batch-size", str(BATCH), "--total-samples", str(4 * DIGITS_TRAIN_LEN),
           "--checkpoint-dir", str(checkpoints), "--record-samples", str(records)]  # fmt: skip
    first = torchrun(2, "train_hf.py", *job)
    wait_until(
        lambda: (checkpoints / "workers.lock").exists(),
        180,
        "the State built",
        interval_s=0.01,
        running=lambda: first.poll() is None,
    )
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=120)
    trained = len(read_records(records)) if records.exists() else 0
    assert trained < 4 * DIGITS_TRAIN_LEN

    last = python_run("train_hf.py", *job)
    assert last["state"] == "finished", last
    pairs = read_records(records)
    assert len(pairs) == last["samples"]
    assert coverage_problems(pairs, DIGITS_TRAIN_LEN, last["samples"] // DIGITS_TRAIN_LEN) == []


@pytest.mark.parametrize("name", ["hf", "accelerate"])
def test_docstring_examples(name):
    module = importlib.import_module(f"interstice.elastic.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_trainer_as_a_job_grows_shrinks_and_leaves_its_model_metrics_and_logs(tmp_path):
    """``interstice job submit examples/hf.toml`` on a local service with 3 agents: 2 nodes
    idle -> world size 2; a third -> 3; one reclaimed -> 2, to the end of the budget."""
    cluster = LocalCluster(tmp_path, ["n0", "n1", "n2"], heartbeat_s=1.0, grace_s=10.0)
    cluster.start()
    try:
        cluster.node_events("idle", ["n0", "n1"])
        # Long enough for both rescales: the generations train only seconds before each.
        toml = str(EXAMPLES / "hf.toml")
        submitted = job_cli(cluster, "submit", toml, "--total-samples", str(JOB_TOTAL))
        assert submitted.exit_code == 0, submitted.output
        job_id = submitted.stdout.split()[-1]
        for size, change in ((2, ("idle", ["n2"])), (3, ("busy", ["n2"])), (2, None)):
            cluster.wait_for(
                lambda size=size: reported_world_sizes(cluster, job_id)[-1:] == [size],
                RESCALE_TIMEOUT_S,
                f"world size {size} reported",
                period_s=0.5,
            )
            if change:
                cluster.node_events(*change, grace_s=8.0 if change[0] == "busy" else 0.0)
        waited = job_cli(cluster, "wait", job_id, "--timeout-s", "300", "--period-s", "1")
        assert waited.exit_code == 0, (waited.output, cluster.diagnostics())
        job = json.loads(job_cli(cluster, "show", job_id, "--json").stdout)
        metrics = cluster.request("user", "GET", f"/v1/jobs/{job_id}/metrics")
        log = job_cli(cluster, "logs", job_id, "--rank", "0", "--tail", "20")
        sizes = reported_world_sizes(cluster, job_id)
    finally:
        cluster.close()

    assert job["state"] == "finished" and job["samples_done"] >= JOB_TOTAL, job
    assert sizes[:3] == [2, 3, 2], sizes
    samples = [p["samples"] for p in metrics["data"]]
    assert samples == sorted(samples) and samples[-1] < JOB_TOTAL + BATCH
    final = last_json_line(log.stdout)
    assert final["state"] == "finished" and final["world_sizes"][:3] == [2, 3, 2], final
    assert final["global_step"] == final["steps"] and final["accuracy"] >= 0.9, final
    job_dir = Path(job["job_dir"])
    assert (wire.final_dir(job_dir) / wire.FINAL_MODEL_FILE).is_file()
    assert (wire.checkpoint_dir(job_dir) / "checkpoint.pt").is_file()
    assert wire.metrics_path(job_dir).is_file()
    assert len(wire.rank_log_files(job_dir, 0)) >= 3  # a log per generation


def test_a_scheduler_that_accelerate_steps_once_per_process_is_refused():
    """Its schedule would follow the world size: ``elastic_state`` says so instead."""
    from accelerate import Accelerator
    from interstice.elastic import ElasticSampler
    from interstice.elastic.accelerate import elastic_state

    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = accelerator.prepare(torch.optim.lr_scheduler.StepLR(optimizer, step_size=1))
    with pytest.raises(ValueError, match="once per process per optimizer step"):
        elastic_state(accelerator, model, optimizer, ElasticSampler(4, 2), scheduler)
