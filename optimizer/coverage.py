"""Forecast coverage: how many of the idle holes' ends the batch scheduler forecast, and
whether the allocator uses the forecasts at all.

A forecast (a node event's ``until``) tells the model when one node leaves; a node without
one counts as staying through the horizon. Where the scheduler forecasts only part of the
holes, that is wrong for the unforecast ones that leave soon, and the model, told the short
lives of some nodes and not of others, does worse than told nothing. Forecasts pay where most
ends are known, most where a reclaim costs a job more than a shrink (docs/benchmarks.md,
"Idle-hole forecasts"). So a solve uses the forecasts only while the measured coverage, the
share of the last :data:`COVERAGE_HOLES` holes that ended (a node idle, then reclaimed) whose
end had been forecast, is at least ``Problem.forecast_min_coverage``. With fewer than
:data:`MIN_COVERAGE_HOLES` ended holes it is unknown, and the service and the replay tell the
solve the share of the idle nodes that have a forecast instead (:func:`solve_coverage`): each
is a hole whose end is forecast or not, as an ended one was. That share avoids the cost of
either fixed answer: using every forecast while the coverage is unknown loses harvest where
few ends are known, and using none loses efficiency where every end is known and reclaims
are dear. A ``Problem`` built with no coverage at all (``None``, e.g. ``interstice solve`` on
a snapshot) uses its forecasts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sized
from itertools import islice

FORECAST_MIN_COVERAGE = 0.9
"""Default ``Problem.forecast_min_coverage``: the share of known ends from which forecasts
pay in the replay; at three quarters known they cost efficiency."""

COVERAGE_HOLES = 200
"""The ended holes the coverage is measured over, the newest: at a true coverage of 0.75 the
share of 200 reaches 0.9 with probability below 1e-6 (binomial)."""

MIN_COVERAGE_HOLES = 50
"""Fewer ended holes than this: the coverage is unknown (``None``) and forecasts are used."""


def forecast_coverage(forecast: Iterable[bool]) -> float | None:
    """The share of ended holes whose end had been forecast.

    Args:
        forecast: for each of the newest ended holes (at most :data:`COVERAGE_HOLES` are
            read, newest first), whether its node had a forecast (``until``) when it was
            reclaimed.

    Returns:
        The share in [0, 1], or ``None`` with fewer than :data:`MIN_COVERAGE_HOLES` holes.
    """
    flags = list(islice(forecast, COVERAGE_HOLES))
    if len(flags) < MIN_COVERAGE_HOLES:
        return None
    return sum(flags) / len(flags)


def solve_coverage(
    ended: float | None, forecast: Mapping[str, float] | None, idle_nodes: Sized
) -> float | None:
    """The coverage a solve is told (``Problem.forecast_coverage``).

    Args:
        ended: :func:`forecast_coverage` of the ended holes (``None``: too few).
        forecast: the idle nodes' forecasts now (``Problem.idle_forecast_s``).
        idle_nodes: the idle nodes now (``Problem.idle_nodes``).

    Returns:
        ``ended`` where known; else the share of ``idle_nodes`` that have a forecast; ``None``
        where neither is known (no forecast now).
    """
    if ended is not None or not forecast:
        return ended
    return len(forecast) / len(idle_nodes)


class CoverageMeter:
    """The newest :data:`COVERAGE_HOLES` ended holes, for a caller that sees them one by one
    (the replay); :attr:`coverage` is :func:`forecast_coverage` of them."""

    def __init__(self) -> None:
        self._newest: deque[bool] = deque(maxlen=COVERAGE_HOLES)

    def ended(self, forecast: bool) -> None:
        """Record one ended hole: ``forecast`` whether its end had been forecast."""
        self._newest.appendleft(forecast)

    @property
    def coverage(self) -> float | None:
        """The share of the newest ended holes whose end had been forecast (``None``: too
        few)."""
        return forecast_coverage(self._newest)
