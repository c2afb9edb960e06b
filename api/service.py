"""The service layer: what routes and the control loop call.

Each method runs one write (or read) transaction, then acts on its :class:`Changes` after
the commit: wakes long-polls, marks the allocation stale, counts rescales. Methods are
synchronous; FastAPI runs them in its thread pool.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import anyio
from interstice.api import history, idempotency, schemas, state
from interstice.api.db import Database
from interstice.api.logs import read_rank_log
from interstice.api.metrics import Metrics
from interstice.api.notify import Notifier
from interstice.api.settings import Settings
from interstice.api.state import ACTIVE_JOB_STATES, Changes, Conflict, NotFound, parse_id
from interstice.api.stats import compute_stats
from interstice.api.tables import (
    Agent,
    AuditEntry,
    Command,
    Config,
    Job,
    JobMetric,
    Node,
    Rescale,
    Token,
    utcnow,
)
from interstice.api.tokens import Principal, TokenCache, hash_token
from interstice.api.tokens import create_token as create_token  # re-exported for callers
from interstice.optimizer import ScalabilityTable
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from interstice.wire import DEFAULT_ENTRYPOINT, checkpoint_dir, job_dir

log = logging.getLogger("interstice.api")

LOG_READ_MAX_BYTES = 1 << 20
"""Most bytes of a log one ``GET /v1/jobs/{id}/logs`` answers."""
DEFAULT_OBJECTIVE: dict[str, Any] = {
    "throughput": 1.0,
    "speedup": False,
    "node_seconds": True,
    "fairness": 0.0,
    "priority": 1.0,
    "churn": 0.0,
    "early_finish": 0.9,
    "horizon_s": "auto",
    "backend": "cpsat",
    "time_limit_s": 10.0,
}


class Service:
    """State, wake-ups and staleness of one running service."""

    def __init__(self, db: Database, settings: Settings, metrics: Metrics) -> None:
        self.db = db
        self.settings = settings
        self.metrics = metrics
        self.notifier = Notifier()
        self.on_stale: Callable[[], None] = lambda: None
        self.tokens = TokenCache(db)
        self._leases: dict[int, float] = {}
        self._reports: dict[int, dict[str, Any]] = {}
        self.poll_reads: anyio.CapacityLimiter | None = None
        """Threads of the long-polls' reads (set at start-up), apart from FastAPI's pool where
        writers queue on the write lock: a waiting writer never delays a poll's answer."""
        self._renewed: set[int] = set()
        self._lost: set[int] = set()
        """Agents this process's sweeps marked lost: a heartbeat revives them in memory."""
        self._revived: set[int] = set()
        self._seen: dict[str, tuple[str | None, int, float]] = {}
        """Per job id: the rendezvous id of its newest recorded report, the largest step
        recorded for it, the largest ``samples_done`` recorded (see :meth:`_news`)."""
        self._lease_lock = threading.Lock()
        self.leader_since: float | None = time.monotonic()
        """``time.monotonic()`` when this process became leader (see
        :mod:`interstice.api.leader`), None while it follows: only the leader's
        :meth:`sweep` marks agents lost. One process (SQLite) leads from the start."""
        self.agent_counts = history.AgentCounts(utcnow())
        """Alive agents at each lease sweep (the database keeps no such history)."""

    # --- plumbing ------------------------------------------------------------------------

    def after_commit(self, changes: Changes) -> None:
        """Wake long-polls, count rescales, mark stale: what follows a commit."""
        self.notifier.wake(changes.wake)
        for reason, n in changes.rescales.items():
            self.metrics.rescales.labels(reason).inc(n)
        if changes.stale:
            self.on_stale()

    def bootstrap(self) -> None:
        """Load the scalability table from its CSV when none is stored; store a bootstrap token."""
        with self.db.write() as session:
            if session.get(Config, "scalability") is None:
                source = self.settings.scalability_source()
                if source is not None:
                    text = Path(source).read_text()
                    ScalabilityTable.from_csv(text)
                    session.add(
                        Config(key="scalability", value={"csv": text, "source": str(source)})
                    )
            secret = self.settings.bootstrap_admin_token
            if secret is not None:
                digest = hash_token(secret.get_secret_value())
                if session.scalar(select(Token).where(Token.token_sha256 == digest)) is None:
                    session.add(Token(name="bootstrap", role="admin", token_sha256=digest))

    # --- nodes ---------------------------------------------------------------------------

    def node_events(self, body: schemas.NodeEventsCreate) -> schemas.NodeEventsResult:
        """Apply a batch of scheduler events in order (see :func:`state.apply_node_events`)."""
        changes = Changes()
        with self.db.write() as session:
            records = state.apply_node_events(
                session,
                [(e.event_id, e.node, e.state, e.at, e.grace_s) for e in body.events],
                changes,
            )
            data = [
                schemas.NodeEventResult(
                    event_id=r.event_id,
                    node=r.node,
                    state=r.state,  # type: ignore[arg-type]
                    reclaimed_job_id=None
                    if r.reclaimed_job_id is None
                    else f"j-{r.reclaimed_job_id}",
                )
                for r in records
            ]
        self.after_commit(changes)
        return schemas.NodeEventsResult(data=data, count=len(data))

    def list_nodes(self) -> schemas.NodesPublic:
        """Every node with its state, agent and holder, by name."""
        with self.db.read() as session:
            rows = session.execute(
                select(Node, Agent).outerjoin(Agent, Agent.node == Node.name).order_by(Node.name)
            )
            data = [
                schemas.NodePublic(
                    name=n.name,
                    state=n.state,  # type: ignore[arg-type]
                    since=n.since,
                    allocatable=n.state == "idle" and a is not None and a.state == "alive",
                    agent=None
                    if a is None
                    else schemas.NodeAgentBrief(agent_id=a.agent_id, state=a.state),  # type: ignore[arg-type]
                    holder=None if n.holder_job_id is None else f"j-{n.holder_job_id}",
                )
                for n, a in rows
            ]
        return schemas.NodesPublic(data=data, count=len(data))

    # --- jobs ----------------------------------------------------------------------------

    def scalability(self, session: Session) -> ScalabilityTable | None:
        """The stored scalability table, or None."""
        row = session.get(Config, "scalability")
        return None if row is None else _parse_table(row.value["csv"])

    def create_job(
        self, who: Principal, body: schemas.JobCreate, idempotency_key: str | None = None
    ) -> tuple[schemas.JobPublic, bool]:
        """Admit a job (queued until the next solve gives it nodes) and create its directory
        ``<checkpoint_root>/<job_id>`` (mode 0700) with ``checkpoints/`` inside.

        A model of the scalability table is checked against it (only an ``spb`` job may run
        at a depth > 0); any other model (or none) is accepted, at SPB depth 0, and scheduled
        from the default scaling curve until the job's own reported rates replace it.

        With ``idempotency_key``, a retry of the same body by the same token answers the job
        the first request created (see :mod:`interstice.api.idempotency`).

        Returns:
            The job, and whether it is the one an earlier request with the key created.

        Raises:
            Conflict: ``dp`` on a table model without depth 0, ``min_nodes`` above the
                model's largest measured count, or the job directory cannot be created.
            idempotency.KeyReused: the key was used by this token for a different body.
            sqlalchemy.exc.IntegrityError: another replica stored the key since the lookup
                (nothing was written; a second call answers that replica's job).
        """
        changes = Changes(stale=True)
        with self.db.write() as session:
            if idempotency_key is not None:
                earlier = idempotency.earlier_job(session, who.token_id, idempotency_key, body)
                if earlier is not None:
                    return _job_public(session, earlier), True
            table = self.scalability(session)
            depths: tuple[int, ...] = (0,)
            if table is not None and body.model in table.models:
                if body.parallelism == "spb":
                    depths = table.depths(body.model)
                elif 0 not in table.depths(body.model):
                    raise Conflict(
                        f"model {body.model!r} has no spb_depth 0 row; {body.parallelism} needs one"
                    )
                largest = max(table.max_nodes(body.model, d) for d in depths)
                if body.min_nodes > largest:
                    raise Conflict(
                        f"min_nodes {body.min_nodes} is above the largest measured node count "
                        f"{largest} of model {body.model!r}"
                    )
            job = Job(
                owner_token_id=who.token_id,
                state="queued",
                model=body.model,
                min_nodes=body.min_nodes,
                max_nodes=body.max_nodes,
                total_samples=body.total_samples,
                samples_done=0.0,
                priority=body.priority,
                parallelism=body.parallelism,
                global_batch_size=body.global_batch_size,
                rescale_up_s=body.rescale_up_s,
                rescale_down_s=body.rescale_down_s,
                entrypoint=body.entrypoint,
                command=body.command,
                workdir=body.workdir,
                env=body.env,
                nproc_per_node=str(body.nproc_per_node),
                job_dir="",
                spb_depth=min(depths),
                generation=0,
                failed_commands=0,
            )
            session.add(job)
            session.flush()
            if idempotency_key is not None:  # before the folder: a key another replica
                # stored since the lookup fails this flush, leaving nothing behind
                idempotency.remember(session, who.token_id, idempotency_key, body, job.id)
                session.flush()
            folder = job_dir(self.settings.checkpoint_root.resolve(), job.job_id)
            _make_job_dir(folder)
            job.job_dir = str(folder)
            public = _job_public(session, job)
        self.after_commit(changes)
        return public, False

    def _visible_job(self, session: Session, who: Principal, job_id: str) -> Job:
        number = parse_id(job_id, "j")
        job = None if number is None else session.get(Job, number)
        if job is None or (who.role != "admin" and job.owner_token_id != who.token_id):
            raise NotFound(f"job {job_id} not found")
        return job

    def list_jobs(
        self, who: Principal, job_state: str | None, limit: int, offset: int
    ) -> schemas.JobsPublic:
        """Jobs the caller may see (its own; all for admin), newest first."""
        with self.db.read() as session:
            query = select(Job)
            if who.role != "admin":
                query = query.where(Job.owner_token_id == who.token_id)
            if job_state is not None:
                query = query.where(Job.state == job_state)
            count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
            jobs = session.scalars(query.order_by(Job.id.desc()).limit(limit).offset(offset))
            data = [_job_public(session, j) for j in jobs]
        return schemas.JobsPublic(data=data, count=count)

    def get_job(self, who: Principal, job_id: str) -> schemas.JobPublic:
        """One job. Raises NotFound for an unknown or someone else's job."""
        with self.db.read() as session:
            return _job_public(session, self._visible_job(session, who, job_id))

    def cancel_job(self, who: Principal, job_id: str) -> schemas.JobPublic:
        """Cancel a queued or running job; its nodes get ``stop`` and are re-allocated.

        Raises:
            NotFound: unknown or someone else's job.
            Conflict: the job already ended.
        """
        changes = Changes()
        with self.db.write() as session:
            job = self._visible_job(session, who, job_id)
            if job.state not in ACTIVE_JOB_STATES:
                raise Conflict(
                    f"job {job_id} is {job.state}; only a queued or running job can be cancelled"
                )
            state.end_job(session, job, "cancelled", changes=changes)
            public = _job_public(session, job)
        self.after_commit(changes)
        return public

    def job_metrics(self, who: Principal, job_id: str, limit: int) -> schemas.JobMetricsPublic:
        """The newest ``limit`` reports of the job's series, oldest first. Raises NotFound."""
        with self.db.read() as session:
            job = self._visible_job(session, who, job_id)
            rows = list(
                session.scalars(
                    select(JobMetric)
                    .where(JobMetric.job_id == job.id)
                    .order_by(JobMetric.id.desc())
                    .limit(limit)
                )
            )
        data = [
            schemas.JobMetricPublic(
                at=r.at,
                step=r.step,
                samples=r.samples,
                loss=r.loss,
                samples_per_s=r.samples_per_s,
                world_size=r.world_size,
                metrics=r.metrics,
            )
            for r in reversed(rows)
        ]
        return schemas.JobMetricsPublic(data=data, count=len(data))

    def job_log(
        self, who: Principal, job_id: str, rank: int, tail: int, offset: int | None
    ) -> schemas.JobLogPublic:
        """Rank ``rank``'s log of every generation (see :func:`logs.read_rank_log`).

        Raises:
            NotFound: unknown or someone else's job, or no log of that rank yet.
        """
        with self.db.read() as session:
            job = self._visible_job(session, who, job_id)
            folder = job.job_dir
        found = read_rank_log(folder, rank, tail=tail, offset=offset, max_bytes=LOG_READ_MAX_BYTES)
        if found is None:
            raise NotFound(f"job {job_id} has no log of rank {rank} yet")
        data, start = found
        return schemas.JobLogPublic(
            job_id=job_id,
            rank=rank,
            text=data.decode(errors="replace"),
            offset=start,
            next_offset=start + len(data),
        )

    # --- agents --------------------------------------------------------------------------

    def register_agent(self, body: schemas.AgentCreate) -> tuple[schemas.AgentRegistered, bool]:
        """Register (or re-register, same id) the agent of ``body.node``.

        Returns:
            The answer and whether the agent is new.
        """
        changes = Changes()
        with self.db.write() as session:
            agent = session.scalar(select(Agent).where(Agent.node == body.node))
            created = agent is None
            if agent is None:
                agent = Agent(node=body.node, host=body.host, ports=[], devices=[], state="alive")
                session.add(agent)
            was_alive = agent.state == "alive" and not created
            agent.host, agent.ports, agent.devices = body.host, body.ports, body.devices
            agent.state = "alive"
            agent.last_heartbeat_at = utcnow()
            node = session.get(Node, body.node)
            if node is None:
                node = Node(
                    name=body.node, state="idle" if body.report_idle else "busy", since=utcnow()
                )
                session.add(node)
            elif body.report_idle and node.state != "idle":
                node.state, node.since = "idle", utcnow()
                changes.stale = True
            session.flush()
            changes.stale = changes.stale or (not was_alive and node.state == "idle")
            answer = schemas.AgentRegistered(
                agent_id=agent.agent_id,
                node=agent.node,
                state="alive",
                heartbeat_interval_s=self.settings.heartbeat_interval_s,
            )
            agent_id = agent.id
        with self._lease_lock:
            self._leases[agent_id] = time.monotonic()
        self.after_commit(changes)
        return answer, created

    def _agent(self, session: Session, agent_id: str) -> Agent:
        number = parse_id(agent_id, "a")
        agent = None if number is None else session.get(Agent, number)
        if agent is None:
            raise NotFound(f"agent {agent_id} not found; register again")
        return agent

    def alive_agent(self, agent_id: str) -> int | None:
        """The numeric id of an agent holding a lease (no database access), or None."""
        number = parse_id(agent_id, "a")
        return number if number is not None and number in self._leases else None

    def known_agent(self, agent_id: str) -> int:
        """The numeric id of an existing agent. Raises NotFound."""
        number = self.alive_agent(agent_id)
        if number is not None:
            return number
        with self.db.read() as session:
            return self._agent(session, agent_id).id

    def renew_lease(self, agent_id: str, body: schemas.Heartbeat) -> bool:
        """The in-memory part of a heartbeat: renew the lease and keep the report of an alive
        agent, or of one a sweep of this process marked lost (its revival is written by the
        next :meth:`sweep`, in bulk), that reports nothing new of its job. False when
        :meth:`heartbeat` must run: unknown, left or otherwise lost agent, or a report with
        something to record (see :meth:`_news`)."""
        number = parse_id(agent_id, "a")
        if number is None or self._news(body):
            return False
        with self._lease_lock:
            if number in self._lost:
                self._lost.discard(number)
                self._revived.add(number)
            elif number not in self._leases:
                return False
            self._leases[number] = time.monotonic()
            self._reports[number] = body.model_dump(exclude_unset=True)
            self._renewed.add(number)
        return True

    def _news(self, body: schemas.Heartbeat) -> bool:
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

    def touch_lease(self, agent_id: int) -> None:
        """Renew the lease of an alive agent that made a request (a long-poll) as a heartbeat
        without a report would, in memory only; :meth:`sweep` writes the time."""
        with self._lease_lock:
            if agent_id in self._leases:
                self._leases[agent_id] = time.monotonic()
                self._renewed.add(agent_id)

    def heartbeat(self, agent_id: str, body: schemas.Heartbeat) -> schemas.HeartbeatAnswer:
        """Renew the agent's lease, keep its report, record its job's progress
        (:func:`state.record_report`).

        A heartbeat of a ``lost`` or ``left`` agent makes it ``alive`` again. Only news of
        the job or the revival of an agent not lost by this process's sweeps writes to the
        database here; the lease and the other revivals live in memory (:meth:`renew_lease`)
        and are flushed by :meth:`sweep`.
        """
        job_number = None if body.job_id is None else parse_id(body.job_id, "j")
        if self.renew_lease(agent_id, body):
            return schemas.HeartbeatAnswer(agent_id=agent_id, state="alive")
        changes = Changes()
        with self.db.write() as session:
            agent = self._agent(session, agent_id)
            if agent.state != "alive":
                agent.state = "alive"
                node = session.get(Node, agent.node)
                changes.stale = node is not None and node.state == "idle"
            agent.last_heartbeat_at = utcnow()
            agent.report = body.model_dump(exclude_unset=True)
            if job_number is not None:
                state.record_report(session, job_number, agent.node, body, changes)
            number = agent.id
        with self._lease_lock:
            self._leases[number] = time.monotonic()
            self._reports[number] = body.model_dump(exclude_unset=True)
            if body.job_id is not None:
                seen = self._seen.get(body.job_id)
                same = seen is not None and seen[0] == body.rendezvous_id
                self._seen[body.job_id] = (
                    body.rendezvous_id,
                    max(body.step or 0, seen[1] if seen and same else 0),
                    max(body.samples_done or 0.0, seen[2] if seen else 0.0),
                )
        self.after_commit(changes)
        return schemas.HeartbeatAnswer(agent_id=agent_id, state="alive")

    def leave_agent(self, agent_id: str) -> None:
        """The agent leaves: its node is released at once (idempotent). Raises NotFound."""
        changes = Changes()
        with self.db.write() as session:
            agent = self._agent(session, agent_id)
            state.agents_gone(session, [agent], "left", changes)
            number = agent.id
        with self._lease_lock:
            self._leases.pop(number, None)
            self._reports.pop(number, None)
            self._lost.discard(number)
            self._revived.discard(number)
        self.after_commit(changes)

    def list_agents(self) -> schemas.AgentsPublic:
        """Every agent, by id."""
        with self.db.read() as session:
            data = [
                schemas.AgentPublic(
                    agent_id=a.agent_id,
                    node=a.node,
                    host=a.host,
                    ports=a.ports,
                    devices=a.devices,
                    state=a.state,  # type: ignore[arg-type]
                    registered_at=a.registered_at,
                    last_heartbeat_at=a.last_heartbeat_at,
                    report=self._reports.get(a.id, a.report),
                )
                for a in session.scalars(select(Agent).order_by(Agent.id))
            ]
        return schemas.AgentsPublic(data=data, count=len(data))

    def sweep(self) -> None:
        """Write the revivals, leases and reports renewed since the last sweep to the database
        (bulk updates); on the leader, also mark agents silent for ``missed_heartbeats_lost``
        intervals lost (their jobs rescale once each).

        An agent renewed here that the database says is lost (a sweep of another replica, or
        of this one, marked it) is alive again. An agent is silent when neither this process
        nor the database (leases written by every replica) saw it within the limit; an agent
        this process holds no lease of counts from when it became leader, so a restart or a
        takeover does not lose agents. A follower (:attr:`leader_since` None) marks nobody lost.
        """
        limit_s = self.settings.missed_heartbeats_lost * self.settings.heartbeat_interval_s
        now, wall, leader_since = time.monotonic(), utcnow(), self.leader_since
        with self._lease_lock:
            leases = dict(self._leases)
            renewed, self._renewed = self._renewed, set()
            revived, self._revived = self._revived, set()
            reports = {a: self._reports[a] for a in renewed if a in self._reports}
        changes = Changes()
        with self.db.write() as session:
            for agent, node_state in session.execute(
                select(Agent, Node.state)
                .outerjoin(Node, Node.name == Agent.node)
                .where(Agent.id.in_(revived | renewed), Agent.state == "lost")
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
            self.agent_counts.record(wall, len(alive) - len(silent))
            fresh = [
                {"id": a, "last_heartbeat_at": wall - timedelta(seconds=now - leases[a])}
                | ({"report": reports[a]} if a in reports else {})
                for a in renewed
                if a in leases and a not in silent
            ]
            for rows in (
                [row for row in fresh if "report" in row],
                [row for row in fresh if "report" not in row],
            ):
                if rows:
                    session.execute(update(Agent), rows)
        with self._lease_lock:
            for agent_id in silent:
                self._leases.pop(agent_id, None)
            self._lost.update(silent)
        self.after_commit(changes)

    def commands(self, agent_id: int) -> schemas.CommandsPublic:
        """The agent's pending commands, oldest first."""
        with self.db.read() as session:
            data = [_command_public(c, j) for c, j in state.pending_commands(session, agent_id)]
        return schemas.CommandsPublic(data=data, count=len(data))

    def ack(
        self, agent_id: str, command_id: int, body: schemas.CommandAck
    ) -> schemas.CommandAckAnswer:
        """Acknowledge a command (idempotent). Raises NotFound."""
        changes = Changes()
        with self.db.write() as session:
            agent = self._agent(session, agent_id)
            command = state.ack_command(
                session,
                agent.id,
                command_id,
                body.ok,
                body.error,
                self.settings.max_command_failures,
                changes,
                job_failed=body.job_failed,
            )
            answer = schemas.CommandAckAnswer(
                command_id=command.id,
                ok=bool(command.ok),
                acked_at=command.acked_at,  # type: ignore[arg-type]
            )
        self.after_commit(changes)
        return answer

    # --- objective, scalability, audit ---------------------------------------------------

    def objective(self, session: Session | None = None) -> schemas.ObjectivePublic:
        """The objective settings (defaults until an admin changes them; one stored before
        ``node_seconds`` existed gets it, the default, unless it had ``speedup``)."""
        if session is None:
            with self.db.read() as own:
                return self.objective(own)
        row = session.get(Config, "objective")
        stored = dict(row.value) if row else {}
        if stored.get("speedup") and "node_seconds" not in stored:  # stored before it existed
            stored["node_seconds"] = False
        return schemas.ObjectivePublic(**(DEFAULT_OBJECTIVE | stored))

    def update_objective(
        self, who: Principal, body: schemas.ObjectiveUpdate
    ) -> schemas.ObjectivePublic:
        """Change the objective; audited with old and new value; marks the allocation stale."""
        with self.db.write() as session:
            old = self.objective(session).model_dump()
            new = old | body.changes()
            row = session.get(Config, "objective")
            if row is None:
                session.add(Config(key="objective", value=new))
            else:
                row.value = new
            session.add(
                AuditEntry(
                    actor=who.name,
                    token_id=who.token_id,
                    action="objective.update",
                    old=old,
                    new=new,
                )
            )
        self.after_commit(Changes(stale=True))
        return schemas.ObjectivePublic(**new)

    def scalability_public(self) -> schemas.ScalabilityPublic:
        """Summary of the loaded table. Raises NotFound when none is loaded."""
        with self.db.read() as session:
            row = session.get(Config, "scalability")
            if row is None:
                raise NotFound("no scalability table is loaded")
            table = _parse_table(row.value["csv"])
            return schemas.ScalabilityPublic(
                models=sorted(table.models), rows=len(table.points), source=row.value["source"]
            )

    def update_scalability(self, who: Principal, text: str) -> schemas.ScalabilityPublic:
        """Replace the scalability table with CSV ``text``; audited.

        Raises:
            ValueError: the CSV is malformed (the message names the line).
            Conflict: a model of the current table that an active job runs is missing from
                the new table.
        """
        table = ScalabilityTable.from_csv(text)
        with self.db.write() as session:
            current = self.scalability(session)
            active = set(session.scalars(select(Job.model).where(Job.state.in_(ACTIVE_JOB_STATES))))
            # (a job whose model the table never had runs from its own rates: not in the way)
            missing = sorted((active & (current.models if current else set())) - table.models)
            if missing:
                raise Conflict(
                    f"models {', '.join(missing)} of active jobs are missing from the new table"
                )
            row = session.get(Config, "scalability")
            old = None if row is None else _table_summary(row.value)
            value = {"csv": text, "source": f"PUT /v1/scalability by {who.name}"}
            if row is None:
                session.add(Config(key="scalability", value=value))
            else:
                row.value = value
            session.add(
                AuditEntry(
                    actor=who.name,
                    token_id=who.token_id,
                    action="scalability.update",
                    old=old,
                    new=_table_summary(value),
                )
            )
        self.after_commit(Changes(stale=True))
        return schemas.ScalabilityPublic(
            models=sorted(table.models), rows=len(table.points), source=value["source"]
        )

    def audit(self, limit: int, offset: int) -> schemas.AuditsPublic:
        """Admin changes, newest first."""
        with self.db.read() as session:
            count = session.scalar(select(func.count()).select_from(AuditEntry)) or 0
            rows = session.scalars(
                select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit).offset(offset)
            )
            data = [
                schemas.AuditPublic(
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
        return schemas.AuditsPublic(data=data, count=count)

    def stats(self, since: datetime | None) -> schemas.StatsPublic:
        """The admin's measures from ``since`` (None: the service's lifetime) to now
        (:func:`interstice.api.stats.compute_stats`)."""
        with self.db.read() as session:
            return compute_stats(session, self.scalability(session), since, utcnow())

    def node_history(self, since: datetime | None) -> schemas.NodeHistoryPublic:
        """The nodes over time from ``since`` (None: the last hour) to now
        (:func:`interstice.api.history.node_history`)."""
        until = utcnow()
        with self.db.read() as session:
            return history.node_history(
                session, self.agent_counts, since or until - timedelta(hours=1), until
            )

    def solves(self, limit: int, offset: int) -> schemas.SolvesPublic:
        """The applied solves, newest first (:func:`interstice.api.history.solves`)."""
        with self.db.read() as session:
            data, count = history.solves(session, limit, offset)
        return schemas.SolvesPublic(data=data, count=count)

    def refresh_gauges(self) -> None:
        """Read the gauges' values from the database (at scrape time)."""
        m = self.metrics
        with self.db.read() as session:
            m.idle_nodes.set(session.scalar(select(func.count()).where(Node.state == "idle")) or 0)
            m.allocatable_nodes.set(len(state.allocatable_nodes(session)))
            m.allocated_nodes.set(
                session.scalar(select(func.count()).where(Node.holder_job_id.is_not(None))) or 0
            )
            counts = {
                job_state: n
                for job_state, n in session.execute(
                    select(Job.state, func.count()).group_by(Job.state)
                )
            }
            for job_state in ("queued", "running", "finished", "cancelled", "failed"):
                m.jobs.labels(job_state).set(counts.get(job_state, 0))
            m.pending_commands.set(state.count_pending_commands(session))
            m.agents_alive.set(
                session.scalar(select(func.count()).where(Agent.state == "alive")) or 0
            )
            lifetime = compute_stats(session, self.scalability(session), None, utcnow())
        for name, gauge in m.lifetime.items():
            value = getattr(lifetime, name)
            gauge.set(math.nan if value is None else value)


def _aware(at: datetime) -> datetime:
    """``at`` as an aware UTC time (SQLite returns naive UTC times)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@lru_cache(maxsize=4)
def _parse_table(text: str) -> ScalabilityTable:
    return ScalabilityTable.from_csv(text)


def _table_summary(value: dict[str, Any]) -> dict[str, Any]:
    table = _parse_table(value["csv"])
    return {"source": value["source"], "models": sorted(table.models), "rows": len(table.points)}


def _make_job_dir(folder: Path) -> None:
    """Create the job directory (mode 0700, whatever the umask) with ``checkpoints/``.

    A folder already there (left by an earlier database that gave out the same id) is moved
    aside to ``<folder>.old-<unix time>``, so the new job never resumes another's checkpoint.

    Raises:
        Conflict: the folder cannot be created (the message says why).
    """
    try:
        if folder.exists():
            aside = folder.with_name(f"{folder.name}.old-{time.time_ns()}")
            log.warning("job directory %s exists; moved to %s", folder, aside)
            folder.rename(aside)
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700)
        folder.chmod(0o700)
        checkpoint_dir(folder).mkdir(mode=0o700)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(folder) else ""
        raise Conflict(f"cannot create the job directory {folder}: {exc.strerror}{where}") from None


def _nproc(stored: str) -> int | str:
    return stored if stored == "auto" else int(stored)


def _entrypoint(job: Job) -> str | None:
    return None if job.command is not None else job.entrypoint or DEFAULT_ENTRYPOINT


def _job_public(session: Session, job: Job) -> schemas.JobPublic:
    nodes = state.held_nodes(session, job.id)
    rescales = session.scalars(select(Rescale).where(Rescale.job_id == job.id).order_by(Rescale.id))
    errors = session.execute(
        select(Command, Agent.node)
        .join(Agent, Agent.id == Command.agent_id)
        .where(Command.job_id == job.id, Command.ok.is_(False))
        .order_by(Command.id)
    )
    return schemas.JobPublic(
        job_id=job.job_id,
        state=job.state,  # type: ignore[arg-type]
        model=job.model,
        min_nodes=job.min_nodes,
        max_nodes=job.max_nodes,
        total_samples=job.total_samples,
        samples_done=min(job.total_samples, int(job.samples_done)),
        last_loss=job.last_loss,
        priority=job.priority,
        parallelism=job.parallelism,  # type: ignore[arg-type]
        global_batch_size=job.global_batch_size,
        rescale_up_s=job.rescale_up_s,
        rescale_down_s=job.rescale_down_s,
        entrypoint=_entrypoint(job),
        command=job.command,
        workdir=job.workdir,
        env=job.env,
        nproc_per_node=_nproc(job.nproc_per_node),  # type: ignore[arg-type]
        job_dir=job.job_dir,
        checkpoint_dir=str(checkpoint_dir(job.job_dir)),
        nodes=nodes,
        world_size=len(nodes),
        spb_depth=job.spb_depth,
        generation=job.generation,
        submitted_at=job.submitted_at,
        finished_at=job.finished_at,
        error=job.error,
        rescales=[
            schemas.RescalePublic(
                at=r.at,
                from_nodes=r.from_nodes,
                to_nodes=r.to_nodes,
                from_spb_depth=r.from_spb_depth,
                to_spb_depth=r.to_spb_depth,
                reason=r.reason,  # type: ignore[arg-type]
                generation=r.generation,
                cost_s=r.cost_s,
            )
            for r in rescales
        ],
        errors=[
            schemas.CommandError(
                command_id=c.id,
                kind=c.kind,
                node=node,
                error=c.error,
                at=c.acked_at,  # type: ignore[arg-type]
            )
            for c, node in errors
        ],
    )


def _command_public(command: Command, job: Job) -> schemas.CommandPublic:
    return schemas.CommandPublic(
        command_id=command.id,
        kind=command.kind,  # type: ignore[arg-type]
        job_id=job.job_id,
        world_size=command.world_size,
        rendezvous_endpoint=command.rendezvous_endpoint,
        rendezvous_id=command.rendezvous_id,
        spb_depth=command.spb_depth,
        deadline=command.deadline,
        created_at=command.created_at,
        job=schemas.CommandJob(
            model=job.model,
            parallelism=job.parallelism,  # type: ignore[arg-type]
            global_batch_size=job.global_batch_size,
            total_samples=job.total_samples,
            min_nodes=job.min_nodes,
            max_nodes=job.max_nodes,
            entrypoint=_entrypoint(job),
            command=job.command,
            workdir=job.workdir,
            env=job.env,
            nproc_per_node=_nproc(job.nproc_per_node),  # type: ignore[arg-type]
            job_dir=job.job_dir,
            checkpoint_dir=str(checkpoint_dir(job.job_dir)),
        ),
    )
