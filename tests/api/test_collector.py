"""The service's garbage-collection regime: live objects frozen out of the collector's way,
reference cycles among them still freed by the periodic thaw, everything handed back at the
end."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

import pytest
from interstice.api import collector
from interstice.api.collector import freezing_every


class Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


async def _until(condition, timeout_s: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``condition()`` holds within ``timeout_s`` (a bound for a loaded machine, not
    a measure), checked every loop turn or two."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return bool(condition())


class Clock:
    """The collector's clock, moved by the test: the thaw comes when it says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_live_objects_are_frozen_and_cycles_among_them_freed_by_the_thaw(monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr(collector, "time", clock)  # the collector's alone, not asyncio's
    freezes = 0
    real_freeze = gc.freeze

    def freeze() -> None:
        nonlocal freezes
        real_freeze()
        freezes += 1

    monkeypatch.setattr(collector.gc, "freeze", freeze)  # counted: the regime's ticks

    async def scenario() -> tuple[bool, bool, bool, bool, bool]:
        async with freezing_every(0.01):
            cycle = Cycle()
            ref = weakref.ref(cycle)
            frozen = await _until(lambda: gc.get_freeze_count() > 0)
            del cycle
            gc.collect()  # a full collection skips the frozen cycle...
            skipped = ref() is not None
            seen = freezes
            ticked = await _until(lambda: freezes >= seen + 3)
            kept_until_the_thaw = ref() is not None  # ...and later freezes do not free it...
            clock.now = collector.THAW_EVERY_S
            freed = await _until(lambda: ref() is None)  # ...the thaw does
        return frozen, skipped, ticked, kept_until_the_thaw, freed

    before = gc.get_threshold()
    frozen, skipped, ticked, kept_until_the_thaw, freed = asyncio.run(scenario())
    assert gc.get_threshold() == before  # handed back at the end
    assert frozen
    assert skipped
    assert ticked
    assert kept_until_the_thaw
    assert freed
    assert gc.get_freeze_count() == 0  # handed back at the end


def test_the_regime_sets_its_thresholds_and_no_full_collection_runs_between_freezes() -> None:
    async def scenario() -> tuple[tuple[int, ...], int]:
        async with freezing_every(60):  # no freeze within the test
            thresholds = gc.get_threshold()
            full_before = gc.get_stats()[2]["collections"]
            keep = [Cycle() for _ in range(200_000)]  # promoted through the generations
            del keep
            return thresholds, gc.get_stats()[2]["collections"] - full_before

    thresholds, full_collections = asyncio.run(scenario())
    assert thresholds == collector.THRESHOLDS
    assert full_collections == 0


def test_interval_zero_leaves_the_collector_as_it_is() -> None:
    before = gc.get_threshold()

    async def scenario() -> tuple[int, tuple[int, ...]]:
        async with freezing_every(0):
            await asyncio.sleep(0.2)
            return gc.get_freeze_count(), gc.get_threshold()

    assert asyncio.run(scenario()) == (0, before)


@pytest.fixture(autouse=True)
def _nothing_frozen_after():  # type: ignore[no-untyped-def]
    yield
    gc.unfreeze()
