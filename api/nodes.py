"""Nodes: the scheduler's node events and the node list.

Functions take the running :class:`~interstice.api.service.Service`; they are synchronous
(run in a thread: node events in their own few, :attr:`Service.event_writes`, so that they
never queue for a thread behind other requests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interstice.api import ingest, schemas
from interstice.api.state import Changes
from interstice.api.tables import Agent, Node
from sqlalchemy import select

if TYPE_CHECKING:
    from interstice.api.service import Service


def node_events(service: Service, body: schemas.NodeEventsCreate) -> schemas.NodeEventsResult:
    """Apply a batch of scheduler events in order, :data:`ingest.CHUNK_EVENTS` per write
    transaction (see :mod:`interstice.api.ingest`), waking the agents of reclaimed nodes
    after each chunk. A chunk holding a ``busy`` event (a reclaim) takes the write lock
    before the other writers waiting for it.

    Raises:
        Conflict: an ``event_id`` was already used for a different event: nothing is
            applied when the batch's check finds it, else (a concurrent batch stored it
            since) the chunks before the one that holds it stay applied.
    """
    events = [ingest.Event(e.event_id, e.node, e.state, e.at, e.grace_s) for e in body.events]
    with service.db.read() as session:
        ingest.refuse_conflicts(session, events)
    applied: list[ingest.Applied] = []
    for chunk in ingest.chunks(events):
        changes = Changes()
        reclaims = any(e.state == "busy" for e in chunk)
        with service.db.write(urgent=reclaims) as session:  # before acks and solves waiting
            applied += ingest.apply_events(session, chunk, changes)
        service.after_commit(changes)
    data = [
        schemas.NodeEventResult(
            event_id=a.event_id,
            node=a.node,
            state=a.state,  # type: ignore[arg-type]
            reclaimed_job_id=None if a.reclaimed_job_id is None else f"j-{a.reclaimed_job_id}",
        )
        for a in applied
    ]
    return schemas.NodeEventsResult(data=data, count=len(data))


def list_nodes(service: Service) -> schemas.NodesPublic:
    """Every node with its state, agent and holder, by name; ``allocatable``: idle with an
    alive agent."""
    with service.db.read() as session:
        rows = session.execute(
            select(Node, Agent).outerjoin(Agent, Agent.node == Node.name).order_by(Node.name)
        )
        data = [
            schemas.NodePublic(
                name=n.name,
                state=n.state,  # type: ignore[arg-type]
                since=n.since,
                allocatable=n.state == "idle" and a is not None and a.state == "alive",
                agent=None if a is None else schemas.NodeAgentBrief.model_validate(a),
                holder=None if n.holder_job_id is None else f"j-{n.holder_job_id}",
            )
            for n, a in rows
        ]
    return schemas.NodesPublic(data=data, count=len(data))
