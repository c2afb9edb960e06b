"""State changes of the service, each inside one write transaction.

Functions here take a :class:`~sqlalchemy.orm.Session` opened by
:meth:`interstice.api.store.db.Database.write` and record what must follow the commit in a
:class:`Changes` (agents whose long-polls to wake, whether the allocation is now stale,
rescales for the metrics). They never call the solver.

The one rule for moving a job from node set S' to S (docs/reference/agent-protocol.md): a new
generation with rendezvous id ``<job_id>-g<generation>`` and endpoint
``<host of the agent on min(S)>:<one of its ports, by generation>``; ``start`` to S \\ S',
``rescale`` to S ∩ S' (world size |S|), ``stop`` to S' \\ S. A new command supersedes its
agent's older unacknowledged ``start``/``rescale`` of the same job (:func:`supersede`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any

from interstice.api.schemas.agents import Heartbeat
from interstice.api.services.quarantine import quarantine
from interstice.api.store.tables import (
    Agent,
    Command,
    IdleInterval,
    Job,
    JobMetric,
    JobRate,
    Node,
    Rescale,
    utcnow,
)
from interstice.optimizer.coverage import COVERAGE_HOLES
from interstice.optimizer.coverage import forecast_coverage as coverage_of
from sqlalchemy import ColumnElement, Select, and_, bindparam, delete, func, select
from sqlalchemy.orm import Session

ACTIVE_JOB_STATES = ("queued", "running")
METRICS_KEPT = 10000
"""Newest reports kept per job in the metrics series."""
RATE_REPORTS_CAP = 100
"""A learned rate is the running mean of at most this many reports: later ones still move
it by at least 1 %, so a rate that changes (another data set phase, a slower node) is
followed."""
SUPERSEDABLE_KINDS = ("start", "rescale")
"""Kinds a newer command of the same agent and job makes obsolete (a ``stop`` never is)."""
DEFAULT_RENDEZVOUS_PORT = 29400
"""Port of the rendezvous endpoint when the agent on the first node registered no ports."""


class Conflict(Exception):
    """A request that conflicts with the current state (HTTP 409); the message says why."""


class NotFound(Exception):
    """An unknown id (HTTP 404); the message names it."""


@dataclass
class Changes:
    """What must happen after the transaction commits.

    Attributes:
        wake: ids of agents that got new commands.
        stale: whether the allocation problem changed (a solve must follow).
        rescales: rescale count by reason.
    """

    wake: set[int] = field(default_factory=set)
    stale: bool = False
    rescales: Counter[str] = field(default_factory=Counter)


ID_LIMIT = 10**15
"""Row ids are below this (15 digits): a larger number names no row, and never reaches the
database (SQLite refuses integers beyond 64 bits)."""


def parse_id(public_id: str, prefix: str) -> int | None:
    """``"j-3"`` with prefix ``"j"`` gives 3; anything else gives None."""
    head, _, number = public_id.partition("-")
    if head != prefix or not number.isdigit() or len(number) > 15:
        return None
    return int(number)


def held_nodes(session: Session, job_id: int) -> list[str]:
    """Names of the nodes ``job_id`` holds, sorted."""
    return sorted(session.scalars(select(Node.name).where(Node.holder_job_id == job_id)))


ALLOCATABLE = and_(Node.state == "idle", Agent.state == "alive", Node.quarantined_at.is_(None))
"""A node the optimizer may fill: idle, with an alive agent, not quarantined (``Node`` joined
to its ``Agent``; :mod:`interstice.api.services.quarantine`)."""


def allocatable(multi_user: bool) -> ColumnElement[bool]:
    """:data:`ALLOCATABLE`, and in multi-user mode only where the agent runs jobs as their
    owners (``Agent.runs_as_owner``): every job has an owner there, and an agent that does
    not say so would run it as its own account (root under the Prolog)."""
    return and_(ALLOCATABLE, Agent.runs_as_owner.is_(True)) if multi_user else ALLOCATABLE


@dataclass(frozen=True)
class NodeView:
    """The nodes as the control loop sees them, from one query (:func:`node_view`).

    Attributes:
        pool: the allocatable nodes (idle, with an alive agent, not quarantined; in
            multi-user mode one that runs jobs as their owners), sorted by name: the pool the
            optimizer fills.
        held: the nodes each job holds, by job id, each list sorted by name (allocatable
            or not).
    """

    pool: list[str]
    held: dict[int, list[str]]


def node_view(session: Session, multi_user: bool = False) -> NodeView:
    """Every node's name, holder and whether it is allocatable (:func:`allocatable`), in one
    query (at 10,000 nodes the pool and the holdings read apart cost a solve and its writing
    35 ms more). Sorted here, not by the database, whose collation may not be Python's
    (PostgreSQL's locales)."""
    rows = session.execute(
        select(Node.name, Node.holder_job_id, allocatable(multi_user)).outerjoin(
            Agent, Agent.node == Node.name
        )
    )
    view = NodeView(pool=[], held={})
    for name, holder, in_pool in sorted(rows, key=itemgetter(0)):
        if holder is not None:
            view.held.setdefault(holder, []).append(name)
        if in_pool:
            view.pool.append(name)
    return view


def _allocatable(column: Any, multi_user: bool) -> Select[Any]:
    """``column`` of the :func:`allocatable` nodes."""
    return select(column).join(Agent, Agent.node == Node.name).where(allocatable(multi_user))


def allocatable_nodes(session: Session, multi_user: bool = False) -> list[str]:
    """The :func:`allocatable` nodes: the pool the optimizer fills, sorted."""
    return sorted(session.scalars(_allocatable(Node.name, multi_user)))


def allocatable_untils(session: Session, multi_user: bool = False) -> dict[str, datetime]:
    """The scheduler's ``until`` of the :func:`allocatable_nodes` that have one, by name."""
    query = (
        _allocatable(Node.name, multi_user).add_columns(Node.until).where(Node.until.is_not(None))
    )
    return {name: until for name, until in session.execute(query)}


def forecast_coverage(session: Session) -> float | None:
    """The share of the newest ended idle intervals whose node had an ``until`` when its busy
    event came (:func:`interstice.optimizer.coverage.forecast_coverage`: the newest
    :data:`~interstice.optimizer.coverage.COVERAGE_HOLES`; ``None`` with fewer than
    :data:`~interstice.optimizer.coverage.MIN_COVERAGE_HOLES`)."""
    query = (
        select(IdleInterval.forecast)
        .where(IdleInterval.forecast.is_not(None))
        .order_by(IdleInterval.id.desc())
        .limit(COVERAGE_HOLES)
    )
    return coverage_of(session.scalars(query))


def median_idle_since(session: Session, pool_size: int, multi_user: bool = False) -> list[datetime]:
    """The middle of :func:`allocatable_nodes`' idle-since times, ``pool_size`` of them:
    one time for an odd size, the two middle ones for an even size (their median is the
    pool's), none for 0. Sorted and picked by the database: converting 5,000 timestamps
    to Python cost each solve 15 ms."""
    if pool_size <= 0:
        return []
    middle = _allocatable(Node.since, multi_user).order_by(Node.since).offset((pool_size - 1) // 2)
    return list(session.scalars(middle.limit(2 - pool_size % 2)))


def rendezvous_id(job: Job) -> str:
    """The rendezvous id of ``job``'s current generation: ``<job id>-g<generation>``."""
    return f"{job.job_id}-g{job.generation}"


def unchanged(depth: int, from_nodes: list[str], to_nodes: list[str], to_depth: int) -> bool:
    """Whether moving a job at SPB depth ``depth`` from ``from_nodes`` to ``to_nodes`` at
    ``to_depth`` (both sorted) changes nothing: the same nodes and the same depth, or no
    node either way."""
    return from_nodes == to_nodes and (depth == to_depth or not to_nodes)


def move_job(
    session: Session,
    job: Job,
    to_nodes: list[str],
    to_depth: int,
    *,
    reason: str,
    deadline: datetime,
    changes: Changes,
    from_nodes: list[str] | None = None,
) -> None:
    """Move ``job`` from the nodes it holds to ``to_nodes`` at SPB depth ``to_depth``.

    Writes the commands (see the module docstring), the node holders, the job's generation,
    depth and state (``running`` when ``to_nodes`` is not empty, else ``queued`` for an
    active job) and a rescale record. Nothing happens when neither set nor depth changes
    (:func:`unchanged`). ``from_nodes``: the nodes the job holds, sorted, when the caller
    read them in this transaction (:func:`node_view`); else they are read here.
    """
    if from_nodes is None:
        from_nodes = held_nodes(session, job.id)
    to_nodes = sorted(to_nodes)
    if unchanged(job.spb_depth, from_nodes, to_nodes, to_depth):
        return
    agents = {
        a.node: a
        for a in session.scalars(
            select(Agent).where(Agent.node.in_(set(from_nodes) | set(to_nodes)))
        )
    }
    job.generation += 1
    job.generation_step = None
    newest = rendezvous_id(job)
    endpoint = ""
    if to_nodes:
        first = agents.get(to_nodes[0])
        if first is not None:
            port = (
                first.ports[job.generation % len(first.ports)]
                if first.ports
                else DEFAULT_RENDEZVOUS_PORT
            )
            endpoint = f"{first.host}:{port}"
    now = utcnow()
    kept = set(from_nodes) & set(to_nodes)
    newer: dict[int, Command] = {}
    for node in sorted(set(from_nodes) | set(to_nodes)):
        kind = "rescale" if node in kept else ("start" if node in to_nodes else "stop")
        agent = agents.get(node)
        if agent is None:
            continue
        newer[agent.id] = Command(
            agent_id=agent.id,
            job_id=job.id,
            kind=kind,
            world_size=len(to_nodes),
            rendezvous_endpoint=endpoint,
            rendezvous_id=newest,
            spb_depth=to_depth,
            deadline=deadline,
            created_at=now,
        )
        changes.wake.add(agent.id)
    supersede(session, job.id, newer)
    for node in session.scalars(select(Node).where(Node.name.in_(set(from_nodes) | set(to_nodes)))):
        node.holder_job_id = job.id if node.name in to_nodes else None
    session.add(
        Rescale(
            job_id=job.id,
            at=now,
            from_nodes=from_nodes,
            to_nodes=to_nodes,
            from_spb_depth=job.spb_depth,
            to_spb_depth=to_depth,
            reason=reason,
            generation=job.generation,
        )
    )
    job.spb_depth = to_depth
    if job.state in ACTIVE_JOB_STATES:
        job.state = "running" if to_nodes else "queued"
    changes.rescales[reason] += 1
    changes.stale = True


def supersede(session: Session, job_id: int, newer: dict[int, Command]) -> None:
    """Add ``newer`` (agent id -> its new command of ``job_id``) and acknowledge, for the
    agents, their older unacknowledged ``start``/``rescale`` of the job: ``ok`` with the note
    ``superseded by command N`` in ``error``. They are no longer pending, so a long-poll
    answers only the newest generation; a ``stop`` is never superseded and the commands that
    remain keep their order. The agent's own later ack of one returns that record."""
    if not newer:
        return
    older = list(
        session.scalars(
            select(Command).where(
                Command.job_id == job_id,
                Command.agent_id.in_(newer),
                Command.acked_at.is_(None),
                Command.kind.in_(SUPERSEDABLE_KINDS),
            )
        )
    )
    session.add_all(newer.values())
    if not older:
        return
    session.flush()
    now = utcnow()
    for command in older:
        command.acked_at, command.ok = now, True
        command.error = f"superseded by command {newer[command.agent_id].id}"


def release_nodes(
    session: Session,
    nodes: Iterable[Node],
    *,
    reason: str,
    deadline: datetime,
    changes: Changes,
) -> dict[str, int]:
    """Take ``nodes`` from the jobs holding them, at once (the solver is not waited for).

    Each job holding some of them moves once, to one new generation without all of them:
    their agents get ``stop``; the job's other nodes get ``rescale`` at the reduced world
    size, or ``stop`` when fewer than ``min_nodes`` would remain.

    Returns:
        The id of the job that held each released node, by node name.
    """
    taken: dict[int, set[str]] = {}
    for node in nodes:
        if node.holder_job_id is not None:
            taken.setdefault(node.holder_job_id, set()).add(node.name)
    for job_id, names in sorted(taken.items()):
        job = session.get_one(Job, job_id)
        remaining = [n for n in held_nodes(session, job.id) if n not in names]
        if len(remaining) < job.min_nodes:
            remaining = []
        move_job(
            session,
            job,
            remaining,
            job.spb_depth,
            reason=reason,
            deadline=deadline,
            changes=changes,
        )
    return {name: job_id for job_id, names in taken.items() for name in names}


def end_job(
    session: Session, job: Job, state: str, *, changes: Changes, error: str | None = None
) -> None:
    """Finish, cancel or fail ``job``: stop commands to all its nodes, which are freed at
    once; ``error`` (why it failed) is kept on the job.

    Raises:
        Conflict: the job is not queued or running.
    """
    if job.state not in ACTIVE_JOB_STATES:
        raise Conflict(f"job {job.job_id} is {job.state}; only a queued or running job can end")
    job.state = state
    job.finished_at = utcnow()
    job.error = error
    reason = {"finished": "finished", "cancelled": "cancelled", "failed": "failed"}[state]
    release_job(session, job, reason, changes)
    changes.stale = True


def release_job(session: Session, job: Job, reason: str, changes: Changes) -> None:
    """Move ``job`` off all its nodes (:func:`move_job`, rescale reason ``reason``): its
    agents get ``stop`` with the job's ``rescale_down_s`` as deadline; an active job is
    ``queued``."""
    move_job(
        session,
        job,
        [],
        job.spb_depth,
        reason=reason,
        deadline=utcnow() + timedelta(seconds=job.rescale_down_s),
        changes=changes,
    )


def record_report(
    session: Session, job_id: int, node: str, beat: Heartbeat, changes: Changes
) -> None:
    """Record what a node's heartbeat says of its job.

    - ``samples_done``: the job keeps the largest report; at ``total_samples`` it finishes.
      A job that ended (cancelled, failed, finished) still takes it: its workers' last report
      after the stop carries the samples of their final checkpoint. Nothing else of an
      ended job's report is recorded.
    - A report whose ``step`` is beyond the job's newest joins the metrics series (the
      newest :data:`METRICS_KEPT` are kept) and sets ``last_loss``.
    - A report of the current generation (``rendezvous_id`` the job's newest, or absent, as
      from a version 1 agent) with ``job_state`` ``finished`` finishes the job, with
      ``failed`` fails it with the report's ``error``; a report of an older generation ends
      nothing (its workers may have exited 0 because a peer's stop stopped them).
    - Learning (reports naming the current generation, :func:`_learn`): the generation's
      first step and its rescale cost (``Rescale.cost_s``), and rate observations at (held
      node count, SPB depth) (:class:`JobRate`).
    """
    job = session.get(Job, job_id)
    if job is None:
        return
    if beat.samples_done is not None and beat.samples_done > job.samples_done:
        job.samples_done = beat.samples_done
    if job.state not in ACTIVE_JOB_STATES:
        return
    now = utcnow()
    newest = rendezvous_id(job)
    current = beat.rendezvous_id in (None, newest)
    advanced = beat.step is not None and (job.last_step is None or beat.step > job.last_step)
    first_step = beat.rendezvous_id == newest and job.generation_step is None
    if advanced or (first_step and beat.step is not None):
        job.last_progress_at = now  # the stall sweep's clock (interstice.api.control.stalls)
    if beat.rendezvous_id == newest and beat.step is not None:
        _learn(session, job, beat, beat.step, advanced, now)
    if advanced:
        assert beat.step is not None
        job.last_step = beat.step
        if beat.loss is not None:
            job.last_loss = beat.loss
        _add_metric(session, job, beat, beat.step, now)
    if current and beat.job_state == "failed":
        error = beat.error or "its workers failed without a message"
        end_job(session, job, "failed", changes=changes, error=f"on {node}: {error}")
    elif (current and beat.job_state == "finished") or job.samples_done >= job.total_samples:
        end_job(session, job, "finished", changes=changes)


def _add_metric(session: Session, job: Job, beat: Heartbeat, step: int, now: datetime) -> None:
    """Append the report to the job's series and drop all but its newest METRICS_KEPT."""
    session.add(
        JobMetric(
            job_id=job.id,
            at=now,
            step=step,
            samples=beat.samples_done,
            loss=beat.loss,
            samples_per_s=beat.samples_per_s,
            world_size=beat.world_size,
            metrics=beat.metrics,
        )
    )
    session.flush()
    oldest_kept = session.scalar(
        select(JobMetric.id)
        .where(JobMetric.job_id == job.id)
        .order_by(JobMetric.id.desc())
        .offset(METRICS_KEPT - 1)
        .limit(1)
    )
    if oldest_kept is not None:
        session.execute(
            delete(JobMetric).where(JobMetric.job_id == job.id, JobMetric.id < oldest_kept)
        )


def _learn(
    session: Session, job: Job, beat: Heartbeat, step: int, advanced: bool, now: datetime
) -> None:
    """A report of the current generation (see :func:`record_report`). ``advanced``: its step
    is beyond every earlier report's (so each step is observed once, whichever node reports
    it first; after a rescale the workers may repeat steps since their checkpoint).

    - The generation's first step (``Job.generation_step``) is the report's ``first_step``;
      from an agent that sends none, the step of the first report received.
    - A report beyond the first step ends the generation's rescale cost (``Rescale.cost_s``,
      docs/concepts.md): from the commands (``Rescale.at``) to ``resumed_at``, when the
      workers first reported a step beyond their first (their clock: the report's arrival
      comes up to a heartbeat interval later); from an agent that sends none, to the
      report's arrival.
    - Each report beyond the first step that also advances the job's step is a rate
      observation at (held node count, SPB depth).
    """
    if job.generation_step is None:
        job.generation_step = step if beat.first_step is None else beat.first_step
    if step <= job.generation_step:
        return
    nodes = len(held_nodes(session, job.id))
    if advanced and nodes and beat.samples_per_s:
        depth = job.spb_depth if beat.spb_depth is None else beat.spb_depth
        rate = session.get(JobRate, (job.id, nodes, depth))
        if rate is None:
            session.add(
                JobRate(
                    job_id=job.id,
                    nodes=nodes,
                    spb_depth=depth,
                    samples_per_s=beat.samples_per_s,
                    reports=1,
                )
            )
        else:
            rate.reports = min(rate.reports + 1, RATE_REPORTS_CAP)
            rate.samples_per_s += (beat.samples_per_s - rate.samples_per_s) / rate.reports
    rescale = session.scalar(
        select(Rescale).where(
            Rescale.job_id == job.id,
            Rescale.generation == job.generation,
            Rescale.cost_s.is_(None),
        )
    )
    if rescale is not None:
        ended = now if beat.resumed_at is None else beat.resumed_at
        rescale.cost_s = max(0.0, (ended - rescale.at).total_seconds())


def agents_gone(session: Session, agents: Iterable[Agent], state: str, changes: Changes) -> None:
    """Mark ``agents`` ``lost`` or ``left``: their nodes leave the pool and each job holding
    some of them is rescaled once without all of them (:func:`release_nodes`)."""
    gone = [a for a in agents if a.state != state]
    if not gone:
        return
    was_alive = {a.node for a in gone if a.state == "alive"}
    for agent in gone:
        agent.state = state
    nodes = list(session.scalars(select(Node).where(Node.name.in_([a.node for a in gone]))))
    release_nodes(
        session,
        nodes,
        reason="agent_lost" if state == "lost" else "agent_left",
        deadline=utcnow(),
        changes=changes,
    )
    if any(n.state == "idle" and n.name in was_alive for n in nodes):
        changes.stale = True


PENDING_COMMANDS = (
    select(Command, Job)
    .join(Job, Job.id == Command.job_id)
    .where(Command.agent_id == bindparam("agent_id"), Command.acked_at.is_(None))
    .order_by(Command.id)
)
"""The query of :func:`pending_commands`, built once: building it at each read was half of a
read's 0.4 ms (at 10,000 agents the agents read about 130 commands a second)."""


def pending_commands(session: Session, agent_id: int) -> list[tuple[Command, Job]]:
    """The agent's unacknowledged commands with their jobs, oldest first."""
    rows = session.execute(PENDING_COMMANDS, {"agent_id": agent_id})
    return [(c, j) for c, j in rows]


def count_pending_commands(session: Session) -> int:
    """Unacknowledged commands over all agents."""
    return session.scalar(select(func.count()).where(Command.acked_at.is_(None))) or 0


def ack_command(
    session: Session,
    agent_id: int,
    command_id: int,
    ok: bool,
    error: str | None,
    max_failures: int,
    changes: Changes,
    *,
    job_failed: bool = False,
    node_fault: bool = False,
) -> Command:
    """Acknowledge a command (idempotent: a second ack returns the first one's record).

    A failed ack is recorded on the command; a failed ``start`` or ``rescale`` fails its job
    at once when ``job_failed`` (the reason is the job's own: bad command, missing script,
    crashed workers), with the error, and is otherwise counted on the job: a job whose
    commands failed ``max_failures`` times is ``failed``, its nodes freed. Below that, a
    failure of the job's current generation (a node-side reason: its rendezvous did not
    complete) means the generation cannot form, so the job is released from all its nodes
    (rescale reason ``command_failed``, the job ``queued``) and the next solve starts a new
    generation, on the same or other nodes; a failure of an older generation changes
    nothing. With ``node_fault`` (the reason is the node's: its launcher could not start,
    the owner is unknown there, its disk is full) the agent's node is also quarantined
    (:func:`interstice.api.services.quarantine.quarantine`), so the job's next generation
    goes to other nodes. A failed ``stop`` is recorded only: it means the node ran none of
    the job's workers (e.g. the ``start`` it would undo was superseded before the agent ran
    it), so the job lost nothing.

    Raises:
        NotFound: no such command for this agent.
    """
    command = session.get(Command, command_id) if 0 < command_id < ID_LIMIT else None
    if command is None or command.agent_id != agent_id:
        raise NotFound(f"command {command_id} of agent a-{agent_id} not found")
    if command.acked_at is not None:
        return command
    command.acked_at = utcnow()
    command.ok = ok
    command.error = None if ok else (error or "no error message")
    if not ok and command.kind != "stop":
        job = session.get_one(Job, command.job_id)
        node = session.get_one(Agent, agent_id).node
        what = f"{command.kind} on {node}"
        node_row = session.get(Node, node) if node_fault and not job_failed else None
        if node_row is not None:
            quarantine(node_row, f"{command.kind} of {job.job_id} failed: {command.error}", changes)
        job.failed_commands += 1
        if job.state not in ACTIVE_JOB_STATES:
            return command
        if job_failed:
            error = f"{what} failed: {command.error}"
            end_job(session, job, "failed", changes=changes, error=error)
        else:
            current = command.rendezvous_id == rendezvous_id(job)
            fail_or_release(
                session, job, f"{what}: {command.error}", max_failures, changes,
                release="command_failed" if current else None,
            )  # fmt: skip
    return command


def fail_or_release(
    session: Session,
    job: Job,
    what: str,
    max_failures: int,
    changes: Changes,
    *,
    release: str | None,
) -> None:
    """Act on ``job``'s failures so far (``job.failed_commands``, the caller counts them):
    at ``max_failures`` the job is ``failed`` with ``what`` (the last failure) in its error;
    below, ``release`` (a rescale reason, or None to change nothing) releases it from all
    its nodes, the job ``queued``, so the next solve starts a new generation."""
    if job.failed_commands >= max_failures:
        error = f"{job.failed_commands} failures; the last, {what}"
        end_job(session, job, "failed", changes=changes, error=error)
    elif release is not None:
        release_job(session, job, release, changes)
