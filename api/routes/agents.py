"""Node-agent routes (docs/reference/agent-protocol.md): register, heartbeat, leave, commands, and
the heartbeat carried by the long-poll (protocol version 3)."""

from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Response, status
from interstice.api.deps import AdminToken, AgentToken, ServiceDep, roles
from interstice.api.schemas.agents import (
    AgentCreate,
    AgentRegistered,
    AgentsPublic,
    CommandAck,
    CommandAckAnswer,
    CommandsPublic,
    Heartbeat,
    HeartbeatAnswer,
)
from interstice.api.service import Service
from interstice.api.services import agents
from interstice.api.services.state import parse_id

router = APIRouter(prefix="/v1/agents", tags=["agents"])
NO_COMMANDS = CommandsPublic(data=[], count=0)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    **roles(
        "agent",
        errors=(400,),
        answers={200: {"model": AgentRegistered, "description": "Re-registration (same id)"}},
    ),
)
def register_agent(
    body: AgentCreate, response: Response, service: ServiceDep, _: AgentToken
) -> AgentRegistered:
    """Register the agent of a node: 201 the first time, 200 (same ``agent_id``) after.
    With ``report_idle`` the node becomes idle as on a scheduler ``idle`` event. With a
    ``fault`` the node is quarantined; without, its quarantine ends. Roles: agent.
    """
    answer, created = agents.register(service, body)
    if not created:
        response.status_code = status.HTTP_200_OK
    return answer


@router.get("", **roles("admin"))
def list_agents(service: ServiceDep, _: AdminToken) -> AgentsPublic:
    """Every agent with its state and last report. Roles: admin."""
    return agents.list_agents(service)


@router.post("/{agent_id}/heartbeat", **roles("agent", errors=(400, 404)))
async def heartbeat(
    agent_id: str, body: Heartbeat, service: ServiceDep, _: AgentToken
) -> HeartbeatAnswer:
    """Renew the agent's lease and report what its workers run (protocol version 2): the
    job keeps the maximum ``samples_done`` and finishes at ``total_samples``; a report that
    advances the step joins its metrics series and its learned rates; ``job_state``
    ``finished``/``failed`` of its newest generation ends it (failed: with ``error``).
    404: unknown agent, register again. Roles: agent."""
    await _beat(service, agent_id, body)
    return HeartbeatAnswer(agent_id=agent_id, state="alive")


async def _beat(service: Service, agent_id: str, body: Heartbeat) -> int:
    """Take a heartbeat; returns the agent's numeric id. Raises NotFound."""
    if not agents.renew_lease(service, agent_id, body):  # the common case: on the event loop
        await anyio.to_thread.run_sync(agents.heartbeat, service, agent_id, body)
    return parse_id(agent_id, "a")  # type: ignore[return-value]  # known: beat taken


@router.delete(
    "/{agent_id}", status_code=status.HTTP_204_NO_CONTENT, **roles("agent", errors=(404,))
)
def leave(agent_id: str, service: ServiceDep, _: AgentToken) -> None:
    """The agent leaves: its node leaves the pool at once and its job is rescaled without
    it. Idempotent. Roles: agent."""
    agents.leave(service, agent_id)


WAIT_MAX_S = 60
"""Most seconds a long-poll's ``wait`` may ask for."""
WAIT_DEFAULT_S = 30
"""A long-poll's ``wait`` when the query gives none, seconds."""
WaitQuery = Annotated[
    float, Query(ge=0, le=WAIT_MAX_S, description="seconds to wait for a command")
]


@router.get("/{agent_id}/commands", **roles("agent", errors=(404,)))
async def poll_commands(
    agent_id: str, service: ServiceDep, _: AgentToken, wait: WaitQuery = WAIT_DEFAULT_S
) -> CommandsPublic:
    """Long-poll: every pending command of the agent, oldest first, at once when there is
    one; else after at most ``wait`` seconds, none. A command is answered again until
    acknowledged. A poll of an alive agent renews its lease like a heartbeat. An agent that
    left (``DELETE``) stays known, ``left``, so its poll still answers. Roles: agent."""
    number = agents.alive_agent(service, agent_id)
    if number is not None:
        service.leases.touch(number)
    else:
        number = await anyio.to_thread.run_sync(
            agents.known_agent, service, agent_id, limiter=service.poll_reads
        )
    return await pending_commands(service, number, wait)


@router.post("/{agent_id}/poll", **roles("agent", errors=(400, 404)))
async def poll_with_heartbeat(
    agent_id: str,
    body: Heartbeat,
    service: ServiceDep,
    _: AgentToken,
    wait: WaitQuery = WAIT_DEFAULT_S,
) -> CommandsPublic:
    """A heartbeat and a long-poll in one request (protocol version 3): the body is taken
    as ``POST .../heartbeat`` takes it, then the answer is that of ``GET .../commands``.
    404: unknown agent, register again. Roles: agent."""
    return await pending_commands(service, await _beat(service, agent_id, body), wait)


async def pending_commands(service: Service, number: int, wait_s: float) -> CommandsPublic:
    """The agent's pending commands: at once when there are some, else when one is written
    or after ``wait_s`` (capped by ``max_poll_wait_s``). A wait that ends unwoken answers
    none without reading again: every command written for the agent wakes it (a wake-up
    lost between replicas is made up by the next poll's first read). An agent known to have
    none (:meth:`~interstice.api.control.notify.Notifier.known_clear`) is not read at first. At
    shutdown every wait ends at once and answers without reading (thousands of reads would
    outlast the graceful shutdown)."""
    notifier = service.notifier
    woken = notifier.subscribe(number)

    async def read() -> CommandsPublic:
        mark = notifier.wakes_so_far(number)
        answer = await anyio.to_thread.run_sync(
            agents.commands, service, number, limiter=service.poll_reads
        )
        notifier.found(number, mark, [c.command_id for c in answer.data])
        return answer

    answer = NO_COMMANDS if notifier.known_clear(number) else await read()
    wait_s = min(wait_s, service.settings.max_poll_wait_s)
    if answer.count or wait_s <= 0:
        return answer
    with anyio.move_on_after(wait_s):
        await woken.wait()
    return await read() if woken.is_set() and not notifier.closed else answer


@router.post("/{agent_id}/commands/{command_id}/ack", **roles("agent", errors=(400, 404)))
async def ack_command(
    agent_id: str, command_id: int, body: CommandAck, service: ServiceDep, _: AgentToken
) -> CommandAckAnswer:
    """Acknowledge a command (idempotent). ``ok: false`` records ``error`` on the job; with
    ``job_failed: true`` (a reason of the job itself) the job fails at once, otherwise a job
    whose commands failed ``max_command_failures`` times is ``failed``; with ``node_fault:
    true`` (a reason of the node) the node is also quarantined. Acks that arrive
    together are written in one transaction (:mod:`interstice.api.control.acks`). Roles: agent."""
    return await service.acks.ack(agents.Ack(agent_id, command_id, body))
