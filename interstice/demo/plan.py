"""Which part of the real Summit trace the demo replays, and on which of its local nodes.

The Summit node-state trace (February 2021, 4,734 nodes) is mostly short idle gaps: the
median idle interval lasts 8 minutes, which at a 60-fold speedup is 8 seconds, less than a
job takes to start on a laptop. So the demo looks at every window of ``duration_s × speedup``
trace seconds starting on the hour, and counts each node's *usable reclaims* there: idle
spans of at least ``min_idle_s`` (real seconds, clipped to the window) that the scheduler
takes back early enough that the grace period ends inside the run. It takes one of the best
windows (``seed`` draws it) and, greedily, the nodes that add the most usable reclaims at
moments no chosen node already changes (neighbouring Summit nodes are freed and taken back
together by one big job; the demo wants rescales, not only whole preemptions) less their
flickers (idle spans too short for a job to start: every change restarts the job's
workers, so a flickering node would keep a job from training), then the most harvestable
idle time. Windows rank by their nodes' usable reclaims, then by how many of those nodes are
idle at the start (the jobs start at once). The local agents take the chosen Summit hosts' names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interstice.replay.trace import NodeTrace

CANDIDATE_STEP_S = 3600
"""Windows start on the hour of the trace."""
TOP_WINDOWS = 5
"""``seed`` picks one of the best this many windows."""
PREFILTER_WINDOWS = 20
"""Windows whose nodes are chosen (the most distinct reclaim moments)."""
APART_S = 5.0
"""Real seconds within which two nodes' changes count as the same moment."""


@dataclass(frozen=True)
class NodeChange:
    """One event of the replay.

    Attributes:
        at_s: real seconds after the replay's start.
        node: node name (the Summit host's).
        idle: True: the node became idle; False: busy (a reclaim when a job holds it).
    """

    at_s: float
    node: str
    idle: bool


@dataclass(frozen=True)
class ReplayPlan:
    """The node events of one demo run.

    Attributes:
        window_start: the trace time the replay starts at, ``datetime64[s]``.
        window_s: trace seconds replayed.
        speedup: trace seconds per real second.
        nodes: the chosen Summit hosts, one local agent each.
        initial_idle: each node's state at the start, ``{node: idle}``.
        changes: the later changes, in time order.
        usable_reclaims: the chosen nodes' usable reclaims at distinct moments.
    """

    window_start: np.datetime64
    window_s: float
    speedup: float
    nodes: tuple[str, ...]
    initial_idle: dict[str, bool]
    changes: tuple[NodeChange, ...]
    usable_reclaims: int


@dataclass(frozen=True)
class _IdleSpans:
    """Every idle span of every node, trace seconds after the trace start, shape (K,)."""

    node: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray  # the trace's end for a span still open there
    reclaimed: np.ndarray  # ended by a busy change (else open at the trace's end)


def plan_replay(
    trace: NodeTrace,
    n_nodes: int,
    duration_s: float,
    speedup: float,
    min_idle_s: float,
    tail_s: float,
    seed: int = 0,
) -> ReplayPlan:
    """Choose a window and ``n_nodes`` trace nodes and list their events in real time.

    Args:
        trace: the whole node-state trace.
        n_nodes: how many nodes (local agents) replay the trace.
        duration_s: real seconds to replay.
        speedup: trace seconds per real second, > 0.
        min_idle_s: real seconds a node must stay idle for a job to start and train on it.
        tail_s: real seconds before the end of the run after which a reclaim is not counted
            as usable (its grace period would outlast the run).
        seed: seeds the draw of one of the :data:`TOP_WINDOWS` best windows.

    Returns:
        The plan: the window, the mapping and the events.

    Raises:
        ValueError: no nodes, more nodes than the trace has, a non-positive duration or
            speedup, or a window longer than the trace.
    """
    if not 1 <= n_nodes <= len(trace.node_names):
        raise ValueError(f"need 1..{len(trace.node_names)} nodes, got {n_nodes}")
    if duration_s <= 0 or speedup <= 0:
        raise ValueError("duration_s and speedup must be > 0")
    window_s = duration_s * speedup
    if window_s > trace.duration_s:
        raise ValueError(
            f"{window_s:.0f} trace seconds (duration × speedup) exceed the trace's "
            f"{trace.duration_s} s"
        )
    spans = _idle_spans(trace)
    min_idle, tail, apart = min_idle_s * speedup, tail_s * speedup, APART_S * speedup
    # Cheap first pass: the windows with the most distinct moments of usable reclaims...
    moments = []
    for start_s in np.arange(0, trace.duration_s - window_s + 1, CANDIDATE_STEP_S):
        usable = _usable_reclaims(spans, float(start_s), window_s, min_idle, tail)
        moments.append((len(np.unique(spans.end_s[usable] // apart)), float(start_s)))
    moments.sort(key=lambda m: (-m[0], m[1]))
    # ... then the nodes each would get, and how many distinct reclaims those add up to.
    scored = []
    for _, start_s in moments[:PREFILTER_WINDOWS]:
        chosen, usable_count = _choose_nodes(
            trace, spans, start_s, window_s, min_idle, tail, n_nodes, apart
        )
        # then the most of them idle at the start: jobs train from the first second
        idle_now = int(_idle_at(spans, start_s, len(trace.node_names))[chosen].sum())
        scored.append((usable_count, idle_now, start_s, chosen))
    scored.sort(key=lambda score: (-score[0], -score[1], score[2]))
    pick = int(np.random.default_rng(seed).integers(min(TOP_WINDOWS, len(scored))))
    usable_count, _, start_s, chosen = scored[pick]
    window = trace.window(start_s, start_s + window_s, np.array(chosen))  # local i: chosen[i]
    nodes = tuple(str(name) for name in window.node_names)
    changes = [
        NodeChange(float(at_s) / speedup, nodes[int(local)], bool(idle))
        for event, at_s in enumerate(window.event_time_s)
        for local, idle in zip(*window.changes(event), strict=True)
    ]
    return ReplayPlan(
        window_start=window.start,
        window_s=window_s,
        speedup=speedup,
        nodes=nodes,
        initial_idle={nodes[i]: bool(idle) for i, idle in enumerate(window.initial_idle)},
        changes=tuple(changes),
        usable_reclaims=usable_count,
    )


def _idle_spans(trace: NodeTrace) -> _IdleSpans:
    """The idle spans of the whole trace, sorted by node then time (a repeated state is no
    change)."""
    n = len(trace.node_names)
    node = np.concatenate([np.arange(n), trace.change_node])
    at = np.concatenate([np.zeros(n, dtype=np.int64), trace.change_time_s]).astype(np.float64)
    idle = np.concatenate([trace.initial_idle, trace.change_idle])
    order = np.lexsort((at, node))  # stable: the initial row first
    node, at, idle = node[order], at[order], idle[order]
    keep = np.append(True, (node[1:] != node[:-1]) | (idle[1:] != idle[:-1]))
    node, at, idle = node[keep], at[keep], idle[keep]
    last = np.append(node[1:] != node[:-1], True)
    end = np.where(last, float(trace.duration_s), np.append(at[1:], 0.0))
    return _IdleSpans(node[idle], at[idle], end[idle], ~last[idle])


def _idle_at(spans: _IdleSpans, at_s: float, n: int) -> np.ndarray:
    """Whether each of the ``n`` nodes is idle at ``at_s``, bool, shape (n,)."""
    idle = np.zeros(n, dtype=bool)
    idle[spans.node[(spans.start_s <= at_s) & (spans.end_s > at_s)]] = True
    return idle


def _usable_reclaims(
    spans: _IdleSpans, start_s: float, window_s: float, min_idle_s: float, tail_s: float
) -> np.ndarray:
    """Which spans are usable reclaims in the window ``[start_s, start_s + window_s)``."""
    clipped_s = spans.end_s - np.maximum(spans.start_s, start_s)
    return (
        spans.reclaimed
        & (spans.end_s > start_s)
        & (spans.end_s <= start_s + window_s - tail_s)
        & (clipped_s >= min_idle_s)
    )


def _choose_nodes(
    trace: NodeTrace,
    spans: _IdleSpans,
    start_s: float,
    window_s: float,
    min_idle_s: float,
    tail_s: float,
    count: int,
    apart_s: float,
) -> tuple[list[int], int]:
    """Greedily ``count`` trace node ids, each the best by: usable reclaims at moments no
    chosen node changes, less its flickers (idle spans too short to use: a rescale up and
    one down for nothing); then idle seconds in usable spans. Returns them and how many
    usable reclaims they add at new moments."""
    n = len(trace.node_names)
    end_s = start_s + window_s
    inside = (spans.end_s > start_s) & (spans.start_s < end_s)
    clipped_s = np.minimum(spans.end_s, end_s) - np.maximum(spans.start_s, start_s)
    usable = _usable_reclaims(spans, start_s, window_s, min_idle_s, tail_s)
    long_enough = inside & (clipped_s >= min_idle_s)
    idle_s = np.bincount(spans.node[long_enough], weights=clipped_s[long_enough], minlength=n)
    flickers = np.bincount(
        spans.node[inside & (clipped_s < min_idle_s) & (spans.end_s < end_s)], minlength=n
    )
    first = np.searchsorted(spans.node, np.arange(n + 1))  # spans are sorted by node

    def changes_s(node: int) -> np.ndarray:
        """Every moment ``node`` changes state inside the window."""
        mine = slice(first[node], first[node + 1])
        starts, ends = spans.start_s[mine][inside[mine]], spans.end_s[mine][inside[mine]]
        return np.concatenate([starts[starts > start_s], ends[ends < end_s]])

    reclaim_s = {
        int(node): spans.end_s[first[node] : first[node + 1]][usable[first[node] : first[node + 1]]]
        for node in np.unique(spans.node[usable])
    }
    chosen: list[int] = []
    taken = np.empty(0)
    total = 0
    for _ in range(count):
        # Among the nodes without a usable reclaim: the fewest flickers, then the idlest.
        others = np.ones(n, dtype=bool)
        others[chosen + list(reclaim_s)] = False
        best, best_new, best_key = -1, 0, (-np.inf, -1.0)
        if others.any():
            ids = np.flatnonzero(others)
            best = int(ids[np.lexsort((-idle_s[ids], flickers[ids]))[0]])
            best_key = (-float(flickers[best]), float(idle_s[best]))
        for node, times in reclaim_s.items():
            if node in chosen:
                continue
            new = int((~(np.abs(taken[:, None] - times[None, :]) < apart_s).any(axis=0)).sum())
            key = (float(new - flickers[node]), float(idle_s[node]))
            if key > best_key:
                best, best_new, best_key = node, new, key
        chosen.append(best)
        total += best_new
        taken = np.concatenate([taken, changes_s(best)])
    return chosen, total
