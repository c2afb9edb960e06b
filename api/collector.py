"""The service's regime for Python's cyclic garbage collector.

CPython runs a full (generation 2) collection whenever the objects promoted since the last
one exceed a quarter of the long-lived heap, and a full collection examines every tracked
object. A service with thousands of parked long-polls promotes every poll's request,
coroutines and futures (about 200 objects each, alive for the poll's wait), so at 5,000
agents a full collection ran every 3-9 s and stopped the interpreter for 0.7-1.0 s each
time (measured with ``gc.callbacks`` under ``bench/agents_load.py --agents 5000``: about one
million tracked objects, of which each collection freed 20-900): every request in flight, a
reclaim included, waited for it. Collecting once a minute instead still paused 0.8 s; with
a freeze every second the longest full collection of a run took 0.14 s.

:func:`freezing_every` calls ``gc.freeze()`` every ``interval_s``: the objects alive then
move to the permanent generation, which collections skip, so a full collection examines only
what was promoted since the last freeze. Frozen objects are still freed when their last
reference goes (reference counting is untouched); only reference cycles among them wait, for
the full collection of everything (``gc.unfreeze()``, ``gc.collect()``) that runs every
:data:`THAW_EVERY_S`.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

THAW_EVERY_S = 3600.0
"""How often the frozen objects are collected with the others, seconds: the longest a
reference cycle among them waits to be freed."""


@asynccontextmanager
async def freezing_every(interval_s: float) -> AsyncIterator[None]:
    """Within the block, ``gc.freeze()`` every ``interval_s`` seconds on the running loop,
    and every :data:`THAW_EVERY_S` a full collection of every object; the frozen objects
    are handed back to the collector at its end. ``interval_s`` 0 leaves the collector as it
    is."""
    if interval_s <= 0:
        yield
        return

    async def freeze_forever() -> None:
        thawed_at = time.monotonic()
        while True:
            await asyncio.sleep(interval_s)
            if time.monotonic() - thawed_at >= THAW_EVERY_S:
                gc.unfreeze()
                gc.collect()
                thawed_at = time.monotonic()
            gc.freeze()

    task = asyncio.create_task(freeze_forever(), name="interstice-gc")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        gc.unfreeze()
