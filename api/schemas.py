"""Request and response models of the REST API, kept apart from the tables.

Per resource: ``<X>Create`` / ``<X>Update`` (request bodies), ``<X>Public`` (one item) and
``<X>sPublic`` (``data`` + ``count``). Times are aware UTC datetimes (ISO 8601), durations
seconds (``*_s``).
"""

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

Role = Literal["scheduler", "agent", "user", "admin"]
NodeState = Literal["idle", "busy"]
JobState = Literal["queued", "running", "finished", "cancelled", "failed"]
AgentState = Literal["alive", "lost", "left"]
CommandKind = Literal["start", "rescale", "stop"]
Parallelism = Literal["dp", "spb", "splitbrain"]
Backend = Literal["cbc", "cpsat"]
RescaleReason = Literal[
    "allocation", "reclaim", "agent_lost", "agent_left", "finished", "cancelled", "failed"
]


def _utc_in_range(at: datetime) -> datetime:
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    if not 2000 <= at.year <= 2100:
        raise ValueError(f"year {at.year} is outside 2000..2100")
    return at


UTCTime = Annotated[datetime, AfterValidator(_utc_in_range)]
"""A time in UTC (a time without offset is read as UTC), years 2000..2100."""

NAME = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:\-]+$")


class Request(BaseModel):
    """Request bodies refuse unknown fields, so a typo is a 422 naming it."""

    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    """A 4xx answer: ``detail`` is one line naming the field, id or state at fault."""

    detail: str


# --- nodes -----------------------------------------------------------------------------


class NodeEventCreate(Request):
    """A node-state change reported by the HPC scheduler.

    Attributes:
        event_id: unique id; a retry with the same id changes nothing and answers the same.
        node: node name.
        state: ``idle`` (available to elastic jobs) or ``busy`` (taken back by the scheduler).
        at: when the change happened.
        grace_s: seconds the holding job has to release the node on ``busy`` (a reclaim).
    """

    event_id: str = Field(min_length=1, max_length=200)
    node: str = NAME
    state: NodeState
    at: UTCTime
    grace_s: float = Field(default=0.0, ge=0, le=86400)


class NodeEventsCreate(Request):
    """A batch of node events, applied in order."""

    events: list[NodeEventCreate] = Field(min_length=1, max_length=10000)


class NodeEventResult(BaseModel):
    """What one event did: ``reclaimed_job_id`` is the job that had to release the node.

    A retry of the same ``event_id`` answers exactly this again and changes nothing.
    """

    event_id: str
    node: str
    state: NodeState
    reclaimed_job_id: str | None


class NodeEventsResult(BaseModel):
    """Results in the order of the batch."""

    data: list[NodeEventResult]
    count: int


class NodeAgentBrief(BaseModel):
    """The agent on a node."""

    agent_id: str
    state: AgentState


class NodePublic(BaseModel):
    """A node: its scheduler state, its agent and the job holding it."""

    name: str
    state: NodeState
    since: datetime
    allocatable: bool
    agent: NodeAgentBrief | None
    holder: str | None


class NodesPublic(BaseModel):
    data: list[NodePublic]
    count: int


# --- jobs ------------------------------------------------------------------------------


class JobCreate(Request):
    """An elastic training job.

    Attributes:
        model: a model of the scalability table.
        min_nodes: fewest nodes it runs on.
        max_nodes: most nodes it uses.
        total_samples: samples to train; the job finishes there.
        priority: multiplier of its term in the objective, > 0.
        parallelism: ``dp`` (data parallel, SPB depth 0 only), ``spb`` or ``splitbrain``.
        batch_size: samples per worker per step.
        rescale_up_s: progress lost when it grows or starts, seconds (Horovod, BFTrainer).
        rescale_down_s: progress lost when it shrinks, seconds.
        entrypoint: python module the agents run (``python -m``).
        command: argv the agents run instead of ``entrypoint``.
    """

    model: str = Field(min_length=1, max_length=200)
    min_nodes: int = Field(ge=1, le=100000)
    max_nodes: int = Field(ge=1, le=100000)
    total_samples: float = Field(gt=0, le=1e15)
    priority: float = Field(default=1.0, gt=0, le=1e6)
    parallelism: Parallelism = "dp"
    batch_size: int = Field(default=32, ge=1, le=1000000)
    rescale_up_s: float = Field(default=18.0, ge=0, le=86400)
    rescale_down_s: float = Field(default=12.0, ge=0, le=86400)
    entrypoint: str | None = Field(
        default=None, min_length=1, max_length=500, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$"
    )
    command: list[str] | None = Field(default=None, min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _consistent(self) -> "JobCreate":
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes {self.min_nodes} > max_nodes {self.max_nodes}")
        if self.entrypoint is not None and self.command is not None:
            raise ValueError("give entrypoint or command, not both")
        return self


class RescalePublic(BaseModel):
    """One change of a job's nodes or SPB depth."""

    at: datetime
    from_nodes: list[str]
    to_nodes: list[str]
    from_spb_depth: int
    to_spb_depth: int
    reason: RescaleReason


class CommandError(BaseModel):
    """A command an agent acknowledged with ``ok: false``."""

    command_id: int
    kind: CommandKind
    node: str
    error: str | None
    at: datetime | None


class JobPublic(BaseModel):
    """A job as its owner and admins see it."""

    job_id: str
    state: JobState
    model: str
    min_nodes: int
    max_nodes: int
    total_samples: float
    samples_done: float
    priority: float
    parallelism: Parallelism
    batch_size: int
    rescale_up_s: float
    rescale_down_s: float
    entrypoint: str
    command: list[str] | None
    checkpoint_dir: str
    nodes: list[str]
    world_size: int
    spb_depth: int
    generation: int
    submitted_at: datetime
    finished_at: datetime | None
    rescales: list[RescalePublic]
    errors: list[CommandError]


class JobsPublic(BaseModel):
    data: list[JobPublic]
    count: int


# --- agents and commands ---------------------------------------------------------------


class AgentCreate(Request):
    """A node agent registering (see docs/agent-protocol.md)."""

    node: str = NAME
    host: str = Field(min_length=1, max_length=200)
    ports: list[int] = Field(default_factory=list, max_length=100)
    devices: list[str] = Field(default_factory=list, max_length=1000)
    report_idle: bool = False

    @model_validator(mode="after")
    def _ports_in_range(self) -> "AgentCreate":
        bad = [p for p in self.ports if not 1 <= p <= 65535]
        if bad:
            raise ValueError(f"ports: {bad[0]} is outside 1..65535")
        return self


class AgentRegistered(BaseModel):
    """The answer to a registration."""

    agent_id: str
    node: str
    state: AgentState
    heartbeat_interval_s: float


class AgentPublic(BaseModel):
    """An agent as admins see it."""

    agent_id: str
    node: str
    host: str
    ports: list[int]
    devices: list[str]
    state: AgentState
    registered_at: datetime
    last_heartbeat_at: datetime | None
    report: dict[str, Any] | None


class AgentsPublic(BaseModel):
    data: list[AgentPublic]
    count: int


class Heartbeat(Request):
    """What the node's workers report; every field may be null when nothing runs."""

    job_id: str | None = Field(default=None, max_length=50)
    world_size: int | None = Field(default=None, ge=0, le=1000000)
    step: int | None = Field(default=None, ge=0)
    samples_per_s: float | None = Field(default=None, ge=0, le=1e12)
    samples_done: float | None = Field(default=None, ge=0, le=1e15)


class HeartbeatAnswer(BaseModel):
    agent_id: str
    state: AgentState


class CommandJob(BaseModel):
    """What an agent needs to run the job."""

    model: str
    parallelism: Parallelism
    batch_size: int
    total_samples: float
    min_nodes: int
    max_nodes: int
    entrypoint: str
    command: list[str] | None
    checkpoint_dir: str


class CommandPublic(BaseModel):
    """A command to an agent (see docs/agent-protocol.md)."""

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
    """An agent's acknowledgement; ``ok: false`` records ``error`` on the job."""

    ok: bool = True
    error: str | None = Field(default=None, max_length=10000)


class CommandAckAnswer(BaseModel):
    command_id: int
    ok: bool
    acked_at: datetime


# --- objective, scalability, audit -----------------------------------------------------


class ObjectivePublic(BaseModel):
    """The optimizer's objective settings.

    Attributes:
        throughput, speedup, fairness, priority, churn, early_finish: the optimizer's
            ``Weights`` (``early_finish``: beta of the objective's early-finish term, in
            [0, 1]).
        horizon_s: forecast horizon, seconds, or ``"auto"`` (expected remaining idle time
            of the pool, from the idle intervals observed so far).
        backend: MILP backend, ``cbc`` or ``cpsat``.
        time_limit_s: solver wall-clock limit, seconds.
    """

    throughput: float
    speedup: bool
    fairness: float
    priority: float
    churn: float
    early_finish: float
    horizon_s: float | Literal["auto"]
    backend: Backend
    time_limit_s: float


class ObjectiveUpdate(Request):
    """A change of the objective; fields left out keep their value."""

    throughput: float | None = Field(default=None, ge=0, le=1e6)
    speedup: bool | None = None
    fairness: float | None = Field(default=None, ge=0, le=1e6)
    priority: float | None = Field(default=None, ge=0, le=100)
    churn: float | None = Field(default=None, ge=0, le=1e12)
    early_finish: float | None = Field(default=None, ge=0, le=1)
    horizon_s: float | Literal["auto"] | None = Field(default=None)
    backend: Backend | None = None
    time_limit_s: float | None = Field(default=None, gt=0, le=3600)

    @model_validator(mode="after")
    def _positive_horizon(self) -> "ObjectiveUpdate":
        if isinstance(self.horizon_s, float) and not 0 < self.horizon_s <= 1e7:
            raise ValueError(f"horizon_s must be in (0, 1e7] or 'auto', got {self.horizon_s}")
        return self


class ScalabilityPublic(BaseModel):
    """The loaded scalability table: models, row count and where it came from."""

    models: list[str]
    rows: int
    source: str


class AuditPublic(BaseModel):
    """An admin change."""

    id: int
    at: datetime
    actor: str
    action: str
    old: dict[str, Any] | None
    new: dict[str, Any]


class AuditsPublic(BaseModel):
    data: list[AuditPublic]
    count: int


class Health(BaseModel):
    status: Literal["ok"]
