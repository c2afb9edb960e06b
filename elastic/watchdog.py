"""Where a worker waits when it does not reach its first step: a one-time stack dump.

A generation whose workers never step (a collective or the checkpoint lock waiting on a peer
that will not come, a hung data loader) is released by the service after
``generation_start_timeout_s`` and its workers are killed, which leaves no trace of where
they waited (docs/known-limits.md, "A generation that never reports"). So :func:`arm`,
called by :func:`interstice.elastic.init` before it creates the process group, starts
:func:`faulthandler.dump_traceback_later`: a worker that has not finished its first step
(:meth:`~interstice.elastic.State.step` or :func:`~interstice.elastic.report`) within
``INTERSTICE_FIRST_STEP_DUMP_S`` seconds writes every thread's Python stack to its stderr
(the rank log under the agent), once, under a ``Timeout (h:mm:ss)!`` line, and goes on.
faulthandler's own thread writes it, so a thread that holds the GIL in C code does not stop
the dump.

The agent sets no variable for it: under an interstice job (``INTERSTICE_JOB_ID`` set) the
default is :data:`DEFAULT_FIRST_STEP_DUMP_S`; under plain ``torchrun`` or ``python`` it is
off unless the variable is set. ``0`` turns it off.
"""

import faulthandler
import os
import sys
from collections.abc import Mapping

from interstice import wire

DEFAULT_FIRST_STEP_DUMP_S = 120.0
"""Seconds from :func:`~interstice.elastic.init` to a worker's stack dump under an interstice
job: well above the few seconds from ``init`` to a first step (the process group, DDP, the
checkpoint's load), below the pilot's 240 s wait for a phase (tests/system/test_pilot.py)
and the service's ``generation_start_timeout_s`` (900 s). A slower first step (a checkpoint
of many GB) only gets a needless dump."""

_armed = False


def dump_after_s(environ: Mapping[str, str] = os.environ) -> float:
    """Seconds to the stack dump from ``environ``: ``INTERSTICE_FIRST_STEP_DUMP_S`` when set,
    else :data:`DEFAULT_FIRST_STEP_DUMP_S` under an interstice job, else 0 (off).

    Raises:
        ValueError: the variable holds no number, or a negative one.
    """
    value = environ.get(wire.ENV_FIRST_STEP_DUMP_S)
    if not value:
        return DEFAULT_FIRST_STEP_DUMP_S if environ.get(wire.ENV_JOB_ID) else 0.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ValueError(f"{wire.ENV_FIRST_STEP_DUMP_S}={value!r} is not a number of seconds >= 0")
    return seconds


def arm() -> None:
    """Start the countdown to the stack dump (nothing when :func:`dump_after_s` is 0).

    Raises:
        ValueError: as :func:`dump_after_s`.
    """
    global _armed
    seconds = dump_after_s()
    if seconds > 0 and not _armed:
        faulthandler.dump_traceback_later(seconds, repeat=False, file=sys.stderr, exit=False)
        _armed = True


def disarm() -> None:
    """The first step is done: cancel the dump (cheap to call at every step)."""
    global _armed
    if _armed:
        faulthandler.cancel_dump_traceback_later()
        _armed = False
