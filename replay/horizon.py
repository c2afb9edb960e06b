"""The forecast horizon of each solve in a replay: a fixed number of seconds, or ``auto``.

``auto`` asks :func:`interstice.optimizer.pool_remaining_idle_s` for the mean residual idle
time of the pool, using only what a live system would know at that moment: the idle intervals
of the whole trace that ended before it (every node's, a ``--nodes`` subset's scheduler sees
them too) and the median idle age of the nodes idle now.
"""

from __future__ import annotations

import numpy as np
from interstice.optimizer import pool_remaining_idle_s
from interstice.replay.trace import NodeTrace


class FixedHorizon:
    """The same horizon at every solve."""

    def __init__(self, horizon_s: float) -> None:
        """Args: horizon_s: seconds, > 0. Raises ValueError otherwise."""
        if not horizon_s > 0:
            raise ValueError(f"horizon must be > 0 s, got {horizon_s}")
        self.horizon_s = float(horizon_s)

    def __call__(self, now_s: float, idle_since_s: np.ndarray) -> float:
        """``horizon_s``, whatever the time and pool."""
        return self.horizon_s


class AutoHorizon:
    """Expected remaining idle time of the pool, from the past of the trace only."""

    def __init__(self, trace: NodeTrace, window_start_s: float) -> None:
        """Args:
        trace: the whole trace (its idle intervals are the history).
        window_start_s: the window's start, seconds after the trace start; the simulator's
            times are relative to it.
        """
        end_s, self.length_s = trace.idle_intervals()
        self.end_s = end_s - window_start_s

    def __call__(self, now_s: float, idle_since_s: np.ndarray) -> float:
        """Mean residual life at the pool's median idle age.

        Args:
            now_s: simulated time, seconds after the window start.
            idle_since_s: when each node became idle (same clock), NaN for busy ones,
                shape (n,).

        Returns:
            Seconds, > 0 (the optimizer's default while too few intervals are known).
        """
        seen = int(np.searchsorted(self.end_s, now_s, side="right"))
        since = idle_since_s[~np.isnan(idle_since_s)]
        return pool_remaining_idle_s(self.length_s[:seen], now_s - since)
