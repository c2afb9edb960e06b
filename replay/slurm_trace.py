"""A node-state trace from the intervals a cluster's nodes were held: the pure conversion
behind ``interstice trace from-slurm``.

Input: every node of the machine, a window ``[start, end)`` and intervals (node, from, to),
each either a job's (busy) or a down or drained spell's. Output: the trace :mod:`.trace`
reads, ``timestamp,node,state``:

- every node's state at ``start``, then one row per change, each at the second it happened,
  rows ordered by time, then node;
- a node is ``busy`` while any job or down spell holds it (overlapping jobs merge), ``idle``
  otherwise; an interval open at the end (``to`` None) lasts to ``end``;
- a down or drained node is written ``busy``: the trace has no third state, and the replay
  must not lend such a node; :class:`Conversion` counts its node-seconds apart;
- the last row, at ``end``, repeats the first node's last state, so the trace lasts to ``end``.

Timestamps are UTC, ISO 8601 without zone, to the second (as in the Summit trace's layout).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from interstice.replay.trace import HEADER

Interval = tuple[str, datetime, datetime | None]
"""``(node, from, to)``: aware datetimes; ``to`` None: still held at the window's end."""


@dataclass(frozen=True)
class Conversion:
    """A converted trace and its node-seconds.

    Attributes:
        text: the trace CSV (header, LF line ends).
        rows: data rows in ``text``.
        nodes: nodes in the trace.
        window_s: the window's length, seconds.
        busy_node_s: node-seconds held by a job and not down.
        down_node_s: node-seconds down or drained (written busy).
        idle_node_s: the rest: ``nodes * window_s - busy_node_s - down_node_s``.
        outside_nodes: node names of intervals that are not in the node list (left out).
    """

    text: str
    rows: int
    nodes: int
    window_s: int
    busy_node_s: int
    down_node_s: int
    idle_node_s: int
    outside_nodes: frozenset[str]


def convert(
    nodes: list[str],
    start: datetime,
    end: datetime,
    busy: Iterable[Interval],
    down: Iterable[Interval] = (),
) -> Conversion:
    """Build the node-state trace of ``nodes`` over ``[start, end)``.

    Args:
        nodes: the machine's node names, distinct; the trace lists them sorted.
        start: the window's start, aware.
        end: the window's end, aware, after ``start``.
        busy: jobs' intervals; those of nodes outside ``nodes`` are left out (and named in
            :attr:`Conversion.outside_nodes`); each is clipped to the window, to the second
            (fractions dropped).
        down: down or drained intervals, as ``busy``.

    Returns:
        The trace and its node-seconds.

    Raises:
        ValueError: ``nodes`` is empty or repeats a name, or ``end <= start``.
    """
    if not nodes:
        raise ValueError("no nodes")
    if len(set(nodes)) != len(nodes):
        raise ValueError("the node list repeats a name")
    if end <= start:
        raise ValueError(f"the window's end {end} is not after its start {start}")
    t0, t1 = _seconds(start), _seconds(end)
    held: dict[str, list[tuple[int, int]]] = {node: [] for node in nodes}
    spells: dict[str, list[tuple[int, int]]] = {node: [] for node in nodes}
    outside: set[str] = set()
    for into, intervals in ((held, busy), (spells, down)):
        for node, since, until in intervals:
            lo, hi = max(_seconds(since), t0), min(t1 if until is None else _seconds(until), t1)
            if node not in into:
                outside.add(node)
            elif lo < hi:
                into[node].append((lo, hi))
    changes: list[tuple[int, str, str]] = []
    initial: list[tuple[int, str, str]] = []
    busy_s = down_s = 0
    for node in sorted(nodes):
        down_union = _union(spells[node])
        either = _union(held[node] + spells[node])
        down_s += _length(down_union)
        busy_s += _length(either) - _length(down_union)
        at_start = bool(either) and either[0][0] == t0
        initial.append((t0, node, "busy" if at_start else "idle"))
        for lo, hi in either:
            if lo > t0:
                changes.append((lo, node, "busy"))
            if hi < t1:
                changes.append((hi, node, "idle"))
    changes.sort(key=lambda row: row[0])  # stable: per second, in node order
    last = next((row for row in reversed(changes) if row[1] == initial[0][1]), initial[0])
    rows = [*initial, *changes, (t1, last[1], last[2])]
    lines = [",".join(HEADER)] + [f"{_iso(at)},{node},{state}" for at, node, state in rows]
    window_s = t1 - t0
    return Conversion(
        text="\n".join(lines) + "\n",
        rows=len(rows),
        nodes=len(nodes),
        window_s=window_s,
        busy_node_s=busy_s,
        down_node_s=down_s,
        idle_node_s=len(nodes) * window_s - busy_s - down_s,
        outside_nodes=frozenset(outside),
    )


def _seconds(at: datetime) -> int:
    """Whole seconds since the epoch (an aware datetime; fractions dropped)."""
    return int(at.timestamp() // 1)


def _iso(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` in UTC."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of half-open intervals, as disjoint ones in order; touching ones merge."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(hi - lo for lo, hi in intervals)
