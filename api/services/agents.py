"""Node agents (docs/reference/agent-protocol.md): registration, heartbeats, leaving, the command
queue and its acknowledgements.

Functions take the running :class:`~interstice.api.service.Service`; each write runs one
transaction and hands its :class:`~interstice.api.services.state.Changes` to
:meth:`~interstice.api.service.Service.after_commit`. They are synchronous and run in a worker
thread (FastAPI's pool, the long-polls' limiter, or for :func:`ack_batch` the ack batcher's,
:mod:`interstice.api.control.acks`), except where a docstring says that no database is touched.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from interstice.api.limits import short
from interstice.api.schemas.agents import (
    AgentCreate,
    AgentPublic,
    AgentRegistered,
    AgentsPublic,
    CommandAck,
    CommandAckAnswer,
    CommandPublic,
    CommandsPublic,
    Heartbeat,
    HeartbeatAnswer,
)
from interstice.api.services import state
from interstice.api.services.jobs import command_job
from interstice.api.services.quarantine import lift, quarantine
from interstice.api.services.state import Changes, NotFound, parse_id
from interstice.api.store.tables import Agent, Command, Job, Node, utcnow
from sqlalchemy import select
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from interstice.api.service import Service

log = logging.getLogger("interstice.api")


def register(service: Service, body: AgentCreate) -> tuple[AgentRegistered, bool]:
    """Register (or re-register, same id) the agent of ``body.node``; with ``report_idle``
    its node becomes idle. The agent's ``runs_as_owner`` is kept: in multi-user mode a node
    whose agent does not run jobs as their owners is not allocatable
    (:func:`state.allocatable`), and its registration logs a warning saying so. A
    registration with a ``fault`` quarantines the node, one without ends its quarantine
    (:mod:`interstice.api.services.quarantine`).

    Returns:
        The answer and whether the agent is new.
    """
    changes = Changes()
    with service.db.write() as session:
        agent = session.scalar(select(Agent).where(Agent.node == body.node))
        created = agent is None
        if agent is None:
            agent = Agent(node=body.node, host=body.host, ports=[], devices=[], state="alive")
            session.add(agent)
        was_alive = agent.state == "alive" and not created
        agent.host, agent.ports, agent.devices = body.host, body.ports, body.devices
        # a node that joins or leaves the multi-user pool: solve again
        owners_changed = not created and agent.runs_as_owner != body.runs_as_owner
        agent.runs_as_owner = body.runs_as_owner
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
        if body.fault is not None:
            quarantine(node, body.fault, changes)
        else:
            lift(node, changes, "its agent registered with a warm launcher")
        session.flush()
        changes.stale = changes.stale or (
            (not was_alive or owners_changed) and node.state == "idle"
        )
        answer = AgentRegistered(
            agent_id=agent.agent_id,
            node=agent.node,
            state="alive",
            heartbeat_interval_s=service.settings.heartbeat_interval_s,
        )
        number = agent.id
    service.leases.grant(number)
    service.after_commit(changes)
    if service.settings.multi_user and not body.runs_as_owner:
        log.warning(
            "agent of node %s does not run jobs as their owners (an older agent, or one not "
            "started as root): multi-user mode allocates no job to its node",
            body.node,
        )
    return answer, created


def _agent(session: Session, agent_id: str) -> Agent:
    number = parse_id(agent_id, "a")
    agent = None if number is None else session.get(Agent, number)
    if agent is None:
        raise NotFound(f"agent {short(agent_id)} not found; register again")
    return agent


def alive_agent(service: Service, agent_id: str) -> int | None:
    """The numeric id of an agent holding a lease (no database access), or None."""
    number = parse_id(agent_id, "a")
    return number if number is not None and service.leases.holds(number) else None


def known_agent(service: Service, agent_id: str) -> int:
    """The numeric id of an existing agent. Raises NotFound."""
    number = alive_agent(service, agent_id)
    if number is not None:
        return number
    with service.db.read() as session:
        return _agent(session, agent_id).id


def renew_lease(service: Service, agent_id: str, body: Heartbeat) -> bool:
    """The in-memory part of a heartbeat (no database access, see
    :meth:`~interstice.api.control.leases.Leases.renew`). False when :func:`heartbeat` must run."""
    number = parse_id(agent_id, "a")
    return number is not None and service.leases.renew(number, body)


def heartbeat(service: Service, agent_id: str, body: Heartbeat) -> HeartbeatAnswer:
    """Renew the agent's lease, keep its report, record its job's progress
    (:func:`state.record_report`).

    A heartbeat of a ``lost`` or ``left`` agent makes it ``alive`` again. Only news of
    the job or the revival of an agent not lost by this process's sweeps writes to the
    database here; the lease and the other revivals live in memory (:func:`renew_lease`)
    and are written by the lease sweep. Raises NotFound for an unknown agent.
    """
    if renew_lease(service, agent_id, body):
        return HeartbeatAnswer(agent_id=agent_id, state="alive")
    job_number = None if body.job_id is None else parse_id(body.job_id, "j")
    changes = Changes()
    with service.db.write() as session:
        agent = _agent(session, agent_id)
        if agent.state != "alive":
            agent.state = "alive"
            node = session.get(Node, agent.node)
            changes.stale = node is not None and node.state == "idle"
        agent.last_heartbeat_at = utcnow()
        agent.report = body.model_dump(exclude_unset=True)
        if job_number is not None:
            state.record_report(session, job_number, agent.node, body, changes)
        number = agent.id
    service.leases.recorded(number, body)
    service.after_commit(changes)
    return HeartbeatAnswer(agent_id=agent_id, state="alive")


def leave(service: Service, agent_id: str) -> None:
    """The agent leaves: its node is released at once (idempotent). Raises NotFound."""
    changes = Changes()
    with service.db.write() as session:
        agent = _agent(session, agent_id)
        state.agents_gone(session, [agent], "left", changes)
        number = agent.id
    service.leases.drop(number)
    service.after_commit(changes)


AGENT_COLUMNS = (
    "node",
    "host",
    "ports",
    "devices",
    "state",
    "registered_at",
    "last_heartbeat_at",
    "runs_as_owner",
)
"""The columns of :class:`~interstice.api.store.tables.Agent` that :class:`AgentPublic` shows
as they are (its id and report apart)."""


def list_agents(service: Service) -> AgentsPublic:
    """Every agent, by id, with its newest report (in memory until the sweep writes it)."""
    # plain rows, not ORM objects, which cost most of a large list's time to load; unpacked,
    # since a row's columns by name cost microseconds each, thousands of times a list
    columns = (getattr(Agent, name) for name in AGENT_COLUMNS)
    query = select(Agent.id, Agent.report, *columns).order_by(Agent.id)
    with service.db.read() as session:
        rows = session.execute(query).all()
    data = [
        AgentPublic(
            agent_id=f"a-{number}",
            report=service.leases.report(number, report),
            **dict(zip(AGENT_COLUMNS, shown, strict=True)),
        )
        for number, report, *shown in rows
    ]
    return AgentsPublic(data=data, count=len(data))


def commands(service: Service, agent_id: int) -> CommandsPublic:
    """The agent's pending commands, oldest first."""
    with service.db.read() as session:
        data = [_command_public(c, j) for c, j in state.pending_commands(session, agent_id)]
    return CommandsPublic(data=data, count=len(data))


class Ack(NamedTuple):
    """One acknowledgement as an agent posts it."""

    agent_id: str
    command_id: int
    body: CommandAck


def ack_batch(service: Service, acks: Sequence[Ack]) -> list[CommandAckAnswer | NotFound]:
    """Acknowledge commands (each idempotent, :func:`state.ack_command`) in one transaction.

    Returns:
        Per ack, in order, its answer or the NotFound it raised (unknown agent, or no such
        command for this agent); a NotFound changes nothing.
    """
    changes = Changes()
    results: list[CommandAckAnswer | NotFound] = []
    with service.db.write() as session:
        # the batch's agents and commands in two queries: session.get then finds them
        agent_ids = {parse_id(a.agent_id, "a") for a in acks} - {None}
        session.scalars(select(Agent).where(Agent.id.in_(agent_ids))).all()
        command_ids = {a.command_id for a in acks if 0 < a.command_id < state.ID_LIMIT}
        session.scalars(select(Command).where(Command.id.in_(command_ids))).all()
        for agent_id, command_id, body in acks:
            try:
                agent = _agent(session, agent_id)
                command = state.ack_command(
                    session,
                    agent.id,
                    command_id,
                    body.ok,
                    body.error,
                    service.settings.max_command_failures,
                    changes,
                    job_failed=body.job_failed,
                    node_fault=body.node_fault,
                )
            except NotFound as exc:
                results.append(exc)
                continue
            results.append(
                CommandAckAnswer(
                    command_id=command.id,
                    ok=bool(command.ok),
                    acked_at=command.acked_at,  # type: ignore[arg-type]
                )
            )
    service.after_commit(changes)
    return results


def _command_public(command: Command, job: Job) -> CommandPublic:
    return CommandPublic(
        command_id=command.id,
        kind=command.kind,  # type: ignore[arg-type]
        job_id=job.job_id,
        world_size=command.world_size,
        rendezvous_endpoint=command.rendezvous_endpoint,
        rendezvous_id=command.rendezvous_id,
        spb_depth=command.spb_depth,
        deadline=command.deadline,
        created_at=command.created_at,
        job=command_job(job),
    )
