"""Request and response models of the REST API, kept apart from the tables.

Per resource: ``<X>Create`` / ``<X>Update`` (request bodies), ``<X>Public`` (one item) and
``<X>sPublic`` (``data`` + ``count``). Times are aware UTC datetimes (ISO 8601), durations
seconds (``*_s``).
"""

import re
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from interstice.wire import (
    HEARTBEAT_ERROR_MAX_CHARS,
    HEARTBEAT_METRICS_MAX,
    PROTOCOL_VERSION,
    CommandKind,
    HeartbeatJobState,
    JobState,
    Parallelism,
    TokenRole,
)

Role = TokenRole
NodeState = Literal["idle", "busy"]
AgentState = Literal["alive", "lost", "left"]
Backend = Literal["cbc", "cpsat"]
RescaleReason = Literal[
    "allocation", "reclaim", "agent_lost", "agent_left", "finished", "cancelled", "failed"
]


def _utc_in_range(at: datetime) -> datetime:
    if not 2000 <= at.year <= 2100:  # the year as written, as the schema's pattern says
        raise ValueError(f"year {at.year} is outside 2000..2100")
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


UTCTime = Annotated[
    datetime,
    AfterValidator(_utc_in_range),
    Field(
        description="ISO 8601 time; without an offset it is UTC; years 2000..2100",
        json_schema_extra={"pattern": "^(20[0-9][0-9]|2100)-"},
    ),
]
"""A time in UTC (a time without offset is read as UTC), years 2000..2100 as written."""


def _not_a_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("Input should be a valid integer, not a boolean")
    return value


def integer(ge: int, le: int) -> Any:
    """An integer in [ge, le]: ``true``/``false`` are refused (pydantic would read them as
    1/0), and so is a number with a fractional part (``1.5``, ``5e-324``); ``1e6`` is read
    as 1000000. (The bounds sit before the validator so that OpenAPI shows them.)"""
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(_not_a_boolean)]


NAME_PATTERN = r"^[A-Za-z0-9_.:\-]+$"
"""A node's name (and an agent's ``node``): letters, digits, ``_ . : -``."""
NAME = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)


def _takes_booleans(annotation: Any) -> bool:
    """Whether ``annotation`` has ``bool`` or a model (which checks its own fields) in it."""
    if annotation is bool or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return True
    return any(_takes_booleans(arg) for arg in get_args(annotation))


def _only_booleans(annotation: Any) -> bool:
    """Whether ``annotation`` is ``bool`` or ``bool | None``."""
    return annotation is bool or set(get_args(annotation)) == {bool, type(None)}


def _has_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, dict):
        return any(_has_boolean(v) for v in value.values())
    return isinstance(value, list) and any(_has_boolean(v) for v in value)


def nul_position(value: Any) -> str | None:
    """Where the first NUL character (U+0000) of ``value`` is: ``position 3`` in a string,
    ``item 1, position 0`` in a list, ``the value of 'A', position 2`` or ``a key, position
    0`` in a mapping (nested as deep as the value is); None when it has none. Other values
    (numbers, models, which check their own fields) have none."""
    if isinstance(value, str):
        at = value.find("\x00")
        return None if at < 0 else f"position {at}"
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            if (inner := nul_position(item)) is not None:
                return f"item {index}, {inner}"
    if isinstance(value, dict):
        for key, item in value.items():
            if (inner := nul_position(key)) is not None:
                return f"a key, {inner}"
            if (inner := nul_position(item)) is not None:
                return f"the value of {key!r}, {inner}"
    return None


def refuse_nul(value: Any) -> None:
    """Refuse text holding a NUL character: PostgreSQL cannot store one in a text column
    (the insert fails, a 500), and no process can receive one in an argument or an
    environment variable.

    Raises:
        ValueError: ``value`` (a string, or a list or mapping of them) holds a NUL; the
            message says where (:func:`nul_position`).
    """
    where = nul_position(value)
    if where is not None:
        raise ValueError(f"a NUL character (U+0000) is not allowed ({where})")


NO_NUL_PATTERN = "^[^\\u0000]*$"
"""The pattern a request schema shows on its free text (what :meth:`Request._no_nul`
refuses); fields with a pattern of their own already leave NUL out."""


def _show_no_nul(schema: dict[str, Any], key_names: bool = False) -> None:
    """Add :data:`NO_NUL_PATTERN` to every free-text string of ``schema`` (in place): strings
    with no pattern, enumeration or format, in properties, items, keys (``key_names``: the
    schema of a mapping's keys, strings whether it says so or not), values and branches (a
    nested model is a ``$ref`` that states its own)."""
    text = key_names or schema.get("type") == "string"
    if text and not {"pattern", "enum", "const", "format"} & set(schema):
        schema["pattern"] = NO_NUL_PATTERN
    for key in ("items", "additionalProperties", "propertyNames"):
        if isinstance(schema.get(key), dict):
            _show_no_nul(schema[key], key_names=key == "propertyNames")
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        for branch in schema.get(key, []):
            _show_no_nul(branch)
    for field in schema.get("properties", {}).values():
        _show_no_nul(field)


class Request(BaseModel):
    """Request bodies refuse unknown fields, so a typo is a 422 naming it, NaN or infinite
    numbers (a 422 naming the field, never a 500), ``true``/``false`` where no boolean is
    expected (pydantic would read them as 1 and 0: ``grace_s: false`` is not 0), anything
    but ``true``/``false`` where one is (not ``0``, ``1`` or ``"yes"``), and a NUL character
    (U+0000) in any text: a field, a list item, a key or a value of a mapping (a 422 naming
    the field and where in it, on SQLite as on PostgreSQL, which cannot store one)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, json_schema_extra=_show_no_nul)

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        refuse_nul(value)
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _strict_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        rules = _boolean_rules(cls, info.field_name or "")
        if rules is None:
            return value
        refused_kind, only_booleans = rules
        if refused_kind is not None and _has_boolean(value):
            raise ValueError(f"Input should be a valid {refused_kind}, not a boolean")
        if only_booleans and value is not None and not isinstance(value, bool):
            raise ValueError("Input should be true or false")
        return value


@cache
def _boolean_rules(model: type[BaseModel], name: str) -> tuple[str | None, bool] | None:
    """What :meth:`Request._strict_booleans` checks of field ``name`` of ``model``, worked
    out once per field (a batch of 10,000 node events checks 50,000 fields): the kind
    (``integer``/``number``) named when a boolean is refused (None: booleans are taken), and
    whether only booleans are. None: no such field."""
    field = model.model_fields.get(name)
    if field is None:
        return None
    annotation = field.annotation
    refused_kind = None
    if not _takes_booleans(annotation):
        refused_kind = "integer" if int in get_args(annotation) + (annotation,) else "number"
    return refused_kind, _only_booleans(annotation)


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
        until: on ``idle``, when the scheduler expects to need the node back (its plan: a
            pending job's planned start, a reservation), after ``at``; None: unknown. The
            node keeps the ``until`` of its newest applied event, so a later event revises
            it and one without ``until`` withdraws it. A forecast only: the node is taken
            back by a ``busy`` event (a reclaim, with its grace period), never by the clock.
    """

    event_id: str = Field(min_length=1, max_length=200)
    node: str = NAME
    state: NodeState
    at: UTCTime
    grace_s: float = Field(default=0.0, ge=0, le=86400)
    until: UTCTime | None = None

    @field_validator("until")
    @classmethod
    def _after_at(cls, until: datetime | None, info: ValidationInfo) -> datetime | None:
        if until is None:
            return None
        if info.data.get("state") == "busy":
            raise ValueError("a busy event takes the node back: only an idle event has until")
        at = info.data.get("at")
        if at is not None and until <= at:
            raise ValueError(f"until {until.isoformat()} is not after at {at.isoformat()}")
        return until


class NodeEventsCreate(Request):
    """A batch of node events, applied in order."""

    events: list[NodeEventCreate] = Field(min_length=1, max_length=10000)


class NodeEventResult(BaseModel):
    """What one event did. A retry of the same ``event_id`` answers exactly this again
    (``applied`` and ``reason`` included) and changes nothing.

    Attributes:
        event_id: the event's id.
        node: the event's node.
        state: the event's state (the node's only when ``applied``).
        applied: whether the node took the event's state. False: an event with a later
            ``at`` had already been applied to the node (e.g. the scheduler's clock stepped
            back), so this one changed nothing: the node kept its state and no reclaim was
            sent.
        reason: why ``applied`` is false (``superseded by a newer event at <at>``, the
            ``at`` of the newest event the node had then); None when applied.
        reclaimed_job_id: the job that had to release the node (a reclaim); None when
            there was none.
    """

    event_id: str
    node: str
    state: NodeState
    applied: bool
    reason: str | None
    reclaimed_job_id: str | None


class NodeEventsResult(BaseModel):
    """Results in the order of the batch."""

    data: list[NodeEventResult]
    count: int


class NodeAgentBrief(BaseModel):
    """The agent on a node."""

    model_config = ConfigDict(from_attributes=True)

    agent_id: str
    state: AgentState


class NodePublic(BaseModel):
    """A node: its scheduler state, its agent and the job holding it."""

    name: str
    state: NodeState
    since: datetime
    until: datetime | None = Field(
        description="When the scheduler expects to need the node back (the ``until`` of its "
        "newest applied event); None: unknown"
    )
    allocatable: bool
    agent: NodeAgentBrief | None
    holder: str | None


NODES_PAGE_DEFAULT = 1000
"""Nodes per page of ``GET /v1/nodes`` when ``limit`` is not given (a small cluster is one
page)."""
NODES_PAGE_MAX = 10000
"""Most nodes a page of ``GET /v1/nodes`` may ask for (``limit``)."""


class NodesPublic(BaseModel):
    """A page of nodes, by name.

    Attributes:
        data: the page's nodes.
        count: nodes in all, on every page.
        next_cursor: the ``cursor`` that asks for the next page; None on the last page.
    """

    data: list[NodePublic]
    count: int
    next_cursor: str | None


# --- jobs ------------------------------------------------------------------------------


RESERVED_ENV = re.compile(
    r"^(INTERSTICE_.*|TORCHELASTIC_.*|RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK"
    r"|GROUP_WORLD_SIZE|ROLE_NAME|ROLE_RANK|ROLE_WORLD_SIZE|MASTER_ADDR|MASTER_PORT"
    r"|TORCH_NCCL_ASYNC_ERROR_HANDLING)$"
)
"""Names a job's ``env`` may not set: the launcher's (torchrun's and interstice's)."""
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ARGV_MAX_ARGS = 1000
ARGV_MAX_BYTES = 100_000
"""Most arguments and most UTF-8 bytes of a ``command`` (all arguments, and each one): far
below Linux's 2 MiB ``ARG_MAX`` and 128 KiB per string, so a valid argv always execs."""
ENV_MAX_VARS = 200
ENV_MAX_BYTES = 100_000
"""Most variables and most UTF-8 bytes (names and values) of a job's ``env``."""


def _program_not_empty(schema: dict[str, Any]) -> None:
    """Show the rule of :meth:`JobCreate._execable` that JSON Schema can state: the first
    argument (the program) is not empty; later ones may be."""
    for branch in schema.get("anyOf", []):
        if branch.get("type") == "array":
            branch["prefixItems"] = [{"type": "string", "minLength": 1}]


class JobCreate(Request):
    """An elastic training job: the user's script (``command``) or a python module
    (``entrypoint``; the built-in worker when neither is given), started on every node under
    the torchrun environment plus interstice's (``INTERSTICE_JOB_DIR``, ...).

    Attributes:
        model: a model of the scalability table, or any name (or none): a job whose model has
            no row is scheduled from the default scaling curve until its own reported rates
            replace it.
        min_nodes: fewest nodes it runs on.
        max_nodes: most nodes it uses.
        total_samples: samples to train, an integer; the job finishes there.
        priority: multiplier of its term in the objective, > 0.
        parallelism: ``dp`` (data parallel, SPB depth 0 only), ``spb`` or ``splitbrain``.
        global_batch_size: samples per optimizer step of the whole job, whatever its size.
        rescale_up_s: progress lost when it grows or starts, seconds (Horovod, BFTrainer);
            used until rescales of the job itself have been measured.
        rescale_down_s: progress lost when it shrinks, seconds; likewise.
        entrypoint: python module the agents run (``python -m``).
        command: argv the agents run instead of ``entrypoint`` (a first element ending in
            ``.py`` runs under the agent's python); ``{job_id}``, ``{job_dir}``,
            ``{checkpoint_dir}``, ``{total_samples}``, ``{global_batch_size}`` are replaced
            in every argument. At most 1,000 arguments and 100,000 bytes; the first (the
            program) is not empty.
        workdir: directory the workers start in (on every node); None: the agent's choice.
        env: environment variables added for the workers; the launcher's names
            (``INTERSTICE_*``, ``TORCHELASTIC_*``, ``RANK``, ``WORLD_SIZE``, ...) are refused.
        nproc_per_node: worker processes per node, or ``auto`` (one per visible GPU, 1 on CPU).

    Rules beyond the fields' own (a 422 when broken): ``min_nodes`` ≤ ``max_nodes``; at
    most one of ``entrypoint`` and ``command``; no launcher name in ``env``; the UTF-8 byte
    totals of ``command`` and ``env``.
    """

    model: str | None = Field(default=None, min_length=1, max_length=200)
    min_nodes: integer(1, 100000)
    max_nodes: integer(1, 100000)
    total_samples: integer(1, 10**15)
    priority: float = Field(default=1.0, gt=0, le=1e6)
    parallelism: Parallelism = "dp"
    global_batch_size: integer(1, 10**7) = 256
    rescale_up_s: float = Field(default=18.0, ge=0, le=86400)
    rescale_down_s: float = Field(default=12.0, ge=0, le=86400)
    entrypoint: str | None = Field(
        default=None, min_length=1, max_length=500, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$"
    )
    command: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=ARGV_MAX_ARGS,
        json_schema_extra=_program_not_empty,
    )
    workdir: str | None = Field(default=None, min_length=1, max_length=4096)
    env: dict[str, str] = Field(
        default_factory=dict,
        max_length=ENV_MAX_VARS,
        json_schema_extra={"propertyNames": {"pattern": ENV_NAME.pattern}},
    )
    nproc_per_node: integer(1, 1024) | Literal["auto"] = "auto"

    @field_validator("command")
    @classmethod
    def _execable(cls, argv: list[str] | None) -> list[str] | None:
        if argv is None:
            return None
        if not argv[0]:
            raise ValueError("the program (first argument) is empty")
        sizes = [len(argument.encode()) for argument in argv]
        for index, size in enumerate(sizes):
            if size > ARGV_MAX_BYTES:
                raise ValueError(f"argument {index} has {size} bytes (at most {ARGV_MAX_BYTES})")
        if sum(sizes) > ARGV_MAX_BYTES:
            raise ValueError(f"the arguments have {sum(sizes)} bytes (at most {ARGV_MAX_BYTES})")
        return argv

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
            if RESERVED_ENV.match(name):
                raise ValueError(f"{name} is set by the launcher and may not be given")
        size = sum(len(n.encode()) + len(v.encode()) for n, v in env.items())
        if size > ENV_MAX_BYTES:
            raise ValueError(f"names and values have {size} bytes (at most {ENV_MAX_BYTES})")
        return env

    @model_validator(mode="after")
    def _consistent(self) -> "JobCreate":
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes {self.min_nodes} > max_nodes {self.max_nodes}")
        if self.entrypoint is not None and self.command is not None:
            raise ValueError("give entrypoint or command, not both")
        return self


class RescalePublic(BaseModel):
    """One change of a job's nodes or SPB depth: the start of generation ``generation``.

    Attributes:
        cost_s: measured rescale cost, seconds: from the commands to the generation's first
            report beyond its first step; None until measured (or when it ran on no node).
    """

    model_config = ConfigDict(from_attributes=True)

    at: datetime
    from_nodes: list[str]
    to_nodes: list[str]
    from_spb_depth: int
    to_spb_depth: int
    reason: RescaleReason
    generation: int | None
    cost_s: float | None


class CommandError(BaseModel):
    """A command an agent acknowledged with ``ok: false``."""

    command_id: int
    kind: CommandKind
    node: str
    error: str | None
    at: datetime | None


class JobPublic(BaseModel):
    """A job as its owner and admins see it.

    Attributes:
        samples_done: samples trained (the largest count any node reported, at most
            ``total_samples``).
        last_loss: the loss of the newest report that advanced the step, or None.
        world_size: nodes of the current generation (the commands' ``world_size``; each
            runs ``nproc_per_node`` worker processes).
        entrypoint: the module run, None when ``command`` is set.
        job_dir: ``<checkpoint_root>/<job_id>`` on the shared filesystem (mode 0700):
            checkpoints, final model, logs and metrics of the job.
        checkpoint_dir: ``<job_dir>/checkpoints``.
        error: why the job failed (its workers' or a node's report), else None.
        rescales: its generations, oldest first, with their measured costs.
        errors: commands agents acknowledged with ``ok: false``.
    """

    job_id: str
    state: JobState
    model: str | None
    min_nodes: int
    max_nodes: int
    total_samples: int
    samples_done: int
    last_loss: float | None
    priority: float
    parallelism: Parallelism
    global_batch_size: int
    rescale_up_s: float
    rescale_down_s: float
    entrypoint: str | None
    command: list[str] | None
    workdir: str | None
    env: dict[str, str]
    nproc_per_node: int | Literal["auto"]
    job_dir: str
    checkpoint_dir: str
    nodes: list[str]
    world_size: int
    spb_depth: int
    generation: int
    submitted_at: datetime
    finished_at: datetime | None
    error: str | None
    rescales: list[RescalePublic]
    errors: list[CommandError]


class JobsPublic(BaseModel):
    data: list[JobPublic]
    count: int


class JobMetricPublic(BaseModel):
    """One report of a job's workers that advanced its step.

    Attributes:
        at: when the service received it.
        step: optimizer steps done (cumulative over generations).
        samples: samples trained (cumulative), or None when not reported.
        loss: training loss, or None.
        samples_per_s: the job's throughput then, samples/s, or None.
        world_size: the job's node count then, or None.
        metrics: the script's own numbers (``elastic.report(**metrics)``).
    """

    model_config = ConfigDict(from_attributes=True)

    at: datetime
    step: int
    samples: float | None
    loss: float | None
    samples_per_s: float | None
    world_size: int | None
    metrics: dict[str, float]


class JobMetricsPublic(BaseModel):
    """A job's reported series, oldest first (at most the newest 10,000 reports are kept)."""

    data: list[JobMetricPublic]
    count: int


class JobLogPublic(BaseModel):
    """A piece of one rank's log, all generations concatenated oldest first.

    Attributes:
        job_id: the job.
        rank: global rank whose stdout+stderr this is.
        text: the piece (UTF-8, undecodable bytes replaced).
        offset: byte offset of ``text`` in the concatenated log.
        next_offset: byte offset to ask for next (``?offset=``) to follow the log.
    """

    job_id: str
    rank: int
    text: str
    offset: int
    next_offset: int


# --- agents and commands ---------------------------------------------------------------


class AgentCreate(Request):
    """A node agent registering (see docs/agent-protocol.md)."""

    node: str = NAME
    host: str = Field(min_length=1, max_length=200)
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list, max_length=100)
    devices: list[str] = Field(default_factory=list, max_length=1000)
    report_idle: bool = False


class AgentRegistered(BaseModel):
    """The answer to a registration.

    Attributes:
        protocol_version: the newest agent protocol version the service speaks (3: a
            heartbeat may come with the long-poll, ``POST /v1/agents/{agent_id}/poll``).
    """

    agent_id: str
    node: str
    state: AgentState
    heartbeat_interval_s: float
    protocol_version: int = PROTOCOL_VERSION


class AgentPublic(BaseModel):
    """An agent as admins see it."""

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


class HeartbeatAnswer(BaseModel):
    agent_id: str
    state: AgentState


class CommandJob(BaseModel):
    """What an agent needs to run the job (the fields of :class:`JobCreate`, plus its
    directories). ``entrypoint`` is None when ``command`` is set."""

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
    """An agent's acknowledgement; ``ok: false`` records ``error`` on the job.

    Attributes:
        ok: whether the command was carried out.
        error: why not.
        job_failed: with ``ok: false`` on a ``start``/``rescale``: the reason is the job's
            own (bad command, missing script, workers crashed), so the job fails at once
            with ``error``; otherwise (a node-side reason) failures are counted up to
            ``max_command_failures``.
    """

    ok: bool = True
    error: str | None = Field(default=None, max_length=10000)
    job_failed: bool = False


class CommandAckAnswer(BaseModel):
    command_id: int
    ok: bool
    acked_at: datetime


# --- tokens ----------------------------------------------------------------------------

TOKEN_NAME = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:@\-]+$")
TOKEN_ID = r"^t-[0-9]{1,15}$"


class TokenCreate(Request):
    """A new bearer token.

    Attributes:
        name: who holds it (letters, digits, ``_ . : @ -``).
        role: ``scheduler``, ``agent``, ``user`` or ``admin``.
        expires_in_s: lifetime from now, seconds (at most 10 years); null: it never expires.
    """

    name: str = TOKEN_NAME
    role: Role
    expires_in_s: integer(1, 10 * 366 * 86400) | None = None


class TokenPublic(BaseModel):
    """A token as admins see it (never its secret: only a hash is stored).

    Attributes:
        token_id: ``t-<id>``.
        expires_at: when it stops working, or null (never).
        revoked_at: when it was revoked, or null.
    """

    token_id: str
    name: str
    role: Role
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenPublic):
    """A new token with its secret, shown this once."""

    token: str


class TokensPublic(BaseModel):
    data: list[TokenPublic]
    count: int


# --- objective, scalability, audit -----------------------------------------------------


class ObjectivePublic(BaseModel):
    """The optimizer's objective settings.

    Attributes:
        throughput, speedup, node_seconds, fairness, priority, churn, early_finish: the
            optimizer's ``Weights`` (``node_seconds``, the default: goodput counted in
            dedicated node-seconds of work, the measure of ``harvest``; ``speedup``: divided
            by one-node rates instead; both false: raw samples; ``early_finish``: beta of
            the objective's early-finish term, in [0, 1]).
        horizon_s: forecast horizon, seconds, or ``"auto"`` (expected remaining idle time
            of the pool, from the idle intervals observed so far).
        backend: MILP backend, ``cbc`` or ``cpsat``.
        time_limit_s: solver wall-clock limit per solve, seconds (default 0.2: at the
            limit the best incumbent is applied, never worse than the greedy answer).
        relative_gap: a solve stops once its answer is proven within this fraction of the
            optimal objective, in [0, 1) (default 1e-3; 0 asks for a proof of optimality).
    """

    throughput: float
    speedup: bool
    node_seconds: bool
    fairness: float
    priority: float
    churn: float
    early_finish: float
    horizon_s: float | Literal["auto"]
    backend: Backend
    time_limit_s: float
    relative_gap: float


def _horizon_bounds(schema: dict[str, Any]) -> None:
    """Show the rule of :meth:`ObjectiveUpdate._positive_horizon` on the number branch."""
    for branch in schema.get("anyOf", []):
        if branch.get("type") == "number":
            branch.update(exclusiveMinimum=0, maximum=1e7)


class ObjectiveUpdate(Request):
    """A change of the objective; fields left out keep their value, except that turning one
    of ``speedup`` and ``node_seconds`` on turns the other off (they are two normalisations
    of the same term); both ``true`` in one request is a 422. ``horizon_s`` is in (0, 1e7]
    seconds or ``"auto"``."""

    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "properties": {"speedup": {"const": True}, "node_seconds": {"const": True}},
                "required": ["speedup", "node_seconds"],
            }
        }
    )

    throughput: float | None = Field(default=None, ge=0, le=1e6)
    speedup: bool | None = None
    node_seconds: bool | None = None
    fairness: float | None = Field(default=None, ge=0, le=1e6)
    priority: float | None = Field(default=None, ge=0, le=100)
    churn: float | None = Field(default=None, ge=0, le=1e12)
    early_finish: float | None = Field(default=None, ge=0, le=1)
    horizon_s: float | Literal["auto"] | None = Field(
        default=None, json_schema_extra=_horizon_bounds
    )
    backend: Backend | None = None
    time_limit_s: float | None = Field(default=None, gt=0, le=3600)
    relative_gap: float | None = Field(default=None, ge=0, lt=1)

    @model_validator(mode="after")
    def _positive_horizon(self) -> "ObjectiveUpdate":
        if isinstance(self.horizon_s, float) and not 0 < self.horizon_s <= 1e7:
            raise ValueError(f"horizon_s must be in (0, 1e7] or 'auto', got {self.horizon_s}")
        if self.speedup and self.node_seconds:
            raise ValueError("speedup and node_seconds may not both be true")
        return self

    def changes(self) -> dict[str, Any]:
        """The fields given, plus the normalisation this one turns off."""
        given = self.model_dump(exclude_none=True)
        if self.speedup and self.node_seconds is None:
            given["node_seconds"] = False
        if self.node_seconds and self.speedup is None:
            given["speedup"] = False
        return given


class ScalabilityPublic(BaseModel):
    """The loaded scalability table: models, row count and where it came from."""

    models: list[str]
    rows: int
    source: str


class AuditPublic(BaseModel):
    """An admin change (``objective.update``, ``scalability.update``, ``token.create``,
    ``token.revoke``) or a refused request of a known token (``request.refused``: revoked,
    expired or wrong role; at most one entry per token per 10 s, counting the ones between).

    Attributes:
        actor: the name of the token that acted, or ``command line``.
        token_id: ``t-<id>`` of that token; null for the command line.
    """

    id: int
    at: datetime
    actor: str
    token_id: str | None
    action: str
    old: dict[str, Any] | None
    new: dict[str, Any]


class AuditsPublic(BaseModel):
    data: list[AuditPublic]
    count: int


class StatsPublic(BaseModel):
    """What the service did with the idle nodes from ``since`` to ``until`` (issue 11's
    measures, named as in the replay's ``report.json``).

    Attributes:
        since: start of the window (the first record when not asked for).
        until: end of the window (now).
        idle_node_hours: node-hours the scheduler reported nodes idle in the window.
        harvested_node_hours: node-hours jobs held nodes in the window.
        utilization: harvested / idle node-hours; None with no idle time.
        harvest: Σ over jobs of samples trained in the window ÷ the job's best per-node
            samples/s (its model's table rows, else its own measured rates), ÷ idle
            node-seconds: the share of idle node time turned into dedicated-node work. Jobs
            with neither a table row nor a measured rate are left out. None with no idle time.
        jobs_finished: jobs that finished in the window.
        jct_mean_s: mean job completion time (submission to finish) of those, seconds.
        jct_p50_s: its median, seconds.
        jct_p95_s: its 95th percentile (nearest rank), seconds.
        wait_mean_s: mean time from submission to first node of the jobs that got their first
            node in the window, seconds.
    """

    since: datetime | None
    until: datetime
    idle_node_hours: float
    harvested_node_hours: float
    utilization: float | None
    harvest: float | None
    jobs_finished: int
    jct_mean_s: float | None
    jct_p50_s: float | None
    jct_p95_s: float | None
    wait_mean_s: float | None


class SolveJobPublic(BaseModel):
    """One job's share in a solve.

    Attributes:
        node_count: nodes the solve gave it.
        spb_depth: SPB depth it was to run at.
        samples_per_s: expected throughput at that count and depth, samples/s.
        rescaled: whether the solve changed its node count or depth.
    """

    job_id: str
    node_count: int
    spb_depth: int
    samples_per_s: float
    rescaled: bool


class SolvePublic(BaseModel):
    """One solve of the control loop that was applied.

    Attributes:
        id: its number, increasing.
        at: when its allocation was written.
        status: ``optimal``, ``feasible`` or ``fallback``.
        backend: what decided (``cbc``, ``cpsat``, ``greedy``, ...).
        objective: objective value of the allocation.
        solve_time_s: wall-clock seconds of the solve, model building included.
        horizon_s: forecast horizon it used, seconds.
        rescales: jobs whose node count or SPB depth it changed.
        jobs: each job's share.
    """

    id: int
    at: datetime
    status: str
    backend: str
    objective: float
    solve_time_s: float
    horizon_s: float
    rescales: int
    jobs: list[SolveJobPublic]


class SolvesPublic(BaseModel):
    """Solves, newest first; ``count`` is the total before ``limit``/``offset``."""

    data: list[SolvePublic]
    count: int


class NodeHistoryPoint(BaseModel):
    """The nodes at one instant (the values hold until the next point).

    Attributes:
        at: the instant.
        idle: nodes the scheduler had reported idle.
        busy: nodes known then that were not idle (the scheduler's, reclaimed included).
        allocated: nodes held per job id (jobs holding none are left out).
        agents_alive: agents alive at the newest lease sweep before ``at``; None before this
            service process's first sweep (the count is kept in memory, see
            :class:`NodeHistoryPublic`).
    """

    at: datetime
    idle: int
    busy: int
    allocated: dict[str, int]
    agents_alive: int | None


class ReclaimPublic(BaseModel):
    """A node the scheduler took back from the job holding it (a ``busy`` event)."""

    at: datetime
    node: str
    job_id: str


class NodeHistoryPublic(BaseModel):
    """The nodes over time from ``since`` to ``until``.

    Idle and busy come from the scheduler's node events (idle intervals), allocations from
    the jobs' rescale records: a point at each change, or, when there are more changes than
    ``points``, at ``points`` evenly spaced instants. Alive agents are counted at each lease
    sweep of this process and kept in memory (at most the newest
    :data:`interstice.api.history.AGENT_COUNTS_KEPT` changes), from ``agents_alive_since``.

    Attributes:
        since: start of the window: the one asked for, or the first record when later.
        until: end of the window (now).
        data: the points, oldest first.
        count: number of points.
        reclaims: reclaims in the window, oldest first (at most the newest 1,000).
        agents_alive_since: when this process began counting alive agents.
    """

    since: datetime
    until: datetime
    data: list[NodeHistoryPoint]
    count: int
    reclaims: list[ReclaimPublic]
    agents_alive_since: datetime


class Health(BaseModel):
    status: Literal["ok"]
    leader: bool | None = Field(
        default=None,
        description="Whether this replica leads (runs the solver); on /readyz only",
    )
