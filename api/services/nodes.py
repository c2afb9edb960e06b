"""Nodes: the scheduler's node events, the node list and an admin's release from quarantine.

Functions take the running :class:`~interstice.api.service.Service`; they are synchronous
(run in a thread: node events in their own few, :attr:`Service.event_writes`, so that they
never queue for a thread behind other requests).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from interstice.api.auth.tokens import Principal, audit_entry
from interstice.api.limits import short
from interstice.api.schemas.nodes import (
    NodeAgentBrief,
    NodeEventResult,
    NodeEventsCreate,
    NodeEventsResult,
    NodePublic,
    NodesPublic,
)
from interstice.api.services import ingest
from interstice.api.services.quarantine import lift
from interstice.api.services.state import Changes, NotFound
from interstice.api.store.tables import Agent, Node, utcnow
from sqlalchemy import Row, Select, func, select
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from interstice.api.service import Service


def node_events(service: Service, body: NodeEventsCreate) -> NodeEventsResult:
    """Apply a batch of scheduler events in order, :data:`ingest.CHUNK_EVENTS` per write
    transaction (see :mod:`interstice.api.services.ingest`), waking the agents of reclaimed nodes
    after each chunk. A chunk holding a ``busy`` event (a reclaim) takes the write lock
    before the other writers waiting for it.

    Raises:
        Conflict: an ``event_id`` was already used for a different event: nothing is
            applied when the batch's check finds it, else (a concurrent batch stored it
            since) the chunks before the one that holds it stay applied.
    """
    events = [
        ingest.Event(e.event_id, e.node, e.state, e.at, e.grace_s, e.until) for e in body.events
    ]
    with service.db.read() as session:
        ingest.refuse_conflicts(session, events)
    applied: list[ingest.Applied] = []
    for chunk in ingest.chunks(events):
        changes = Changes()
        reclaims = any(e.state == "busy" for e in chunk)
        with service.db.write(urgent=reclaims) as session:  # before acks and solves waiting
            applied += ingest.apply_events(session, chunk, changes)
        service.after_commit(changes)
    data = [_result(a) for a in applied]
    return NodeEventsResult(data=data, count=len(data))


def _result(applied: ingest.Applied) -> NodeEventResult:
    """The answer for one event: the same for its first arrival and every retry."""
    newer_at = applied.superseded_by_at
    return NodeEventResult(
        event_id=applied.event_id,
        node=applied.node,
        state=applied.state,  # type: ignore[arg-type]
        applied=newer_at is None,
        reason=None if newer_at is None else f"superseded by a newer event at {_iso(newer_at)}",
        reclaimed_job_id=(
            None if applied.reclaimed_job_id is None else f"j-{applied.reclaimed_job_id}"
        ),
    )


def _iso(at: datetime | None) -> str | None:
    """``at`` (aware UTC) as the answers' JSON writes times: ISO 8601 ending in ``Z``
    (None for None)."""
    return None if at is None else at.isoformat().replace("+00:00", "Z")


def stale(until: datetime | None, now: datetime) -> bool:
    """Whether a node's ``until`` (aware UTC; None: none given) has passed at ``now``: a
    stale forecast, which the optimizer reads as an unknown end (the node stays until its
    ``busy`` event, and none is due at a known time)."""
    return until is not None and until <= now


def count_stale_forecasts(session: Session, now: datetime) -> int:
    """Nodes whose ``until`` has passed at ``now`` (:func:`stale`); only idle nodes keep an
    ``until``."""
    query = select(func.count()).select_from(Node).where(Node.until <= now)
    return session.scalar(query) or 0


def list_nodes(service: Service, limit: int, cursor: str | None) -> NodesPublic:
    """A page of nodes with their state, agent, holder and quarantine, by name;
    ``allocatable``: idle with an alive agent, not quarantined; ``until_stale``: its
    ``until`` has passed (:func:`stale`).

    Args:
        service: the running service.
        limit: most nodes on the page.
        cursor: the previous page's ``next_cursor`` (the last name it held): the page starts
            after it; None: the first page.

    Returns:
        The page; ``count`` is every node's, ``next_cursor`` None on the last page.
    """
    now = utcnow()
    with service.db.read() as session:
        query = _node_rows()
        if cursor is not None:
            query = query.where(Node.name > cursor)
        rows = session.execute(query.order_by(Node.name).limit(limit + 1)).all()
        total = session.scalar(select(func.count()).select_from(Node)) or 0
    data = [_public(row, now) for row in rows[:limit]]
    next_cursor = data[-1].name if len(rows) > limit else None
    return NodesPublic(data=data, count=total, next_cursor=next_cursor)


def _node_rows() -> Select[Any]:
    """A row per node of what :func:`_public` reads, its agent's id and state None without
    one: plain rows, not ORM objects, which cost most of a large page's time to load."""
    return select(
        Node.name,
        Node.state,
        Node.since,
        Node.until,
        Node.holder_job_id,
        Node.quarantined_at,
        Node.quarantine_reason,
        Agent.id,
        Agent.state,
    ).outerjoin(Agent, Agent.node == Node.name)


def _public(row: Row[Any], now: datetime) -> NodePublic:
    """A row of :func:`_node_rows` as :func:`list_nodes` shows its node at ``now``."""
    # unpacked: a row's columns by name cost microseconds each, thousands of times a page
    name, state, since, until, holder_job_id, quarantined_at, reason, agent_id, agent_state = row
    return NodePublic(
        name=name,
        state=state,
        since=since,
        until=until,
        until_stale=stale(until, now),
        allocatable=state == "idle" and agent_state == "alive" and quarantined_at is None,
        agent=(
            None
            if agent_id is None
            else NodeAgentBrief(agent_id=f"a-{agent_id}", state=agent_state)
        ),
        holder=None if holder_job_id is None else f"j-{holder_job_id}",
        quarantined_at=quarantined_at,
        quarantine_reason=reason,
    )


def release_node(service: Service, name: str, who: Principal) -> NodePublic:
    """An admin releases ``name`` from quarantine (:mod:`interstice.api.services.quarantine`):
    an idle node with an alive agent is allocatable again and a solve follows. Idempotent (a
    node not quarantined is answered as it is); audited (``node.release``) when it ends a
    quarantine.

    Raises:
        NotFound: no node ``name``.
    """
    changes = Changes()
    with service.db.write() as session:
        node = session.get(Node, name)
        if node is None:
            raise NotFound(f"node {short(name)} not found")
        old = {"quarantined_at": _iso(node.quarantined_at), "reason": node.quarantine_reason}
        if lift(node, changes, f"released by {who.name}"):
            session.add(audit_entry(who, "node.release", old, {"node": name}))
        session.flush()  # the row below reads the release
        answer = _public(session.execute(_node_rows().where(Node.name == name)).one(), utcnow())
    service.after_commit(changes)
    return answer
