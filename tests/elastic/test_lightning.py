"""The Lightning example (``examples/train_lightning.py``: ``Trainer.fit`` with
interstice.elastic.lightning's callback) under real ``torchrun`` (CPU, gloo).

Timeline of the main test: a run at world size 1 is killed (SIGKILL to torchrun and its
worker) a few steps in, before its first checkpoint, so the next run, at 2, starts over; it
gets SIGTERM after some steps; the next, at 3, runs under GNU ``timeout``, which is
signalled, so ``torchrun`` and its workers get SIGTERM twice; the last, as ``python
script.py`` (world size 1), trains to the budget. Every index of every epoch is trained
exactly once, and the final loss, weights, learning rate and Lightning's ``global_step`` are
an uninterrupted run's. Then: Lightning's own DDP (``--plain``), and the example as an
interstice job that grows and shrinks.

The multi-process tests take tens of seconds each: marked slow.
"""

import doctest

import pytest
from installed import skip_unless_installed

skip_unless_installed("lightning", reason="the lightning extra is not installed")

from elastic_records import (  # noqa: E402
    assert_same_models,
    coverage_problems,
    grow_and_shrink_job,
    job_cluster,
    kill_before_first_checkpoint,
    python_run,
    read_records,
    result_of,
    stopped_run,
    torchrun,
)

SCRIPT = "train_lightning.py"
DIGITS_TRAIN_LEN = 1437
BATCH = 64
TOTAL = 5 * DIGITS_TRAIN_LEN  # 113 steps of 64: the StepLR halves the LR at step 100
STEPS_PER_RUN = 10  # at least this many steps before a run is stopped
JOB_TOTAL = 60_000  # samples: about 42 epochs, 938 steps, outlasting both rescales
RUN_TIMEOUT_S = 300.0  # a run on a loaded 2-core machine, Lightning's imports included
# The rescaled job and the uninterrupted run train the same global batches; the ranks'
# gradients are weighted by their shares and summed in another order (gloo, 2 then 3
# ranks), in float64, through SGD with momentum and a step schedule. One sample skipped,
# repeated or reordered, or one schedule step lost, moves the weights by about
# lr * gradient, orders of magnitude above these bounds.
TOLERANCE = {"rtol": 1e-9, "atol": 1e-11}


@pytest.mark.slow
def test_rescales_train_each_sample_once_and_end_as_an_uninterrupted_run(tmp_path):
    records, checkpoints = tmp_path / "records", tmp_path / "job"
    common = ["--global-batch-size", str(BATCH), "--total-samples", str(TOTAL), "--seed", "3",
              "--float64"]  # fmt: skip
    job = [*common, "--checkpoint-dir", str(checkpoints), "--record-samples", str(records)]
    # The uninterrupted run, meanwhile: it shares nothing with the job.
    dedicated = python_run(SCRIPT, *common, "--checkpoint-dir", str(tmp_path / "dedicated"))

    kill_before_first_checkpoint(
        torchrun(1, SCRIPT, *job), 1, records, checkpoints, 3 * BATCH, RUN_TIMEOUT_S
    )  # timed saves come every 60 s: none yet
    runs = []
    for nproc, prefix in ((2, ()), (3, ("timeout", "-s", "TERM", str(int(RUN_TIMEOUT_S))))):
        trained = runs[-1]["samples"] if runs else 0  # timeout relays a SIGTERM to the group
        run = torchrun(nproc, SCRIPT, *job, prefix=prefix)
        runs.append(stopped_run(run, records, trained, STEPS_PER_RUN * BATCH, RUN_TIMEOUT_S))
        assert runs[-1]["global_step"] == runs[-1]["steps"], runs[-1]
    assert runs[-1]["world_sizes"] == [2, 3], runs  # the killed run left nothing to resume
    last = result_of(python_run(SCRIPT, *job), RUN_TIMEOUT_S)
    assert last["state"] == "finished" and last["world_sizes"] == [2, 3, 1], last

    pairs = read_records(records)
    assert len(pairs) == last["samples"] >= TOTAL
    assert coverage_problems(pairs, DIGITS_TRAIN_LEN, last["samples"] // DIGITS_TRAIN_LEN) == []

    reference = result_of(dedicated, RUN_TIMEOUT_S)
    assert reference["world_sizes"] == [1]
    for key in ("steps", "global_step", "epoch", "lr"):
        assert last[key] == reference[key], key
    assert last["loss"] == pytest.approx(reference["loss"], rel=TOLERANCE["rtol"])
    assert_same_models(
        checkpoints / "final" / "model.pt",
        tmp_path / "dedicated" / "final" / "model.pt",
        **TOLERANCE,
    )


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
@pytest.mark.timeout(600)
def test_as_a_job_it_grows_shrinks_and_leaves_its_model_metrics_and_logs(tmp_path):
    """``interstice job submit examples/lightning.toml`` on a local service with 2 agents:
    world size 1, 2 when a second node is idle, 1 again when it is reclaimed, to the budget."""
    pytest.importorskip("fastapi", reason="the service's dependencies are not installed")
    cluster = job_cluster(tmp_path)
    try:
        final = grow_and_shrink_job(cluster, "lightning.toml", JOB_TOTAL, RUN_TIMEOUT_S)
    finally:
        cluster.close()
    assert final["global_step"] == final["steps"], final
