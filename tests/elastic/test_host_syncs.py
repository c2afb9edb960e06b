"""The elastic loop waits for the device (or its peers) at most once per ``k`` steps.

On a GPU, every ``.item()``, ``.tolist()``, blocking copy, ``Work.wait()`` on the host or
``synchronize()`` makes the host wait until the device has run everything queued, and a loop
that does so at every step loses the queue that hides the host's own work. The CPU test counts
those calls made from inside the elastic calls of the documented loop (``State.step``,
``elastic.report``, ``State.should_stop``, ``elastic.accumulate``) with wrappers around them,
so no CUDA is needed; the GPU test (``-m gpu``) checks the same with CUDA's sync debug mode.
"""

import contextlib
import importlib
import math
import warnings
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.distributed as dist
from interstice.models.launch import run_group
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from interstice import elastic

STEPS = 100
GLOBAL_BATCH = 8
WARMUP_SYNC_STEPS = 3  # k is 1 until rank 0 has timed a step (the first two sync steps)

state_module = importlib.import_module("interstice.elastic.state")


class SyncCounter:
    """Counts host synchronisations and collectives while :meth:`counting` is active.

    Syncs: ``Tensor.item/tolist/cpu/numpy`` and conversions to Python numbers or bools,
    ``Work.wait()`` (on the host), ``torch.cuda.synchronize`` and the ``synchronize`` of CUDA
    events and streams. Collectives: ``all_reduce``, ``broadcast``, ``barrier``... The step
    each one happened at is recorded (``step_of()`` is read when it happens).
    """

    SYNCS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__")
    COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "barrier", "broadcast_object_list")

    def __init__(self, step_of: Callable[[], int]) -> None:
        self.step_of = step_of
        self.active = False
        self.syncs: list[tuple[int, str]] = []
        self.collectives: list[tuple[int, str]] = []
        self._undo: list[tuple[object, str, object]] = []
        for name in self.SYNCS:
            self._wrap(torch.Tensor, name, self.syncs)
        self._wrap(dist.Work, "wait", self.syncs)
        self._wrap(torch.cuda, "synchronize", self.syncs)
        self._wrap(torch.cuda.Event, "synchronize", self.syncs)
        self._wrap(torch.cuda.Stream, "synchronize", self.syncs)
        for name in self.COLLECTIVES:
            self._wrap(dist, name, self.collectives)

    def _wrap(self, owner: object, name: str, into: list) -> None:
        original = getattr(owner, name)

        def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if self.active:
                into.append((self.step_of(), f"{getattr(owner, '__name__', owner)}.{name}"))
            return original(*args, **kwargs)

        self._undo.append((owner, name, original))
        setattr(owner, name, counted)

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False

    def restore(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)


def documented_loop(state: elastic.State, ddp: torch.nn.Module, counter: SyncCounter) -> None:
    """The README's loop (one ``DataLoader`` pass after another), elastic calls counted."""
    device = elastic.current().device
    optimizer, sampler = state.optimizer, state.sampler
    data = TensorDataset(torch.randn(50, 4), torch.randn(50, 1))
    loader = DataLoader(data, batch_sampler=sampler)
    with counter.counting():
        stop = state.should_stop()
    while not stop:
        for batch in loader:
            optimizer.zero_grad()
            loss_sum = torch.zeros((), device=device)
            micro_batches = elastic.accumulate(ddp, batch, GLOBAL_BATCH)
            while True:
                with counter.counting():  # the generator's own work
                    item = next(micro_batches, None)
                if item is None:
                    break
                (x, y), scale = item
                loss = torch.nn.functional.mse_loss(
                    ddp(x.to(device)), y.to(device), reduction="sum"
                )
                (loss * scale).backward()
                loss_sum += loss.detach()
            optimizer.step()
            with counter.counting():
                state.step(loss_sum=loss_sum)
                elastic.report(step=state.steps, samples=state.samples, loss=state.loss)
                stop = state.should_stop()
            if stop:
                break


def sync_steps(rank: int, world_size: int) -> dict:
    """Train STEPS steps of the documented loop (k forced to its maximum) and count."""
    state_module.SYNC_INTERVAL_S = math.inf  # rank 0 asks for the largest k once it timed a step
    ctx = elastic.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to(ctx.device)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    sampler = elastic.ElasticSampler(50, GLOBAL_BATCH, seed=0)
    state = elastic.State(
        model=ddp, optimizer=optimizer, sampler=sampler, total_samples=STEPS * GLOBAL_BATCH
    )
    counter = SyncCounter(lambda: state.steps)
    try:
        documented_loop(state, ddp, counter)
    finally:
        counter.restore()
        state._signals.restore()
    return {
        "device": ctx.device.type,
        "steps": state.steps,
        "reason": state.stop_reason,
        "loss_step": state.loss_step,
        "sync_steps": sorted({step for step, _ in counter.syncs}),
        "collective_steps": sorted({step for step, _ in counter.collectives}),
        "syncs": counter.syncs,
        "collectives": counter.collectives,
    }


def check_sync_pattern(result: dict) -> None:
    """At most one sync per k = MAX_SYNC_EVERY_STEPS steps once k is agreed."""
    k = state_module.MAX_SYNC_EVERY_STEPS
    assert (result["steps"], result["reason"], result["loss_step"]) == (STEPS, "budget", STEPS)
    for kind in ("sync_steps", "collective_steps"):
        steps = result[kind]
        # Warm-up (before the loop, steps 1..3 at k=1), then one per k steps, then the last
        # step's own loss.
        assert len(steps) <= WARMUP_SYNC_STEPS + math.ceil(STEPS / k) + 1, (kind, result)
        steady = [s for s in steps if WARMUP_SYNC_STEPS < s < STEPS]
        gaps = [b - a for a, b in zip(steady, steady[1:], strict=False)]
        assert all(gap >= k for gap in gaps), (kind, steps)
    # A sync step reads one collective (a wait and its numbers), the last step maybe two.
    per_step: dict[int, int] = {}
    for step, _ in result["syncs"]:
        per_step[step] = per_step.get(step, 0) + 1
    assert max(per_step.values()) <= 4, result["syncs"]


@pytest.mark.slow
def test_the_elastic_loop_syncs_once_per_k_steps_on_every_rank():
    results = run_group(sync_steps, 2)
    for result in results:
        check_sync_pattern(result)
    assert results[0]["sync_steps"] == results[1]["sync_steps"]  # the same sync steps


def test_the_elastic_loop_syncs_once_per_k_steps_in_a_world_of_one(monkeypatch):
    elastic.shutdown()
    monkeypatch.setattr(importlib.import_module("interstice.elastic.report"), "_reporter", None)
    monkeypatch.setattr(state_module, "SYNC_INTERVAL_S", state_module.SYNC_INTERVAL_S)
    try:
        check_sync_pattern(sync_steps(0, 1))
    finally:
        elastic.shutdown()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_no_elastic_call_blocks_on_the_gpu(monkeypatch):
    """On CUDA: no elastic call makes a synchronising CUDA call (item, blocking copy,
    stream sync: CUDA's sync debug mode), and the loop waits on an event once per k steps."""
    elastic.shutdown()
    monkeypatch.setattr(importlib.import_module("interstice.elastic.report"), "_reporter", None)
    monkeypatch.setattr(state_module, "SYNC_INTERVAL_S", state_module.SYNC_INTERVAL_S)
    original = SyncCounter.counting

    @contextlib.contextmanager
    def debugged(self: SyncCounter) -> Iterator[None]:
        with original(self), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield
            finally:
                torch.cuda.set_sync_debug_mode("default")
        blocking.extend(str(w.message) for w in caught if "synchroniz" in str(w.message))

    blocking: list[str] = []
    monkeypatch.setattr(SyncCounter, "counting", debugged)
    try:
        result = sync_steps(0, 1)
    finally:
        elastic.shutdown()
    assert result["device"] == "cuda"
    assert blocking == []
    check_sync_pattern(result)
