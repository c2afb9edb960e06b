"""The ranks agree on one stop reason, whichever of them saw the file or got the signal."""

import os
import signal
from pathlib import Path

import pytest
import torch
from interstice.models.launch import run_group

from interstice import elastic

pytestmark = pytest.mark.slow


def stop_after_two_steps(rank: int, world_size: int, folder: str, asks: dict) -> tuple:
    """Rank r asks to stop in step 2 as ``asks[r]`` says ("file", "signal" or absent)."""
    run_dir = Path(folder) / f"run-{rank}"  # node-local: each rank its own
    run_dir.mkdir()
    elastic.init()
    model = torch.nn.Linear(2, 1)
    sampler = elastic.ElasticSampler(1000, 4 * world_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = elastic.State(model=model, optimizer=optimizer, sampler=sampler, run_dir=run_dir)
    stopped_at = None
    for step in range(1, 6):
        if step == 2 and asks.get(rank) == "file":
            (run_dir / "stop").touch()
        if step == 2 and asks.get(rank) == "signal":
            os.kill(os.getpid(), signal.SIGTERM)
        state.step()
        if state.should_stop():
            stopped_at = step
            break
    state._signals.restore()
    return state.stop_reason, stopped_at


@pytest.mark.parametrize(
    ("asks", "reason"),
    [
        ({1: "file"}, "stop file"),  # rank 0 never saw a file: it still says why
        ({2: "signal"}, "signal"),
        ({0: "file", 2: "signal"}, "signal"),  # a signal (a preemption) outranks a file
    ],
)
def test_every_rank_reports_the_same_reason_at_the_same_step(tmp_path, asks, reason):
    results = run_group(stop_after_two_steps, 3, (str(tmp_path), asks))
    assert results == [(reason, 3)] * 3
