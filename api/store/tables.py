"""SQLAlchemy tables of the service's durable state.

Every timestamp is stored as naive UTC and read back as an aware UTC ``datetime``
(:class:`UTCDateTime`), so SQLite and PostgreSQL behave alike.
"""

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    TypeDecorator,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime stored as naive UTC on every backend."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


def utcnow() -> datetime:
    """Now, aware UTC."""
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Declarative base; Alembic reads its metadata."""

    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON, list[Any]: JSON}


class Token(Base):
    """A bearer token: only its sha256 hash is stored. ``unix_name``/``unix_uid``: the Unix
    account a user token is bound to (None: unbound, single-user mode).

    A MUNGE principal (one row per uid that called with a MUNGE credential, so its jobs and
    idempotency keys have a principal as a token's do) stores ``munge:<uid>`` as its hash,
    which no token hashes to (a sha256 hex digest has no colon).
    """

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(20))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    unix_name: Mapped[str | None] = mapped_column(String(64))
    unix_uid: Mapped[int | None] = mapped_column(BigInteger)


class Job(Base):
    """An elastic training job; ``id`` shows as ``j-<id>``.

    ``samples_done`` is the largest cumulative sample count any node reported. ``last_step``
    and ``last_loss`` come from the newest heartbeat that advanced the step.
    ``generation_step`` is the current generation's first step (None before its first
    report): reports beyond it are rate observations and end the generation's rescale cost.
    ``last_progress_at``: when the job last progressed (a report whose step advanced
    ``last_step``, or its current generation's first step); the stall sweep's clock
    (:mod:`interstice.api.control.stalls`).
    ``owner_name``/``owner_uid``: the Unix account the job runs as (None: single-user mode,
    the agent's account); ``owner_token_id`` the token or MUNGE principal that submitted it.
    """

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_token_id: Mapped[int] = mapped_column(ForeignKey("tokens.id"), index=True)
    state: Mapped[str] = mapped_column(String(20), index=True)
    model: Mapped[str | None] = mapped_column(String(200))
    min_nodes: Mapped[int]
    max_nodes: Mapped[int]
    total_samples: Mapped[int] = mapped_column(BigInteger)
    samples_done: Mapped[float] = mapped_column(Float, default=0.0)
    priority: Mapped[float] = mapped_column(Float)
    parallelism: Mapped[str] = mapped_column(String(20))
    global_batch_size: Mapped[int]
    rescale_up_s: Mapped[float] = mapped_column(Float)
    rescale_down_s: Mapped[float] = mapped_column(Float)
    entrypoint: Mapped[str | None] = mapped_column(String(500))
    command: Mapped[list[Any] | None]
    workdir: Mapped[str | None] = mapped_column(Text)
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    nproc_per_node: Mapped[str] = mapped_column(String(10), default="auto")
    job_dir: Mapped[str] = mapped_column(Text)
    spb_depth: Mapped[int] = mapped_column(default=0)
    generation: Mapped[int] = mapped_column(default=0)
    failed_commands: Mapped[int] = mapped_column(default=0)
    submitted_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    last_loss: Mapped[float | None] = mapped_column(Float)
    generation_step: Mapped[int | None] = mapped_column(BigInteger)
    last_progress_at: Mapped[datetime | None]
    owner_name: Mapped[str | None] = mapped_column(String(64))
    owner_uid: Mapped[int | None] = mapped_column(BigInteger, index=True)

    @property
    def job_id(self) -> str:
        """Public id, ``j-<id>``."""
        return f"j-{self.id}"


class Node(Base):
    """A compute node as the scheduler reports it; ``holder_job_id`` is the job using it.

    ``event_at`` is the ``at`` of the newest scheduler event applied to it: an event older
    than that is recorded but changes nothing (None: no event yet, e.g. an agent's node).
    ``until`` is that event's: when the scheduler expects to need the node back (None:
    unknown). ``quarantined_at`` (None: not quarantined) and ``quarantine_reason``: since when
    and why no job is placed on it (:mod:`interstice.api.services.quarantine`).
    """

    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    state: Mapped[str] = mapped_column(String(10))
    since: Mapped[datetime]
    holder_job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), index=True)
    event_at: Mapped[datetime | None]
    until: Mapped[datetime | None]
    quarantined_at: Mapped[datetime | None]
    quarantine_reason: Mapped[str | None] = mapped_column(Text)


class IdleInterval(Base):
    """A finished idle interval of a node (idle event to busy event), for the auto horizon;
    ``forecast``: whether the node had an ``until`` when its busy event came, for the
    forecast coverage (None: recorded before that was kept)."""

    __tablename__ = "idle_intervals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(200))
    started_at: Mapped[datetime]
    length_s: Mapped[float] = mapped_column(Float)
    forecast: Mapped[bool | None]


class NodeEvent(Base):
    """A scheduler node event, kept so a retried ``event_id`` changes nothing and answers
    the same; ``superseded_by_at`` is the ``at`` of the newer event its node had already
    taken when it arrived (None: it was applied)."""

    __tablename__ = "node_events"

    event_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    node: Mapped[str] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(10))
    at: Mapped[datetime]
    grace_s: Mapped[float] = mapped_column(Float)
    until: Mapped[datetime | None]
    reclaimed_job_id: Mapped[int | None]
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
    superseded_by_at: Mapped[datetime | None]


class Agent(Base):
    """A node agent; ``id`` shows as ``a-<id>``. One agent per node."""

    __tablename__ = "agents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(200), unique=True)
    host: Mapped[str] = mapped_column(String(200))
    ports: Mapped[list[Any]]
    devices: Mapped[list[Any]]
    state: Mapped[str] = mapped_column(String(10), index=True)
    registered_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_heartbeat_at: Mapped[datetime | None]
    report: Mapped[dict[str, Any] | None]
    # it said at its newest registration that it runs jobs as their owners
    runs_as_owner: Mapped[bool] = mapped_column(default=False, server_default=false())

    @property
    def agent_id(self) -> str:
        """Public id, ``a-<id>``."""
        return f"a-{self.id}"


class Command(Base):
    """A command to one agent; pending until acknowledged."""

    __tablename__ = "commands"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    agent_id: Mapped[int] = mapped_column(ForeignKey("agents.id"), index=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    kind: Mapped[str] = mapped_column(String(10))
    world_size: Mapped[int]
    rendezvous_endpoint: Mapped[str] = mapped_column(String(300))
    rendezvous_id: Mapped[str] = mapped_column(String(100))
    spb_depth: Mapped[int]
    deadline: Mapped[datetime]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    acked_at: Mapped[datetime | None] = mapped_column(index=True)
    ok: Mapped[bool | None]
    error: Mapped[str | None] = mapped_column(Text)


class Rescale(Base):
    """One change of a job's node set or SPB depth: generation ``generation`` begins.

    ``cost_s`` is the measured rescale cost: from ``at`` (when the commands were written) to
    the time the generation's workers wrote their first report beyond their first step (their
    clock, the report's ``resumed_at``); None until then (and for a generation on no node).
    """

    __tablename__ = "rescales"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    from_nodes: Mapped[list[Any]]
    to_nodes: Mapped[list[Any]]
    from_spb_depth: Mapped[int]
    to_spb_depth: Mapped[int]
    reason: Mapped[str] = mapped_column(String(20))
    generation: Mapped[int | None]
    cost_s: Mapped[float | None] = mapped_column(Float)


class JobMetric(Base):
    """One heartbeat that advanced a job's step: the series of ``GET /v1/jobs/{id}/metrics``
    (the newest :data:`interstice.api.services.state.METRICS_KEPT` rows per job are kept)."""

    __tablename__ = "job_metrics"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    at: Mapped[datetime]
    step: Mapped[int] = mapped_column(BigInteger)
    samples: Mapped[float | None] = mapped_column(Float)
    loss: Mapped[float | None] = mapped_column(Float)
    samples_per_s: Mapped[float | None] = mapped_column(Float)
    world_size: Mapped[int | None]
    metrics: Mapped[dict[str, Any]]


class JobRate(Base):
    """Mean reported samples/s of a job at one (node count, SPB depth): what the control
    loop fits the job's scaling curve from. ``reports`` counts the reports averaged, capped
    at :data:`interstice.api.services.state.RATE_REPORTS_CAP` so that a changed rate still
    moves it."""

    __tablename__ = "job_rates"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    nodes: Mapped[int] = mapped_column(primary_key=True)
    spb_depth: Mapped[int] = mapped_column(primary_key=True)
    samples_per_s: Mapped[float] = mapped_column(Float)
    reports: Mapped[int]


class AllocationRecord(Base):
    """One applied solve of the control loop."""

    __tablename__ = "allocations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    status: Mapped[str] = mapped_column(String(20))
    backend: Mapped[str] = mapped_column(String(20))
    objective: Mapped[float] = mapped_column(Float)
    solve_time_s: Mapped[float] = mapped_column(Float)
    horizon_s: Mapped[float] = mapped_column(Float)
    jobs: Mapped[list[Any]]


class Config(Base):
    """Admin-set values by key: ``objective`` (JSON) and ``scalability`` (CSV text)."""

    __tablename__ = "config"

    key: Mapped[str] = mapped_column(String(50), primary_key=True)
    value: Mapped[dict[str, Any]]


class AuditEntry(Base):
    """An admin change or a refused request: who (name and token id), when, old and new
    value. ``token_id`` is None for the command line."""

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    actor: Mapped[str] = mapped_column(String(200))
    token_id: Mapped[int | None]
    action: Mapped[str] = mapped_column(String(50))
    old: Mapped[dict[str, Any] | None]
    new: Mapped[dict[str, Any]]


class IdempotencyKey(Base):
    """An ``Idempotency-Key`` of ``POST /v1/jobs``, per token: a retry with the same key and
    body answers ``job_id`` again (``request_sha256`` tells a different body apart)."""

    __tablename__ = "idempotency_keys"

    token_id: Mapped[int] = mapped_column(ForeignKey("tokens.id"), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    request_sha256: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
