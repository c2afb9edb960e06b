"""Jobs: the submission, a job as users see it, its metrics series and rank logs."""

import re
from datetime import datetime
from typing import Any, Literal

from interstice.api.schemas.agents import JobOwner
from interstice.api.schemas.common import Request, integer, integer_or_auto, not_together
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from interstice.wire import ENV_FIRST_STEP_DUMP_S, CommandKind, JobState, Parallelism

RescaleReason = Literal[
    "allocation",
    "reclaim",
    "agent_lost",
    "agent_left",
    "command_failed",
    "stalled",
    "finished",
    "cancelled",
    "failed",
]


RESERVED_ENV = re.compile(
    rf"^(?!{ENV_FIRST_STEP_DUMP_S}$)(INTERSTICE_.*|TORCHELASTIC_.*|RANK|LOCAL_RANK"
    r"|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|GROUP_WORLD_SIZE|ROLE_NAME|ROLE_RANK"
    r"|ROLE_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TORCH_NCCL_ASYNC_ERROR_HANDLING)$"
)
"""Names a job's ``env`` may not set: the launcher's (torchrun's and interstice's). The one
``INTERSTICE_*`` name a job may set is ``INTERSTICE_FIRST_STEP_DUMP_S``, which the workers
read (interstice.elastic.watchdog)."""
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
            (``INTERSTICE_*``, ``TORCHELASTIC_*``, ``RANK``, ``WORLD_SIZE``, ...) are refused,
            except ``INTERSTICE_FIRST_STEP_DUMP_S`` (seconds to a worker's stack dump when it
            has not stepped; interstice.elastic.watchdog).
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
    nproc_per_node: integer_or_auto(1, 1024) = "auto"

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

    __get_pydantic_json_schema__ = not_together(
        entrypoint={"type": "string"}, command={"type": "array"}
    )  # the rule of _consistent that JSON Schema can state: not both

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
        cost_s: measured rescale cost, seconds: from the commands (``at``) to the time the
            generation's workers wrote their first report beyond their first step (the
            workers' clock, as in the job's ``metrics.jsonl``); None until measured (or when
            it ran on no node).
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
        job_dir: ``<checkpoint_root>/<job_id>`` on the shared filesystem (mode 0700;
            ``<checkpoint_root>/<owner>/<job_id>`` in multi-user mode, made by the owner's
            processes): checkpoints, final model, logs and metrics of the job.
        checkpoint_dir: ``<job_dir>/checkpoints``.
        error: why the job failed (its workers' or a node's report), else None.
        rescales: its generations, oldest first, with their measured costs.
        errors: commands agents acknowledged with ``ok: false``.
        owner: the Unix account the job runs as (``name``, ``uid``): the submitter's MUNGE
            identity or its token's account; null in single-user mode (the agent's account).
        user: who the job belongs to: its owner's account name, else (single-user mode) the
            name of the token that submitted it; the ``user`` of ``GET /v1/usage`` and of
            the job list's ``user`` filter.
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
    owner: JobOwner | None
    user: str


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
