"""The agents' leases: kept in memory per process, written to the database in bulk by the
lease sweep, which (on the leader) also marks silent agents lost.

A lease is the ``time.monotonic()`` of an agent's last sign of life (registration,
heartbeat, long-poll). Renewals, the reports that come with them and the revivals of agents
this process's sweeps marked lost stay in memory until :func:`sweep` writes them, so a
heartbeat that says nothing new of its job never waits for the write lock.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from interstice.api.schemas.agents import Heartbeat
from interstice.api.services import state
from interstice.api.store.tables import Agent, Node, utcnow
from sqlalchemy import select, update

if TYPE_CHECKING:
    from interstice.api.service import Service

log = logging.getLogger("interstice.api")

LEASE_ROWS_PER_WRITE = 500
"""Agents' leases written per write transaction: at 5,000 agents one transaction held the
write lock for seconds, and a reclaim waited for it."""


@dataclass(frozen=True)
class Renewals:
    """What :meth:`Leases.take` hands the sweep.

    Attributes:
        leases: every held lease, agent id -> ``time.monotonic()`` of its last renewal.
        renewed: agents renewed since the last sweep.
        revived: agents this process had marked lost that heartbeat since.
        reports: the newest in-memory report of each renewed agent that sent one.
    """

    leases: dict[int, float]
    renewed: set[int]
    revived: set[int]
    reports: dict[int, dict[str, Any]]


class Leases:
    """The leases, reports and lost marks of this process (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: dict[int, float] = {}
        self._reports: dict[int, dict[str, Any]] = {}
        self._renewed: set[int] = set()
        self._lost: set[int] = set()
        """Agents this process's sweeps marked lost: a heartbeat revives them in memory."""
        self._revived: set[int] = set()
        self._seen: dict[str, tuple[str | None, int, float]] = {}
        """Per job id: the rendezvous id of its newest recorded report, the largest step
        recorded for it, the largest ``samples_done`` recorded (see :meth:`news`)."""

    def holds(self, agent_id: int) -> bool:
        """Whether ``agent_id`` holds a lease here (alive as far as this process knows)."""
        return agent_id in self._leases

    def grant(self, agent_id: int) -> None:
        """Start or renew the lease of an agent the database just recorded alive."""
        with self._lock:
            self._leases[agent_id] = time.monotonic()

    def renew(self, agent_id: int, body: Heartbeat) -> bool:
        """Renew the lease and keep the report of an alive agent, or of one a sweep of this
        process marked lost (its revival is written by the next :func:`sweep`).

        Returns:
            False when the heartbeat must be written now instead: the agent holds no lease
            here (unknown, left, or lost by another process) or ``body`` has news
            (:meth:`news`).
        """
        if self.news(body):
            return False
        with self._lock:
            if agent_id in self._lost:
                self._lost.discard(agent_id)
                self._revived.add(agent_id)
            elif agent_id not in self._leases:
                return False
            self._leases[agent_id] = time.monotonic()
            self._reports[agent_id] = body.model_dump(exclude_unset=True)
            self._renewed.add(agent_id)
        return True

    def news(self, body: Heartbeat) -> bool:
        """Whether a report says something of its job that this process has not recorded:
        a ``job_state`` that ends it, more samples, or a step beyond the newest one recorded
        for its generation (per job, in memory; a restart records the next report)."""
        if body.job_id is None:
            return False
        if body.job_state in ("finished", "failed"):
            return True
        seen = self._seen.get(body.job_id)
        if seen is None or seen[0] != body.rendezvous_id:
            return body.step is not None or body.samples_done is not None
        return (body.step is not None and body.step > seen[1]) or (
            body.samples_done is not None and body.samples_done > seen[2]
        )

    def recorded(self, agent_id: int, body: Heartbeat) -> None:
        """After a heartbeat was written: renew the lease, keep the report, and remember
        its job's progress so that the same report is no news (:meth:`news`)."""
        with self._lock:
            self._leases[agent_id] = time.monotonic()
            self._reports[agent_id] = body.model_dump(exclude_unset=True)
            if body.job_id is not None:
                seen = self._seen.get(body.job_id)
                same = seen is not None and seen[0] == body.rendezvous_id
                self._seen[body.job_id] = (
                    body.rendezvous_id,
                    max(body.step or 0, seen[1] if seen and same else 0),
                    max(body.samples_done or 0.0, seen[2] if seen else 0.0),
                )

    def touch(self, agent_id: int) -> None:
        """Renew the lease of an alive agent as a heartbeat without a report would (a
        long-poll); :func:`sweep` writes the time."""
        with self._lock:
            if agent_id in self._leases:
                self._leases[agent_id] = time.monotonic()
                self._renewed.add(agent_id)

    def drop(self, agent_id: int) -> None:
        """Forget the agent's lease, report and lost mark (it left)."""
        with self._lock:
            self._leases.pop(agent_id, None)
            self._reports.pop(agent_id, None)
            self._lost.discard(agent_id)
            self._revived.discard(agent_id)

    def report(self, agent_id: int, stored: dict[str, Any] | None) -> dict[str, Any] | None:
        """The agent's newest report: the in-memory one, else ``stored`` (the database's)."""
        return self._reports.get(agent_id, stored)

    def take(self) -> Renewals:
        """The leases, and the renewals, revivals and reports since the last call."""
        with self._lock:
            renewed, self._renewed = self._renewed, set()
            revived, self._revived = self._revived, set()
            reports = {a: self._reports[a] for a in renewed if a in self._reports}
            return Renewals(dict(self._leases), renewed, revived, reports)

    def mark_lost(self, agent_ids: list[int]) -> None:
        """Drop the leases of agents a sweep marked lost; their next heartbeat revives them
        in memory (:meth:`renew`)."""
        with self._lock:
            for agent_id in agent_ids:
                self._leases.pop(agent_id, None)
            self._lost.update(agent_ids)


def sweep(service: Service) -> None:
    """Write the revivals, leases and reports renewed since the last sweep to the database
    (bulk updates, :data:`LEASE_ROWS_PER_WRITE` agents per transaction); on the leader, also
    mark agents silent for ``missed_heartbeats_lost`` intervals lost (their jobs rescale
    once each).

    An agent renewed here that the database says is lost (a sweep of another replica, or
    of this one, marked it) is alive again. An agent is silent when neither this process
    nor the database (leases written by every replica) saw it within the limit; an agent
    this process holds no lease of counts from when it became leader, so a restart or a
    takeover does not lose agents. A follower (``service.leader_since`` None) marks nobody
    lost.
    """
    settings = service.settings
    limit_s = settings.missed_heartbeats_lost * settings.heartbeat_interval_s
    now, wall, leader_since = time.monotonic(), utcnow(), service.leader_since
    taken = service.leases.take()
    leases = taken.leases
    changes = state.Changes()
    with service.db.write() as session:
        for agent, node_state in session.execute(
            select(Agent, Node.state)
            .outerjoin(Node, Node.name == Agent.node)
            .where(Agent.id.in_(taken.revived | taken.renewed), Agent.state == "lost")
        ):
            agent.state = "alive"
            changes.stale = changes.stale or node_state == "idle"
        alive = session.execute(
            select(Agent.id, Agent.last_heartbeat_at).where(Agent.state == "alive")
        ).all()
        silent = []
        if leader_since is not None:
            for a, beat_at in alive:
                here_s = now - leases.get(a, leader_since)
                seen_s = here_s if beat_at is None else (wall - _aware(beat_at)).total_seconds()
                if min(here_s, seen_s) > limit_s:
                    silent.append(a)
        lost = list(session.scalars(select(Agent).where(Agent.id.in_(silent))))
        for agent in lost:
            log.info("agent %s on %s lost", agent.agent_id, agent.node)
        state.agents_gone(session, lost, "lost", changes)  # one rescale per job
        service.agent_counts.record(wall, len(alive) - len(silent))
    service.leases.mark_lost(silent)
    service.metrics.agents_lost.inc(len(silent))
    service.after_commit(changes)
    fresh = [
        {"id": a, "last_heartbeat_at": wall - timedelta(seconds=now - leases[a])}
        | ({"report": taken.reports[a]} if a in taken.reports else {})
        for a in taken.renewed
        if a in leases and a not in silent
    ]
    for rows in (
        [row for row in fresh if "report" in row],
        [row for row in fresh if "report" not in row],
    ):
        for start in range(0, len(rows), LEASE_ROWS_PER_WRITE):  # others write in between
            with service.db.write() as session:
                session.execute(update(Agent), rows[start : start + LEASE_ROWS_PER_WRITE])


def _aware(at: datetime) -> datetime:
    """``at`` as an aware UTC time (SQLite returns naive UTC times)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
