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


async def _until(condition, timeout_s: float = 5.0) -> float:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    while not condition() and time.monotonic() - started < timeout_s:
        await asyncio.sleep(0.02)
    return time.monotonic() - started if condition() else float("inf")


def test_live_objects_are_frozen_and_cycles_among_them_freed_by_the_thaw(monkeypatch) -> None:
    monkeypatch.setattr(collector, "THAW_EVERY_S", 1.0)

    async def scenario() -> tuple[bool, bool, float]:
        async with freezing_every(0.1):
            cycle = Cycle()
            ref = weakref.ref(cycle)
            await _until(lambda: gc.get_freeze_count() > 0)
            frozen = gc.get_freeze_count() > 0
            del cycle
            gc.collect()  # a full collection skips the frozen cycle...
            skipped = ref() is not None
            freed_after_s = await _until(lambda: ref() is None)  # ...the thaw frees it
        return frozen, skipped, freed_after_s

    before = gc.get_threshold()
    frozen, skipped, freed_after_s = asyncio.run(scenario())
    assert gc.get_threshold() == before  # handed back at the end
    assert frozen
    assert skipped
    assert freed_after_s < 3
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
