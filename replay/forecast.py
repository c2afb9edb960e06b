"""Idle-hole forecasts in the replay: what the batch scheduler tells the optimizer about when
it wants each idle node back (``interstice replay --forecast``).

A *hole* is one idle interval of one node: from the trace row that made it idle (the trace's
start for a node idle there) to the next row that makes it busy; a hole still open at the
trace's end has no end to forecast. At each solve, every idle node's forecast remaining idle
time goes to the optimizer as ``Problem.idle_forecast_s`` (unknown ones are left out):

- ``none``: no forecasts (the optimizer's answers are those without them, bit for bit).
- ``exact``: the hole's true end from the trace: remaining = end - now (the ceiling).
- ``plan``: a model of a planner's error. Each hole's end is known with probability
  ``coverage`` P (the share of holes whose end the planner knows: a backfill reservation, a
  maintenance window); the others are unknown. A known end is reported late: remaining =
  (end - now) x (1 + u F), u drawn uniformly in [0, 1) once per hole, F = ``error``: the
  planner's start time for the job that takes the node back comes from time limits, and
  jobs end before their limits, so the reservation moves earlier and the forecast converges
  on the truth as the hole closes. ``plan`` with P = 1, F = 0 is ``exact``.

The draws are seeded (``seed``) and made once per hole of the whole trace, in the order of
(node, start), so a hole's forecast is the same whichever policy runs and whichever nodes
are replayed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from interstice.replay.trace import NodeTrace

FORECASTS = ("none", "exact", "plan")
"""The forecast modes of ``--forecast``."""


@dataclass(frozen=True)
class ForecastSettings:
    """How the replay forecasts hole ends (module docstring).

    Attributes:
        mode: ``none``, ``exact`` or ``plan``.
        coverage: with ``plan``, the share P of holes whose end is known, in [0, 1].
        error: with ``plan``, F >= 0: a known end is reported late by u F of the remaining
            time, u uniform in [0, 1) per hole.
        seed: seed of the per-hole draws.
    """

    mode: str = "none"
    coverage: float = 1.0
    error: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in FORECASTS:
            raise ValueError(f"forecast must be one of {', '.join(FORECASTS)}, got {self.mode!r}")
        if not 0 <= self.coverage <= 1:
            raise ValueError(f"forecast coverage must be in [0, 1], got {self.coverage}")
        if not 0 <= self.error < math.inf:
            raise ValueError(f"forecast error must be a finite number >= 0, got {self.error}")

    def report(self) -> dict[str, object]:
        """The settings as report.json records them (``None`` where the mode ignores one)."""
        plan = self.mode == "plan"
        return {
            "forecast": self.mode,
            "forecast_coverage": self.coverage if plan else None,
            "forecast_error": self.error if plan else None,
            "forecast_seed": self.seed if plan else None,
        }


class HoleForecasts:
    """Every hole of the trace with its forecast draws, for one replay window."""

    def __init__(
        self,
        trace: NodeTrace,
        window_start_s: float,
        node_ids: np.ndarray | None,
        settings: ForecastSettings,
    ) -> None:
        """Find the holes and draw their forecasts.

        Args:
            trace: the whole trace.
            window_start_s: the window's start, seconds after the trace's start (the
                simulator's times are relative to it).
            node_ids: the replayed nodes' ids in the trace, sorted, their window ids being
                their positions here; ``None``: every node.
            settings: the mode, coverage, error and seed; not ``none``.
        """
        n_all = len(trace.node_names)
        node = np.concatenate([np.arange(n_all), trace.change_node]).astype(np.int64)
        time_s = np.concatenate([np.zeros(n_all), trace.change_time_s.astype(np.float64)])
        idle = np.concatenate([trace.initial_idle, trace.change_idle])
        order = np.lexsort((time_s, node))  # by node, then time; stable, initial rows first
        node, time_s, idle = node[order], time_s[order], idle[order]
        same_node = np.concatenate([[False], node[1:] == node[:-1]])
        was_idle = np.concatenate([[False], idle[:-1]]) & same_node
        starts = np.flatnonzero(idle & ~was_idle)  # the row that opens each hole
        closes = np.flatnonzero(~idle & was_idle)  # the busy row after a run of idle rows
        end_s = np.full(len(starts), np.inf)  # open at the trace's end: no end to forecast
        end_s[np.searchsorted(starts, closes) - 1] = time_s[closes]
        rng = np.random.default_rng(settings.seed)
        known = rng.random(len(starts)) < settings.coverage  # drawn for every hole of the trace
        late = 1.0 + rng.random(len(starts)) * settings.error
        if settings.mode == "exact":
            known, late = np.ones(len(starts), dtype=bool), np.ones(len(starts))
        hole_node, hole_start_s = node[starts], time_s[starts]
        local = np.arange(n_all) if node_ids is None else np.full(n_all, -1)
        if node_ids is not None:
            local[node_ids] = np.arange(len(node_ids))
        keep = (local[hole_node] >= 0) & known & np.isfinite(end_s)
        self.span_s = float(trace.duration_s) + 2.0
        self.window_start_s = float(window_start_s)
        self.key = local[hole_node[keep]] * self.span_s + hole_start_s[keep]  # ascending
        self.end_s = end_s[keep]
        self.late = late[keep]

    def remaining_s(self, now_s: float, idle_ids: np.ndarray) -> dict[int, float]:
        """The forecast remaining idle seconds of each idle node whose hole end is known.

        Args:
            now_s: simulated time, seconds after the window's start.
            idle_ids: window ids of the idle nodes, int array.

        Returns:
            Window id -> seconds > 0, for the nodes whose current hole has a known end.
        """
        at_s = now_s + self.window_start_s
        if not len(self.key):
            return {}
        hole = np.searchsorted(self.key, idle_ids * self.span_s + at_s, side="right") - 1
        found = hole >= 0
        # The latest known hole of the node that started by now; it is the node's current
        # one only if it has not ended (else the current hole's end is unknown).
        same = found & (self.key[np.maximum(hole, 0)] // self.span_s == idle_ids)
        hole = np.maximum(hole, 0)
        current = same & (self.end_s[hole] > at_s)
        left_s = (self.end_s[hole] - at_s) * self.late[hole]
        return dict(zip(idle_ids[current].tolist(), left_s[current].tolist(), strict=True))
