"""Whether this node can run jobs, as its agent tells the service.

A launch that fails for a reason of the node (its launcher cannot start, e.g. torch missing
under the agent's Python; the job's owner is unknown here; the run directory cannot be made,
e.g. a full disk), and a spare launcher that is not warm when the agent registers, give the
agent a *fault*: the service quarantines the node and places no job on it
(:mod:`interstice.api.services.quarantine`). The agent proves the node healthy again with a
check (``Agent._check_health``): a spare launcher of its own account is warm (torch
imported) and its workdir takes a file; it then registers again without the fault, which ends
the quarantine.

Checks come after a delay that doubles with each fault and each failed check, from
:data:`FIRST_CHECK_S` to :data:`LAST_CHECK_S`, and starts again from the first once a launch's
workers joined: a fault that the check cannot see (an owner unknown on the node) then costs
a job a failed launch less and less often, and a node whose launcher can never start spawns
a Python process at most every 10 minutes.
"""

import os
import tempfile
import time
from pathlib import Path

from interstice.agents.outcome import clip

FIRST_CHECK_S = 5.0
"""Seconds from a node's first fault to its first check."""
LAST_CHECK_S = 600.0
"""The longest delay between two checks, seconds."""
PROBE_BYTES = 4096  # the workdir's check writes one block


class Health:
    """The node's fault (None: healthy) and when to check it again.

    Attributes:
        fault: why the node cannot run jobs now, as the agent tells the service; None when
            it can.
    """

    def __init__(self) -> None:
        self.fault: str | None = None
        self._delay_s = FIRST_CHECK_S
        self._due = 0.0  # monotonic time of the next check

    def failed(self, fault: str) -> None:
        """A fault (a launch, or a check, failed for a reason of the node): check again after
        the current delay, and double it. The fault is kept within the registration's limit
        (its head and its end)."""
        self.fault = clip(fault)
        self._due = time.monotonic() + self._delay_s
        self._delay_s = min(2 * self._delay_s, LAST_CHECK_S)

    def due(self) -> bool:
        """Whether the node has a fault and its next check is due."""
        return self.fault is not None and time.monotonic() >= self._due

    def recovered(self) -> None:
        """A check passed: no fault."""
        self.fault = None

    def launched(self) -> None:
        """A launch's workers joined: the next fault's check comes after the first delay."""
        self._delay_s = FIRST_CHECK_S


def workdir_problem(workdir: Path) -> str | None:
    """Why ``workdir`` takes no file (a full disk, a read-only or lost filesystem), or None
    when a block written there reaches the disk (written, synced and removed)."""
    try:
        with tempfile.NamedTemporaryFile(dir=workdir, prefix=".health-") as probe:
            probe.write(bytes(PROBE_BYTES))
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as error:
        return f"the agent's workdir {str(workdir)!r} takes no file: {error}"
    return None
