"""A worker that does not reach its first step writes its stacks to stderr, once; one that
steps does not (interstice.elastic.watchdog)."""

import os
import subprocess
import sys
import textwrap

import pytest
from interstice.elastic import watchdog

from interstice import wire

# A world of one that calls elastic.init(), does FIRST (nothing, a report, or a State step),
# then waits in a function whose name the dump must show.
SCRIPT = textwrap.dedent(
    """
    import sys, time
    import torch
    from interstice import elastic

    def waiting_for_a_peer():
        time.sleep(2)  # past the 1 s dump time, with a second to spare

    # Before elastic.init(): an optimizer's first construction imports torch._dynamo, which
    # took more than the 1 s dump time on a loaded machine.
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    elastic.init()
    if sys.argv[1] == "report":
        elastic.report(step=1, samples=4)
    elif sys.argv[1] == "state step":
        state = elastic.State(
            model=model, optimizer=optimizer, sampler=elastic.ElasticSampler(8, 4, seed=0)
        )
        state.step()
    waiting_for_a_peer()
    print("done")
    """
)


def run_worker(first: str, environ: dict[str, str]) -> subprocess.CompletedProcess:
    """The script with ``first`` as its argument, in a clean interstice environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INTERSTICE_", "RANK"))}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, first],
        env=env | environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_worker_that_has_not_stepped_dumps_where_it_waits_once_and_goes_on() -> None:
    done = run_worker("none", {wire.ENV_FIRST_STEP_DUMP_S: "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    assert done.stderr.count("Timeout (0:00:01)!") == 1, done.stderr
    assert "waiting_for_a_peer" in done.stderr


@pytest.mark.parametrize("first", ["report", "state step"])
def test_a_worker_that_stepped_dumps_nothing(first: str) -> None:
    done = run_worker(first, {wire.ENV_FIRST_STEP_DUMP_S: "1"})
    assert done.returncode == 0, done.stderr
    assert "Timeout" not in done.stderr
    assert "waiting_for_a_peer" not in done.stderr


def test_the_dump_is_on_under_an_interstice_job_and_off_elsewhere() -> None:
    assert watchdog.dump_after_s({}) == 0
    assert watchdog.dump_after_s({wire.ENV_JOB_ID: "j-1"}) == watchdog.DEFAULT_FIRST_STEP_DUMP_S
    assert watchdog.dump_after_s({wire.ENV_JOB_ID: "j-1", wire.ENV_FIRST_STEP_DUMP_S: "0"}) == 0
    assert watchdog.dump_after_s({wire.ENV_FIRST_STEP_DUMP_S: "2.5"}) == 2.5


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_dump_time_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match=wire.ENV_FIRST_STEP_DUMP_S):
        watchdog.dump_after_s({wire.ENV_FIRST_STEP_DUMP_S: value})
