"""The forecast horizon ``--horizon auto``: expected remaining idle time of the idle pool.

BFTrainer (arXiv 2106.12091) plans over a fixed 10 s horizon, shorter than its 18 s
scale-up cost, so growing a job almost never pays. Here the horizon is the mean residual life
of the idle intervals observed so far: E[T - a | T > a] for an interval length T drawn from
the empirical distribution and the pool's current idle age a (the mean residual life
function; Guess & Proschan, "Mean residual life: theory and applications", Handbook of
Statistics 7, 1988). The optimizer itself only takes ``horizon_s``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_HORIZON_S = 475.0
"""Used until enough intervals are seen: the median idle interval of the Summit trace
(``summit-node-state-2021-02.csv.gz``, as measured for the project brief)."""

MIN_INTERVALS = 30
"""Fewest observed intervals longer than the current age before the estimate is trusted."""


def expected_remaining_idle_s(
    idle_intervals_s: Sequence[float] | np.ndarray,
    elapsed_s: float = 0.0,
    *,
    default_s: float = DEFAULT_HORIZON_S,
    min_intervals: int = MIN_INTERVALS,
) -> float:
    """Mean residual life of the empirical idle-interval distribution at age ``elapsed_s``.

    Args:
        idle_intervals_s: lengths of the completed idle intervals seen so far, seconds,
            shape (k,).
        elapsed_s: how long the pool (or node) has been idle now, seconds, >= 0.
        default_s: the answer while fewer than ``min_intervals`` intervals exceed
            ``elapsed_s``, seconds, > 0.
        min_intervals: the number of intervals longer than ``elapsed_s`` needed, >= 1.

    Returns:
        Expected remaining idle seconds, > 0: mean(T - a for T > a), or ``default_s``.

    Raises:
        ValueError: negative ``elapsed_s`` or interval, or non-positive ``default_s``.
    """
    lengths = np.asarray(idle_intervals_s, dtype=float)
    if elapsed_s < 0:
        raise ValueError(f"elapsed_s must be >= 0, got {elapsed_s}")
    if default_s <= 0:
        raise ValueError(f"default_s must be > 0, got {default_s}")
    if lengths.size and lengths.min() < 0:
        raise ValueError("idle_intervals_s: an interval is negative")
    longer = lengths[lengths > elapsed_s]
    if longer.size < max(min_intervals, 1):
        return float(default_s)
    return float(longer.mean() - elapsed_s)


def pool_remaining_idle_s(
    idle_intervals_s: Sequence[float] | np.ndarray, idle_ages_s: Sequence[float] | np.ndarray
) -> float:
    """Expected remaining idle time of a pool: :func:`expected_remaining_idle_s` at the
    median idle age of the pool's nodes (0 for an empty pool).

    Args:
        idle_intervals_s: lengths of the completed idle intervals seen so far, seconds,
            shape (k,).
        idle_ages_s: how long each node of the pool has been idle now, seconds, shape (n,);
            negative ages (clock skew) count as 0.

    Returns:
        Expected remaining idle seconds, > 0.
    """
    ages = np.asarray(idle_ages_s, dtype=float)
    age_s = float(np.median(ages)) if ages.size else 0.0
    return expected_remaining_idle_s(idle_intervals_s, max(age_s, 0.0))
