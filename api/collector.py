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

Within the regime the collector's thresholds are :data:`THRESHOLDS`. With CPython's
(700, 10, 10), at 5,000 agents and a 10 s heartbeat (about 600 requests/s, each allocating
hundreds of objects) it ran about 120 young collections a second, and a full one (of what
was promoted since the last freeze) every 1.5 s: 22.6 s of collection in a 153 s run, 15 % of
a core, as much as the routes themselves. A young generation of 10,000 objects and no full
collection between freezes (everything older is frozen within a second anyway) took 8.4 s in
the next run, and 17.7 s against 27.0 s in a longer pair (``gc.callbacks`` timings, the
service of ``bench/agents_load.py --agents 5000``).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

THRESHOLDS = (10_000, 10, 1_000)
"""``gc.set_threshold`` within the regime: young collections every 10,000 net allocations,
the middle generation every 10 of them, a full collection practically only at a thaw."""

THAW_EVERY_S = 3600.0
"""How often the frozen objects are collected with the others, seconds: the longest a
reference cycle among them waits to be freed."""


@asynccontextmanager
async def freezing_every(interval_s: float) -> AsyncIterator[None]:
    """Within the block, ``gc.freeze()`` every ``interval_s`` seconds on the running loop,
    the thresholds :data:`THRESHOLDS`, and every :data:`THAW_EVERY_S` a full collection of
    every object; the frozen objects and the previous thresholds are handed back at its end.
    ``interval_s`` 0 leaves the collector as it is."""
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

    thresholds = gc.get_threshold()
    gc.set_threshold(*THRESHOLDS)
    task = asyncio.create_task(freeze_forever(), name="interstice-gc")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        gc.unfreeze()
        gc.set_threshold(*thresholds)
