"""The service's regime for Python's cyclic garbage collector.

CPython runs a full (generation 2) collection whenever the objects promoted since the last
one exceed a quarter of the long-lived heap, and a full collection examines every tracked
object. A service with thousands of parked long-polls promotes every poll's request,
coroutines and futures (hundreds of objects each, alive for the poll's wait), so under a
large agent load a full collection comes every few seconds over about a million objects and
stops the interpreter for most of a second: every request in flight, a reclaim included,
waits for it. Collecting less often does not help, since each collection still examines them
all.

:func:`freezing_every` calls ``gc.freeze()`` every ``interval_s``: the objects alive then
move to the permanent generation, which collections skip, so a full collection examines only
what was promoted since the last freeze. Frozen objects are still freed when their last
reference goes (reference counting is untouched); only reference cycles among them wait, for
the full collection of everything (``gc.unfreeze()``, ``gc.collect()``) that runs every
:data:`THAW_EVERY_S`.

Within the regime the collector's thresholds are :data:`THRESHOLDS`. CPython's (700, 10, 10)
collect the young generation after every few requests at hundreds of requests a second (each
allocating hundreds of objects), and the routes' short-lived objects rarely outlive one; a
young generation of 10,000 objects collects them a tenth as often, and no full collection is
needed between freezes, since everything older is frozen within a second anyway. The
measurements behind the regime are in docs/design-notes.md ("The service under load").
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
