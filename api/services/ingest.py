"""Scheduler node events in bulk: a batch is checked, then applied chunk by chunk, each
chunk in its own write transaction with a handful of statements (the stored events and the
nodes read with one ``SELECT`` each, new events, idle intervals and nodes inserted with one
``INSERT`` each, changed nodes written with one executemany ``UPDATE``), so a large batch
neither holds the write lock for long nor costs a round trip per event.

A node's state is that of its event with the latest ``at``: an event older than the newest
one applied to its node is recorded as superseded (with that newest ``at``) and changes
nothing (events with equal ``at`` apply in arrival order). An applied event also sets the
node's ``until`` (the scheduler's forecast of when it wants the node back) to its own, None
included (a withdrawal); an ``idle`` event for an idle node changes only that, and asks for
a new solve only when it changed. ``busy`` on an idle node ends its idle interval, stored
with whether the node had an ``until`` then (the forecast coverage,
:func:`~interstice.api.services.state.forecast_coverage`). ``busy`` on a held node is a
reclaim: the chunk's reclaimed nodes are released in the same transaction
(:func:`~interstice.api.services.state.release_nodes`, deadline ``at + grace_s``), one new
generation per job and deadline.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta

from interstice.api.services.state import Changes, Conflict, release_nodes
from interstice.api.store.tables import IdleInterval, Node, NodeEvent
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

CHUNK_EVENTS = 1000
"""Events applied per write transaction: between two chunks the write lock goes to whoever
waits for it (a reclaim posted meanwhile waits for one chunk at most)."""


@dataclass(frozen=True)
class Event:
    """A scheduler event: ``state`` of ``node`` from ``at`` on; ``grace_s`` (seconds) is
    the holding job's time to release the node on ``busy``; ``until`` when the scheduler
    expects to need an idle node back (None: unknown)."""

    event_id: str
    node: str
    state: str
    at: datetime
    grace_s: float
    until: datetime | None = None

    def same(self, other: Event | NodeEvent) -> bool:
        """Whether ``other`` (an event or a stored one) is this event again (a retry)."""
        return (self.node, self.state, self.at, self.grace_s, self.until) == (
            other.node,
            other.state,
            other.at,
            other.grace_s,
            other.until,
        )


@dataclass(frozen=True)
class Applied:
    """What one event did: ``reclaimed_job_id`` is the numeric id of the job that had to
    release the node (None: no reclaim); ``superseded_by_at`` the ``at`` of the newer event
    the node had already taken, when the event changed nothing for that reason (None: it
    was applied). A repeated ``event_id`` gives its first record."""

    event_id: str
    node: str
    state: str
    reclaimed_job_id: int | None
    superseded_by_at: datetime | None = None


@dataclass
class _NodeNow:
    """A node as the chunk leaves it."""

    state: str
    since: datetime
    event_at: datetime | None
    holder_job_id: int | None
    until: datetime | None
    new: bool
    changed: bool = False


def chunks(events: Sequence[Event]) -> Iterator[Sequence[Event]]:
    """``events`` in chunks of :data:`CHUNK_EVENTS`, in order."""
    for start in range(0, len(events), CHUNK_EVENTS):
        yield events[start : start + CHUNK_EVENTS]


def refuse_conflicts(session: Session, events: Sequence[Event]) -> None:
    """Check a whole batch before any of it is applied.

    Raises:
        Conflict: an ``event_id`` is stored, or used earlier in the batch, for a different
            event.
    """
    first: dict[str, Event] = {}
    for event in events:
        earlier = first.setdefault(event.event_id, event)
        if not earlier.same(event):
            raise _conflict(event.event_id)
    for chunk in chunks(list(first.values())):
        for stored in _stored(session, chunk).values():
            if not first[stored.event_id].same(stored):
                raise _conflict(stored.event_id)


def apply_events(session: Session, events: Sequence[Event], changes: Changes) -> list[Applied]:
    """Apply ``events`` (at most a chunk of them, see :data:`CHUNK_EVENTS`) in order, inside
    the caller's write transaction (see the module docstring).

    Returns:
        What each event did, in the order of ``events``.

    Raises:
        Conflict: an ``event_id`` was already used for a different event (e.g. by a
            concurrent batch since :func:`refuse_conflicts`); nothing of the chunk is applied.
    """
    stored = _stored(session, events)
    known: dict[str, Applied] = {
        e.event_id: Applied(e.event_id, e.node, e.state, e.reclaimed_job_id, e.superseded_by_at)
        for e in stored.values()
    }
    nodes = {
        name: _NodeNow(state, since, event_at, holder, until, new=False)
        for name, state, since, event_at, holder, until in session.execute(
            select(
                Node.name, Node.state, Node.since, Node.event_at, Node.holder_job_id, Node.until
            ).where(Node.name.in_({e.node for e in events}))
        )
    }
    reclaims: dict[str, datetime] = {}
    intervals: list[dict[str, object]] = []
    inserted: list[dict[str, object]] = []
    batch: dict[str, Event] = {}
    results = []
    for event in events:
        seen = stored.get(event.event_id) or batch.get(event.event_id)
        if seen is not None:
            if not event.same(seen):
                raise _conflict(event.event_id)
            results.append(known[event.event_id])
            continue
        applied = _apply(event, nodes, reclaims, intervals, changes)
        batch[event.event_id] = event
        known[event.event_id] = applied
        results.append(applied)
        inserted.append(
            asdict(event)
            | {
                "reclaimed_job_id": applied.reclaimed_job_id,
                "superseded_by_at": applied.superseded_by_at,
            }
        )
    _write(session, nodes, intervals, inserted)
    _release(session, reclaims, changes)
    return results


def _apply(
    event: Event,
    nodes: dict[str, _NodeNow],
    reclaims: dict[str, datetime],
    intervals: list[dict[str, object]],
    changes: Changes,
) -> Applied:
    """Apply one new event to ``nodes`` (in memory); returns what it did."""
    done = Applied(event.event_id, event.node, event.state, None)
    node = nodes.get(event.node)
    if node is None:
        nodes[event.node] = _NodeNow(event.state, event.at, event.at, None, event.until, new=True)
        changes.stale = changes.stale or event.state == "idle"
        return done
    if node.event_at is not None and event.at < node.event_at:
        # older than the newest event applied to the node: recorded only
        return replace(done, superseded_by_at=node.event_at)
    node.event_at, node.changed = event.at, True
    forecast = node.until is not None  # before this event: did its end have a forecast?
    if node.until != event.until:
        # a revised forecast changes the problem of an idle node only
        node.until = event.until
        changes.stale = changes.stale or node.state == "idle"
    if node.state == event.state:
        return done
    reclaimed = None
    if event.state == "busy":
        length_s = max(0.0, (event.at - node.since).total_seconds())
        intervals.append(
            {
                "node": event.node,
                "started_at": node.since,
                "length_s": length_s,
                "forecast": forecast,
            }
        )
        if node.holder_job_id is not None and event.node not in reclaims:
            reclaimed = node.holder_job_id
            reclaims[event.node] = event.at + timedelta(seconds=event.grace_s)
    node.state, node.since = event.state, event.at
    changes.stale = True
    return replace(done, reclaimed_job_id=reclaimed)


def _write(
    session: Session,
    nodes: dict[str, _NodeNow],
    intervals: list[dict[str, object]],
    inserted: list[dict[str, object]],
) -> None:
    """One statement per table: new nodes, changed nodes, idle intervals, new events."""

    def row(name: str, node: _NodeNow) -> dict[str, object]:
        return {
            "name": name,
            "state": node.state,
            "since": node.since,
            "event_at": node.event_at,
            "until": node.until,
        }

    new = [row(name, n) for name, n in nodes.items() if n.new]
    changed = [row(name, n) for name, n in nodes.items() if n.changed and not n.new]
    if new:
        session.execute(insert(Node), new)
    if changed:
        session.execute(update(Node), changed)
    if intervals:
        session.execute(insert(IdleInterval), intervals)
    if inserted:
        session.execute(insert(NodeEvent), inserted)


def _release(session: Session, reclaims: dict[str, datetime], changes: Changes) -> None:
    """Release the reclaimed nodes, one move per job and deadline (earliest first)."""
    if not reclaims:
        return
    by_deadline: dict[datetime, list[Node]] = {}
    held = session.scalars(
        select(Node).where(Node.name.in_(reclaims)).execution_options(populate_existing=True)
    )
    for node in held:
        by_deadline.setdefault(reclaims[node.name], []).append(node)
    for deadline, released in sorted(by_deadline.items()):
        release_nodes(session, released, reason="reclaim", deadline=deadline, changes=changes)


def _stored(session: Session, events: Sequence[Event]) -> dict[str, NodeEvent]:
    """The stored events among ``events``' ids (at most a chunk of them), by id."""
    rows = session.scalars(
        select(NodeEvent).where(NodeEvent.event_id.in_({e.event_id for e in events}))
    )
    return {row.event_id: row for row in rows}


def _conflict(event_id: str) -> Conflict:
    return Conflict(f"event_id {event_id!r} was already used for a different event")
