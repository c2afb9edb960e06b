"""The dashboard's histories: the nodes over time and the applied solves, derived from the
durable state (idle intervals and node events, rescale records, allocation records), plus
the alive-agent count, which the database does not keep over time and which this process
therefore counts in memory at each lease sweep (:class:`AgentCounts`).
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import deque
from datetime import datetime, timedelta
from typing import Any

from interstice.api.schemas.nodes import NodeHistoryPoint, NodeHistoryPublic, ReclaimPublic
from interstice.api.schemas.reports import SolveJobPublic, SolvePublic
from interstice.api.store.tables import AllocationRecord, IdleInterval, Node, NodeEvent, Rescale
from sqlalchemy import func, select
from sqlalchemy.orm import Session

AGENT_COUNTS_KEPT = 10000
"""Most changes of the alive-agent count kept in memory (the oldest are dropped)."""
HISTORY_POINTS = 2000
"""Most points of a node history: with more changes, evenly spaced instants."""
RECLAIMS_KEPT = 1000
"""Most reclaims a node history lists (the newest)."""


class AgentCounts:
    """The alive-agent count over time, as a step function kept in memory: one entry per
    change (thread-safe; the newest :data:`AGENT_COUNTS_KEPT` changes)."""

    def __init__(self, started_at: datetime) -> None:
        self.started_at = started_at
        self._changes: deque[tuple[float, int]] = deque(maxlen=AGENT_COUNTS_KEPT)
        self._lock = threading.Lock()

    def record(self, at: datetime, alive: int) -> None:
        """The count at ``at`` (a sweep); kept only when it differs from the last one."""
        with self._lock:
            if not self._changes or self._changes[-1][1] != alive:
                self._changes.append((at.timestamp(), alive))

    def snapshot(self) -> list[tuple[float, int]]:
        """The changes, oldest first: (unix time, count)."""
        with self._lock:
            return list(self._changes)


def node_history(
    session: Session, agents: AgentCounts, since: datetime, until: datetime
) -> NodeHistoryPublic:
    """The nodes from ``since`` to ``until`` (see :class:`NodeHistoryPublic`).

    Args:
        session: a read session.
        agents: the alive-agent counts of this process.
        since: start of the window (aware UTC).
        until: end of the window, now (aware UTC).
    """
    first_seen = _first_seen(session)
    counts = agents.snapshot()
    if first_seen or counts:  # nothing to show before the first record
        first = min(first_seen[:1] + [t for t, _ in counts[:1]])
        since = max(since, datetime.fromtimestamp(first, until.tzinfo))
    start, end = since.timestamp(), until.timestamp()
    idle_starts, idle_ends = _idle_intervals(session, since, until)
    allocations = _allocations(session, since, until)
    count_times = [t for t, _ in counts]
    changes = {t for t in (*idle_starts, *idle_ends, *first_seen, *count_times) if start < t <= end}
    changes |= {t for steps in allocations.values() for t, _ in steps if start < t <= end}
    instants = sorted({start, end} | changes) if start < end else [end]
    if len(instants) > HISTORY_POINTS:
        step = (end - start) / (HISTORY_POINTS - 1)
        instants = [start + i * step for i in range(HISTORY_POINTS)]
    data = []
    for t in instants:
        idle = bisect_right(idle_starts, t) - bisect_right(idle_ends, t)
        known = bisect_right(first_seen, t)
        held = {}
        for job_id, steps in allocations.items():
            i = bisect_right(steps, (t, float("inf"))) - 1
            if i >= 0 and steps[i][1] > 0:
                held[job_id] = steps[i][1]
        c = bisect_right(count_times, t) - 1
        data.append(
            NodeHistoryPoint(
                at=datetime.fromtimestamp(t, until.tzinfo),
                idle=idle,
                busy=max(0, known - idle),
                allocated=held,
                agents_alive=counts[c][1] if c >= 0 else None,
            )
        )
    return NodeHistoryPublic(
        since=since,
        until=until,
        data=data,
        count=len(data),
        reclaims=_reclaims(session, since, until),
        agents_alive_since=agents.started_at,
    )


def _idle_intervals(
    session: Session, since: datetime, until: datetime
) -> tuple[list[float], list[float]]:
    """Sorted starts and sorted ends (unix times) of the idle intervals that may overlap the
    window: the finished ones (started at most the longest interval before ``since``) and
    the current idle nodes' (ending after ``until``)."""
    longest_s = session.scalar(select(func.max(IdleInterval.length_s))) or 0.0
    rows = session.execute(
        select(IdleInterval.started_at, IdleInterval.length_s).where(
            IdleInterval.started_at <= until,
            IdleInterval.started_at >= since - timedelta(seconds=longest_s + 1),
        )
    )
    spans = [(at.timestamp(), at.timestamp() + length_s) for at, length_s in rows]
    after = until.timestamp() + 1
    spans += [
        (at.timestamp(), after)
        for at in session.scalars(select(Node.since).where(Node.state == "idle"))
    ]
    return sorted(s for s, _ in spans), sorted(e for _, e in spans)


def _first_seen(session: Session) -> list[float]:
    """Per known node, sorted: when it was first seen (its first event, first idle interval
    or, for a node only an agent's registration made known, its state's start)."""
    seen: dict[str, float] = {}
    for query in (
        select(NodeEvent.node, func.min(NodeEvent.at)).group_by(NodeEvent.node),
        select(IdleInterval.node, func.min(IdleInterval.started_at)).group_by(IdleInterval.node),
        select(Node.name, Node.since),
    ):
        for name, at in session.execute(query):
            seen[name] = min(seen.get(name, at.timestamp()), at.timestamp())
    return sorted(seen.values())


def _allocations(
    session: Session, since: datetime, until: datetime
) -> dict[str, list[tuple[float, int]]]:
    """Per job id, its node counts as (unix time, nodes) steps, oldest first: its newest
    rescale before ``since`` and its rescales up to ``until``."""
    before = select(func.max(Rescale.id)).where(Rescale.at < since).group_by(Rescale.job_id)
    rows = session.scalars(
        select(Rescale)
        .where((Rescale.id.in_(before)) | ((Rescale.at >= since) & (Rescale.at <= until)))
        .order_by(Rescale.at, Rescale.id)
    )
    steps: dict[str, list[tuple[float, int]]] = {}
    for r in rows:
        steps.setdefault(f"j-{r.job_id}", []).append((r.at.timestamp(), len(r.to_nodes)))
    return steps


def _reclaims(session: Session, since: datetime, until: datetime) -> list[ReclaimPublic]:
    rows = session.scalars(
        select(NodeEvent)
        .where(
            NodeEvent.reclaimed_job_id.is_not(None), NodeEvent.at >= since, NodeEvent.at <= until
        )
        .order_by(NodeEvent.at.desc())
        .limit(RECLAIMS_KEPT)
    )
    return [
        ReclaimPublic(at=e.at, node=e.node, job_id=f"j-{e.reclaimed_job_id}")
        for e in reversed(list(rows))
    ]


def solves(session: Session, limit: int, offset: int) -> tuple[list[SolvePublic], int]:
    """The applied solves (allocation records), newest first, and their total count.

    ``rescales`` counts the jobs whose share the solve marked ``rescaled``.
    """
    count = session.scalar(select(func.count()).select_from(AllocationRecord)) or 0
    rows = session.scalars(
        select(AllocationRecord).order_by(AllocationRecord.id.desc()).limit(limit).offset(offset)
    )
    data = []
    for row in rows:
        shares = [_share(s) for s in row.jobs]
        data.append(
            SolvePublic(
                id=row.id,
                at=row.at,
                status=row.status,
                backend=row.backend,
                objective=row.objective,
                solve_time_s=row.solve_time_s,
                horizon_s=row.horizon_s,
                rescales=sum(s.rescaled for s in shares),
                jobs=shares,
            )
        )
    return data, count


def _share(stored: dict[str, Any]) -> SolveJobPublic:
    """A job's share as :meth:`JobAllocation.model_dump` stored it."""
    return SolveJobPublic(
        job_id=stored["job_id"],
        node_count=stored["node_count"],
        spb_depth=stored["spb_depth"],
        samples_per_s=stored.get("samples_per_s", 0.0),
        rescaled=stored.get("rescaled", False),
    )
