"""The service's garbage-collection regime: full collections on its interval, not CPython's."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

from interstice.api.collector import NEVER, full_collections_every


class Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


async def _garbage_in_generation_2() -> weakref.ref[Cycle]:
    cycle = Cycle()
    gc.collect(1)  # it survives the young generations: now it lies in generation 2
    ref = weakref.ref(cycle)
    del cycle
    gc.collect(1)  # a young collection does not look at generation 2
    assert ref() is not None
    return ref


def test_full_collections_run_every_interval_and_the_thresholds_come_back() -> None:
    before = gc.get_threshold()

    async def scenario() -> tuple[float, tuple[int, int, int]]:
        async with full_collections_every(0.3):
            during = gc.get_threshold()
            ref = await _garbage_in_generation_2()
            started = time.monotonic()
            while ref() is not None and time.monotonic() - started < 5:
                await asyncio.sleep(0.02)
            freed_after_s = time.monotonic() - started if ref() is None else float("inf")
        return freed_after_s, during

    freed_after_s, during = asyncio.run(scenario())
    assert during == (before[0], before[1], NEVER)  # no automatic full collection
    assert freed_after_s < 2  # the interval's collection freed the cycle
    assert gc.get_threshold() == before


def test_interval_zero_leaves_the_collector_as_it_is() -> None:
    before = gc.get_threshold()

    async def scenario() -> tuple[int, int, int]:
        async with full_collections_every(0):
            return gc.get_threshold()

    assert asyncio.run(scenario()) == before
