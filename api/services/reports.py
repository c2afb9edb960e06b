"""What admins read of the service's past: the audit log, the stats, the nodes over time,
the applied solves, and the Prometheus gauges (refreshed at scrape time).

Functions take the running :class:`~interstice.api.service.Service`; they only read and are
synchronous (FastAPI runs them in its thread pool).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from interstice.api.schemas.nodes import NodeHistoryPublic
from interstice.api.schemas.objective import AuditPublic, AuditsPublic
from interstice.api.schemas.reports import SolvesPublic, StatsPublic
from interstice.api.services import history, scalability, state, usage
from interstice.api.services import nodes as nodes_service
from interstice.api.services.stats import compute_stats
from interstice.api.store.tables import Agent, AuditEntry, Job, Node, utcnow
from sqlalchemy import func, select

if TYPE_CHECKING:
    from interstice.api.service import Service

NODE_HISTORY_DEFAULT = timedelta(hours=1)
"""The window of a node history asked without ``since``."""


def audit(service: Service, limit: int, offset: int) -> AuditsPublic:
    """Admin changes and refused requests, newest first; ``count`` before ``limit``."""
    with service.db.read() as session:
        count = session.scalar(select(func.count()).select_from(AuditEntry)) or 0
        rows = session.scalars(
            select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit).offset(offset)
        )
        data = [
            AuditPublic(
                id=a.id,
                at=a.at,
                actor=a.actor,
                token_id=None if a.token_id is None else f"t-{a.token_id}",
                action=a.action,
                old=a.old,
                new=a.new,
            )
            for a in rows
        ]
    return AuditsPublic(data=data, count=count)


def stats(service: Service, since: datetime | None) -> StatsPublic:
    """The admin's measures from ``since`` (None: the service's lifetime) to now
    (:func:`interstice.api.services.stats.compute_stats`)."""
    with service.db.read() as session:
        return compute_stats(session, scalability.stored(session), since, utcnow())


def node_history(service: Service, since: datetime | None) -> NodeHistoryPublic:
    """The nodes over time from ``since`` (None: :data:`NODE_HISTORY_DEFAULT` ago) to now
    (:func:`interstice.api.services.history.node_history`)."""
    until = utcnow()
    with service.db.read() as session:
        return history.node_history(
            session, service.agent_counts, since or until - NODE_HISTORY_DEFAULT, until
        )


def solves(service: Service, limit: int, offset: int) -> SolvesPublic:
    """The applied solves, newest first (:func:`interstice.api.services.history.solves`)."""
    with service.db.read() as session:
        data, count = history.solves(session, limit, offset)
    return SolvesPublic(data=data, count=count)


def refresh_gauges(service: Service) -> None:
    """Set the gauges of ``service.metrics`` from the database (at scrape time)."""
    m = service.metrics
    with service.db.read() as session:
        nodes = dict(session.execute(select(Node.state, func.count()).group_by(Node.state)).all())
        m.idle_nodes.set(nodes.get("idle", 0))
        m.busy_nodes.set(nodes.get("busy", 0))
        m.allocatable_nodes.set(len(state.allocatable_nodes(session, service.settings.multi_user)))
        m.quarantined_nodes.set(
            session.scalar(select(func.count()).where(Node.quarantined_at.is_not(None))) or 0
        )
        m.allocated_nodes.set(
            session.scalar(select(func.count()).where(Node.holder_job_id.is_not(None))) or 0
        )
        counts = dict(session.execute(select(Job.state, func.count()).group_by(Job.state)).all())
        for job_state in ("queued", "running", "finished", "cancelled", "failed"):
            m.jobs.labels(job_state).set(counts.get(job_state, 0))
        m.pending_commands.set(state.count_pending_commands(session))
        m.stale_forecasts.set(nodes_service.count_stale_forecasts(session, utcnow()))
        m.agents_alive.set(session.scalar(select(func.count()).where(Agent.state == "alive")) or 0)
        m.agents_not_as_owner.set(
            session.scalar(
                select(func.count()).where(Agent.state == "alive", Agent.runs_as_owner.is_(False))
            )
            or 0
        )
        lifetime = compute_stats(session, scalability.stored(session), None, utcnow())
    for name, gauge in m.lifetime.items():
        value = getattr(lifetime, name)
        gauge.set(math.nan if value is None else value)
    usage.set_user_gauges(service)
