"""The service's regime for Python's cyclic garbage collector.

CPython runs a full (generation 2) collection whenever the objects promoted since the last
one exceed a quarter of the long-lived heap. A service with thousands of parked long-polls
promotes every poll's request, coroutines and futures (about 200 objects each, they live for
the poll's wait), so at 5,000 agents a full collection ran every 3-9 s and stopped the
interpreter for 0.7-1.0 s each time (measured with ``gc.callbacks`` under
``bench/agents_load.py --agents 5000``: about 1 million tracked objects, of which each
collection freed 20-900): every request in flight, a reclaim included, waited for it.

:func:`full_collections_every` turns the automatic full collections off (generation 2's
threshold set beyond reach; the young generations are collected as before) and runs one
every ``interval_s`` instead, so the pause comes once per interval. Cyclic garbage that
reached generation 2 waits at most that long to be freed.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

NEVER = 2**31 - 1
"""A generation-2 threshold that young collections never reach."""


@asynccontextmanager
async def full_collections_every(interval_s: float) -> AsyncIterator[None]:
    """Within the block, a full collection every ``interval_s`` seconds on the running
    loop instead of CPython's automatic ones; the previous thresholds come back at its end.
    ``interval_s`` 0 leaves the collector as it is."""
    if interval_s <= 0:
        yield
        return
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], NEVER)

    async def collect_forever() -> None:
        while True:
            await asyncio.sleep(interval_s)
            gc.collect()

    task = asyncio.create_task(collect_forever(), name="interstice-gc")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        gc.set_threshold(*thresholds)
