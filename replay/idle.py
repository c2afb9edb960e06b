"""What a trace window offers before any job runs: its idle node-hours per day and its holes.

A *hole* is one node's idle interval: it opens when the node goes idle and closes when the
node is busy again (the owner takes it back). Hole lengths are counted as the Summit trace's
published ones are (``shared/data/README.md``; BFTrainer, Liu et al., arXiv 2106.12091;
:meth:`interstice.replay.trace.NodeTrace.idle_intervals`): only completed holes, each from when
it opened, which may be before the window (at the trace's start at the earliest), to when it
closed inside the window; the holes still open at the window's end are counted apart.

The comparison beside the holes (:func:`reference_holes`): the Summit trace where
:func:`interstice.data.data_dir` holds it, else the synthetic trace the package ships, which is
drawn to the Summit trace's published quantiles (:data:`PUBLISHED_QUANTILES_S`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from interstice.replay.trace import NodeTrace, TraceWindow, completed_idle_runs, load_trace

from interstice import data

PUBLISHED_QUANTILES_S = {0.5: 475.0, 0.9: 3269.0, 0.99: 9246.0}
"""The Summit trace's published hole-length quantiles, ``{p: seconds}``
(``shared/data/README.md``; the synthetic trace is drawn to them)."""
DAY_S = 86400
QUANTILES = (0.5, 0.9, 0.99)
"""The hole-length quantiles reported, those published for the Summit trace."""


@dataclass(frozen=True)
class Reference:
    """The hole lengths the report sets a trace's beside.

    Attributes:
        name: ``summit`` (the real trace) or ``synthetic`` (the package's, not measured).
        path: the trace file.
        label: how plots and the console name it.
        lengths_s: its completed holes' lengths, seconds, float64, shape (K,), sorted.
    """

    name: str
    path: Path
    label: str
    lengths_s: np.ndarray


def idle_steps(window: TraceWindow) -> tuple[np.ndarray, np.ndarray]:
    """The number of idle nodes as a step function of time.

    Args:
        window: the trace window.

    Returns:
        ``(time_s, idle)``: seconds after the window's start, 0 first, then each event's
        time, float64 shape (E+1,); and how many nodes are idle from that time to the next,
        int64 shape (E+1,).
    """
    node, to_idle = window.change_node, window.change_idle.astype(np.int64)
    # Each row's change to the count: its state minus the node's state before it (a row
    # may restate a node's state). Rows are in time order; grouped by node, the state
    # before a row is the previous row's, or the node's state at the start.
    order = np.lexsort((np.arange(len(node)), node))
    grouped = node[order]
    before = np.where(
        np.concatenate([[True], grouped[1:] != grouped[:-1]]),
        window.initial_idle[grouped].astype(np.int64),
        np.concatenate([[0], to_idle[order][:-1]]),
    )
    step = np.empty(len(node), dtype=np.int64)
    step[order] = to_idle[order] - before
    per_event = np.add.reduceat(step, window.event_offsets[:-1]) if len(step) else step
    idle = np.concatenate([[np.count_nonzero(window.initial_idle)], per_event]).cumsum()
    return np.concatenate([[0.0], window.event_time_s]), idle


def idle_node_hours_by_day(window: TraceWindow) -> list[dict[str, Any]]:
    """The window's idle node-hours in each calendar day (UTC, the trace's time).

    Returns:
        One ``{"day": "YYYY-MM-DD", "hours": h, "idle_node_hours": x}`` per day the window
        touches, in order; ``hours`` is how much of the day the window covers (24 but for a
        first or last day cut by the window).
    """
    time_s, idle = idle_steps(window)
    # The integral of the step function at each step's start, then at any time by
    # interpolating within its step.
    held = np.append(np.diff(time_s), 0.0) * idle
    at_step = np.concatenate([[0.0], np.cumsum(held[:-1])])
    start = window.start.astype("datetime64[s]")
    first_midnight_s = float((start.astype("datetime64[D]") + 1 - start) / np.timedelta64(1, "s"))
    cuts = np.arange(first_midnight_s, window.duration_s, DAY_S)
    bounds = np.concatenate([[0.0], cuts, [window.duration_s]])
    step = np.searchsorted(time_s, bounds, side="right") - 1
    integral = at_step[step] + idle[step] * (bounds - time_s[step])
    days = start.astype("datetime64[D]") + np.arange(len(bounds) - 1)
    return [
        {
            "day": str(day),
            "hours": float(hi - lo) / 3600,
            "idle_node_hours": float(area) / 3600,
        }
        for day, lo, hi, area in zip(days, bounds[:-1], bounds[1:], np.diff(integral), strict=True)
    ]


def hole_lengths(window: TraceWindow) -> tuple[np.ndarray, int]:
    """The window's completed holes (module docstring).

    Returns:
        ``(lengths_s, open_at_end)``: each completed hole's length, seconds, float64 shape
        (K,), sorted; and how many holes are still open at the window's end.
    """
    since_s = np.nan_to_num(window.initial_idle_since_s)  # NaN: a busy node, never read
    per_change_s = np.repeat(window.event_time_s, np.diff(window.event_offsets))
    start_s, end_s, still_open = completed_idle_runs(
        window.initial_idle, since_s, per_change_s, window.change_node, window.change_idle
    )
    return np.sort(end_s - start_s), still_open


def quantiles(lengths_s: np.ndarray) -> dict[str, float | None]:
    """``{"p50_s", "p90_s", "p99_s", "mean_s"}`` of hole lengths (``None`` where none)."""
    figures: dict[str, float | None] = {
        f"p{p * 100:g}_s": float(np.quantile(lengths_s, p)) if len(lengths_s) else None
        for p in QUANTILES
    }
    figures["mean_s"] = float(lengths_s.mean()) if len(lengths_s) else None
    return figures


def reference_holes(loaded: tuple[Path, NodeTrace] | None = None) -> Reference:
    """The hole lengths of the Summit trace, else of the package's synthetic trace.

    Args:
        loaded: a trace already in memory and its file: used where it is the reference's,
            so that a replay of the Summit trace does not read it twice.

    Returns:
        The reference (a file is read once per process).

    Raises:
        OSError, ValueError: the reference file cannot be read (the synthetic trace ships
            with the package, so only a damaged install).
    """
    summit = data.data_dir() / data.TRACE_FILE
    name, path = ("summit", summit) if summit.is_file() else ("synthetic", data.SYNTHETIC_TRACE)
    if loaded is not None and loaded[0].resolve() == path.resolve():
        return _reference(name, path, loaded[1])
    return _read_reference(name, path.resolve())


@functools.cache
def _read_reference(name: str, path: Path) -> Reference:
    return _reference(name, path, load_trace(path))


def _reference(name: str, path: Path, trace: NodeTrace) -> Reference:
    label = (
        f"Summit, {len(trace.node_names):,} nodes, {trace.start.astype(object):%Y-%m}"
        if name == "summit"
        else "synthetic trace fitted to Summit's published quantiles"
    )
    return Reference(name, path, label, np.sort(trace.idle_intervals()[1]))


def trace_figures(
    window: TraceWindow, holes: tuple[np.ndarray, int], reference: Reference
) -> dict[str, Any]:
    """The ``trace`` part of ``report.json``: what the window offers, beside the reference.

    Args:
        window: the replayed window.
        holes: its :func:`hole_lengths`.
        reference: :func:`reference_holes`.

    Returns:
        ``nodes``; ``idle_node_hours`` (the window's, as every policy's ``idle_node_hours``);
        ``idle_share`` (of the window's node-time); ``idle_node_hours_per_day`` (over the
        window's length in days); ``by_day`` (:func:`idle_node_hours_by_day`); ``holes``:
        ``completed``, ``open_at_end`` and :func:`quantiles`; ``reference``: ``name``,
        ``trace``, ``completed``, its quantiles and ``published`` (the Summit trace's
        published ``p50_s``, ``p90_s``, ``p99_s``).
    """
    by_day = idle_node_hours_by_day(window)
    idle_h = sum(day["idle_node_hours"] for day in by_day)
    lengths_s, still_open = holes
    node_h = len(window.node_names) * window.duration_s / 3600
    return {
        "nodes": len(window.node_names),
        "idle_node_hours": idle_h,
        "idle_share": idle_h / node_h,
        "idle_node_hours_per_day": idle_h / (window.duration_s / DAY_S),
        "by_day": by_day,
        "holes": {"completed": len(lengths_s), "open_at_end": still_open, **quantiles(lengths_s)},
        "reference": {
            "name": reference.name,
            "trace": str(reference.path),
            "completed": len(reference.lengths_s),
            **quantiles(reference.lengths_s),
            "published": {f"p{p * 100:g}_s": s for p, s in PUBLISHED_QUANTILES_S.items()},
        },
    }
