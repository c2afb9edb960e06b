"""The Hugging Face examples under real ``torchrun`` (CPU, gloo): ``examples/train_hf.py``
(``transformers.Trainer`` with interstice.elastic.hf) and ``examples/train_accelerate.py``
(a plain Accelerate loop with interstice.elastic.accelerate).

Timeline of the main test, for each example: a run at world size 1 is killed (SIGKILL to
torchrun and its worker) a few steps in, before its first checkpoint, so the next run, at 2,
starts over; it gets SIGTERM after some steps; the next, at 3, runs under GNU ``timeout``,
which is signalled, so ``torchrun`` and its workers get SIGTERM twice; the last, as
``python script.py`` (world size 1), trains to the budget. Every index of every epoch is
trained exactly once, and the final loss and weights are an uninterrupted run's. Then each
example as an interstice job that grows and shrinks.

The multi-process tests take tens of seconds each: marked slow.
"""

import doctest
import importlib
from pathlib import Path

import pytest
from installed import skip_unless_installed

skip_unless_installed("transformers", reason="the hf extra is not installed")
skip_unless_installed("accelerate", reason="the hf extra is not installed")

import torch  # noqa: E402
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

DIGITS_TRAIN_LEN = 1437  # 80 % of scikit-learn's 1,797 digits
BATCH = 64
TOTAL = 4 * DIGITS_TRAIN_LEN  # 4 epochs: 90 steps of 64
STEPS_PER_RUN = 5  # at least this many steps before a run is stopped
JOB_TOTAL = 100_000  # samples: about 70 epochs, 1,563 steps: on a quiet machine world size 1
# trains most of them while the second node warms, and world size 2 must outlast the shrink
RUN_TIMEOUT_S = 180.0  # a run on a loaded 2-core machine, the imports included
EXAMPLE_SCRIPTS = ["train_hf.py", "train_accelerate.py"]
# The rescaled job and the uninterrupted run step through the same global batches, the
# ranks' gradients summed in another order (gloo all-reduce of 2, then 3 partial sums), in
# float64, through AdamW, a warm-up + cosine schedule and gradient clipping. One sample
# skipped, repeated or reordered, or one step of the schedule lost, moves the weights by
# about lr * gradient, orders of magnitude above these bounds.
TOLERANCE = {"rtol": 1e-7, "atol": 1e-9}


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS)
def test_rescales_train_each_sample_once_and_end_as_an_uninterrupted_run(tmp_path, script):
    records, checkpoints = tmp_path / "records", tmp_path / "job"
    common = ["--global-batch-size", str(BATCH), "--total-samples", str(TOTAL), "--seed", "3",
              "--float64"]  # fmt: skip
    job = [*common, "--checkpoint-dir", str(checkpoints), "--record-samples", str(records)]
    # The uninterrupted run, meanwhile: it shares nothing with the job.
    dedicated = python_run(script, *common, "--checkpoint-dir", str(tmp_path / "dedicated"))

    kill_before_first_checkpoint(torchrun(1, script, *job), 1, records, checkpoints, 3 * BATCH)
    first = stopped_run(torchrun(2, script, *job), records, 0, STEPS_PER_RUN * BATCH)
    assert first["world_sizes"] == [2], first  # the killed run left nothing to resume
    twice = ("timeout", "-s", "TERM", str(int(RUN_TIMEOUT_S)))  # relays a SIGTERM to the group
    second = stopped_run(
        torchrun(3, script, *job, prefix=twice), records, first["samples"], STEPS_PER_RUN * BATCH
    )
    assert second["world_sizes"] == [2, 3], second
    last = result_of(python_run(script, *job), RUN_TIMEOUT_S)
    assert last["state"] == "finished" and last["world_sizes"] == [2, 3, 1], last
    if "global_step" in last:  # the Trainer's own counter went on across the runs
        assert last["global_step"] == last["steps"] == -(-TOTAL // BATCH)

    pairs = read_records(records)
    assert len(pairs) == last["samples"] >= TOTAL
    assert coverage_problems(pairs, DIGITS_TRAIN_LEN, last["samples"] // DIGITS_TRAIN_LEN) == []

    reference = result_of(dedicated, RUN_TIMEOUT_S)
    assert reference["world_sizes"] == [1] and reference["steps"] == last["steps"]
    assert last["loss"] == pytest.approx(reference["loss"], rel=TOLERANCE["rtol"])
    final = Path("final") / "model.pt"
    assert_same_models(checkpoints / final, tmp_path / "dedicated" / final, **TOLERANCE)


@pytest.mark.parametrize("name", ["hf", "accelerate"])
def test_docstring_examples(name):
    module = importlib.import_module(f"interstice.elastic.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One local service with 2 agents for both examples' jobs, one after the other."""
    pytest.importorskip("fastapi", reason="the service's dependencies are not installed")
    cluster = job_cluster(tmp_path_factory.mktemp("cluster"))
    yield cluster
    cluster.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("toml", ["hf.toml", "accelerate.toml"])
def test_as_a_job_it_grows_shrinks_and_leaves_its_model_metrics_and_logs(cluster, toml):
    """``interstice job submit examples/<toml>`` on a local service with 2 agents: world
    size 1, 2 when a second node is idle, 1 again when it is reclaimed, to the budget."""
    final = grow_and_shrink_job(cluster, toml, JOB_TOTAL, RUN_TIMEOUT_S)
    assert final["accuracy"] >= 0.9, final
    if "global_step" in final:  # the Trainer's own counter went on across the generations
        assert final["global_step"] == final["steps"], final


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
