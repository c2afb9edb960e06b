"""Node agents (docs/reference/agent-protocol.md): registration, heartbeats, commands and their
acknowledgements."""

from datetime import datetime
from typing import Annotated, Any, Literal

from interstice.api.schemas.common import NAME, Request, UTCTime, integer
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer

from interstice.wire import (
    HEARTBEAT_ERROR_MAX_CHARS,
    HEARTBEAT_METRICS_MAX,
    PROTOCOL_VERSION,
    CommandKind,
    HeartbeatJobState,
    Parallelism,
)

AgentState = Literal["alive", "lost", "left"]


class AgentCreate(Request):
    """A node agent registering (see docs/reference/agent-protocol.md).

    Attributes:
        runs_as_owner: the agent runs a job that names an owner as that owner's account (it
            runs as root and knows ``job.owner``). An agent that does not say so (an older
            one drops ``owner`` and would run the job as its own account) gets no job in
            multi-user mode.
        fault: why the node cannot run jobs now (its spare launcher exited during its warm-up,
            e.g. torch missing, or is not warm in time; or a launch failed for a reason of
            the node and the agent's health check has not passed since): the node is
            quarantined with it. None: the agent's launcher is warm, which ends a quarantine
            of the node.
    """

    node: str = NAME
    host: str = Field(min_length=1, max_length=200)
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list, max_length=100)
    devices: list[str] = Field(default_factory=list, max_length=1000)
    report_idle: bool = False
    runs_as_owner: bool = False
    fault: str | None = Field(default=None, min_length=1, max_length=HEARTBEAT_ERROR_MAX_CHARS)


class AgentRegistered(BaseModel):
    """The answer to a registration.

    Attributes:
        protocol_version: the newest agent protocol version the service speaks (3: a
            heartbeat may come with the long-poll, ``POST /v1/agents/{agent_id}/poll``; 4: a
            heartbeat may carry ``first_step`` and ``resumed_at``).
    """

    agent_id: str
    node: str
    state: AgentState
    heartbeat_interval_s: float
    protocol_version: int = PROTOCOL_VERSION


class AgentPublic(BaseModel):
    """An agent as admins see it.

    Attributes:
        runs_as_owner: whether the agent said at registration that it runs jobs as their
            owners; in multi-user mode the node of an agent that did not is never allocated.
    """

    model_config = ConfigDict(from_attributes=True)

    agent_id: str
    node: str
    host: str
    ports: list[int]
    devices: list[str]
    state: AgentState
    registered_at: datetime
    last_heartbeat_at: datetime | None
    report: dict[str, Any] | None
    runs_as_owner: bool


class AgentsPublic(BaseModel):
    data: list[AgentPublic]
    count: int


class Heartbeat(Request):
    """What the node's workers report; every field may be null when nothing runs.

    Attributes:
        job_id: the job the node runs.
        world_size: the job's node count as its workers see it.
        step: optimizer steps done, cumulative over generations.
        samples_per_s: the job's throughput, samples/s.
        samples_done: samples trained, cumulative (the job keeps the largest report).
        rendezvous_id: the generation the report comes from (``<job_id>-g<N>``).
        loss: training loss of the newest step (any finite number: a diverged job still
            heartbeats).
        spb_depth: SPB depth the workers run at.
        metrics: the script's own numbers, at most 32.
        job_state: ``finished`` (this generation's workers all exited 0 unasked: the job is
            done) or ``failed`` (they exited non-zero or could not start: the job fails with
            ``error``); ``running`` otherwise.
        error: why it failed (at most 4,000 characters).
        first_step: the step of the generation's first report (its workers' first step after
            they resumed from the checkpoint).
        resumed_at: when (UTC, the workers' clock) the generation first reported a step beyond
            ``first_step``: where its rescale cost ends (``cost_s`` of the job's rescales);
            null until then.
    """

    job_id: str | None = Field(default=None, max_length=50)
    world_size: integer(0, 1000000) | None = None
    step: integer(0, 10**15) | None = None
    samples_per_s: float | None = Field(default=None, ge=0, le=1e12)
    samples_done: float | None = Field(default=None, ge=0, le=1e15)
    rendezvous_id: str | None = Field(default=None, max_length=100)
    loss: float | None = None
    spb_depth: integer(0, 1000) | None = None
    metrics: dict[Annotated[str, Field(min_length=1, max_length=100)], float] = Field(
        default_factory=dict, max_length=HEARTBEAT_METRICS_MAX
    )
    job_state: HeartbeatJobState | None = None
    error: str | None = Field(default=None, max_length=HEARTBEAT_ERROR_MAX_CHARS)
    first_step: integer(0, 10**15) | None = None
    # kept as it came, in the agent's JSON ``report``: dumped as its ISO string
    resumed_at: Annotated[UTCTime, PlainSerializer(datetime.isoformat, return_type=str)] | None = (
        None
    )


class HeartbeatAnswer(BaseModel):
    agent_id: str
    state: AgentState


class JobOwner(BaseModel):
    """The Unix account a job runs as.

    Attributes:
        name: the user name.
        uid: the user's uid (the agent checks it against the node's passwd entry).
    """

    name: str
    uid: int


class CommandJob(BaseModel):
    """What an agent needs to run the job (the fields of :class:`JobCreate`, plus its
    directories and owner). ``entrypoint`` is None when ``command`` is set; ``owner`` is
    None in single-user mode (the job runs as the agent's account)."""

    model: str | None
    parallelism: Parallelism
    global_batch_size: int
    total_samples: int
    min_nodes: int
    max_nodes: int
    entrypoint: str | None
    command: list[str] | None
    workdir: str | None
    env: dict[str, str]
    nproc_per_node: int | Literal["auto"]
    job_dir: str
    checkpoint_dir: str
    owner: JobOwner | None = None


class CommandPublic(BaseModel):
    """A command to an agent (see docs/reference/agent-protocol.md)."""

    command_id: int
    kind: CommandKind
    job_id: str
    world_size: int
    rendezvous_endpoint: str
    rendezvous_id: str
    spb_depth: int
    deadline: datetime
    created_at: datetime
    job: CommandJob


class CommandsPublic(BaseModel):
    data: list[CommandPublic]
    count: int


class CommandAck(Request):
    """An agent's acknowledgement; ``ok: false`` records ``error`` on the job.

    Attributes:
        ok: whether the command was carried out.
        error: why not.
        job_failed: with ``ok: false`` on a ``start``/``rescale``: the reason is the job's
            own (bad command, missing script, workers crashed), so the job fails at once
            with ``error``; otherwise (a node-side reason) failures are counted up to
            ``max_command_failures``.
        node_fault: with ``ok: false`` and without ``job_failed``: the reason is this node's
            own (its launcher could not start, the job's owner is unknown here, the run
            directory cannot be made, e.g. a full disk): the node is quarantined and the job
            placed elsewhere.
    """

    ok: bool = True
    error: str | None = Field(default=None, max_length=10000)
    job_failed: bool = False
    node_fault: bool = False


class CommandAckAnswer(BaseModel):
    command_id: int
    ok: bool
    acked_at: datetime
