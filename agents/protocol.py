"""The messages of the agent protocol (docs/reference/agent-protocol.md, version 2) as the agent
reads them.

A command that does not parse, or that asks for something this node cannot do, is a bad
command: the agent acknowledges it with ``ok: false`` and the error, and keeps running. When
the fault is in the job's own fields (``job.*``), the ack also says ``job_failed: true``: no
other node could run it either, so the service fails the job at once.

Version 1 bodies are still accepted: a job with ``batch_size`` (samples per worker) and no
``global_batch_size`` gets ``global_batch_size = batch_size × world_size``, and one without
``job_dir`` gets its ``checkpoint_dir`` (v1's per-job folder) as its job dir.
"""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from interstice import wire


class BadCommand(ValueError):
    """A command this agent refuses; its message is what the service records.

    Attributes:
        job_failed: the fault is the job's own (its command, its fields): no node could run
            it, so the service fails the job rather than retrying it elsewhere.
    """

    def __init__(self, message: str, job_failed: bool = False) -> None:
        super().__init__(message)
        self.job_failed = job_failed


class CommandOwner(BaseModel):
    """The Unix account a job runs as (``Command.job.owner``), as the service knows it.

    The agent looks ``name`` up on its node and runs the job only where it is the same
    ``uid`` (:func:`interstice.agents.owner.job_account`).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(min_length=1, description="the owner's Unix user name")
    uid: int = Field(ge=0, description="the owner's uid, as the service mapped it")


class CommandJob(BaseModel):
    """The job a ``start``/``rescale`` command runs (``Command.job``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str | None = None
    parallelism: wire.Parallelism = "dp"
    global_batch_size: int = Field(gt=0, description="samples per optimizer step, whole job")
    total_samples: int = Field(gt=0, description="the job ends once this many are trained")
    min_nodes: int = Field(ge=1)
    max_nodes: int = Field(ge=1)
    entrypoint: str | None = None
    command: list[str] | None = Field(default=None, description="argv run on every node")
    workdir: str | None = Field(default=None, description="the workers' cwd; default job_dir")
    env: dict[str, str] = Field(default_factory=dict, description="added to the workers' env")
    nproc_per_node: int | Literal["auto"] | None = Field(
        default=None, description="workers per node; auto: one per GPU, else 1; None: agent's"
    )
    job_dir: str
    checkpoint_dir: str
    owner: CommandOwner | None = Field(
        default=None, description="run as this account; None: as the agent's (single-user)"
    )

    @model_validator(mode="after")
    def _runnable(self) -> "CommandJob":
        """A command is a non-empty argv; without one the built-in worker needs a model."""
        if self.command is not None and (not self.command or not self.command[0]):
            raise ValueError("command: an empty argv")
        if self.command is None and self.runs_builtin_worker and not self.model:
            raise ValueError("model: the built-in worker needs a model (or give a command)")
        if isinstance(self.nproc_per_node, int) and self.nproc_per_node < 1:
            raise ValueError(f"nproc_per_node: {self.nproc_per_node} is below 1")
        return self

    @property
    def runs_builtin_worker(self) -> bool:
        """Whether this job runs interstice's built-in worker (no command, no own module)."""
        return self.command is None and self.entrypoint in (None, wire.DEFAULT_ENTRYPOINT)


class Command(BaseModel):
    """One command of ``GET /v1/agents/{agent_id}/commands``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    command_id: int
    kind: wire.CommandKind
    job_id: str
    world_size: int | None = None
    rendezvous_endpoint: str | None = None
    rendezvous_id: str | None = None
    spb_depth: int = 0
    deadline: datetime | None = None
    created_at: datetime | None = None
    job: CommandJob | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_v1(cls, payload: Any) -> Any:
        """Accept a version 1 job: ``batch_size`` per worker, no ``job_dir``."""
        if not isinstance(payload, dict) or not isinstance(payload.get("job"), dict):
            return payload
        job = dict(payload["job"])
        if "global_batch_size" not in job and "batch_size" in job:
            world_size = payload.get("world_size")
            if isinstance(job["batch_size"], int) and isinstance(world_size, int):
                job["global_batch_size"] = job["batch_size"] * world_size
        if "job_dir" not in job and "checkpoint_dir" in job:
            job["job_dir"] = job["checkpoint_dir"]
        return {**payload, "job": job}

    @model_validator(mode="after")
    def _launchable(self) -> "Command":
        """A start or rescale names the world size, the rendezvous and the job."""
        if self.kind == "stop":
            return self
        for name in ("world_size", "rendezvous_endpoint", "rendezvous_id", "job"):
            if getattr(self, name) is None:
                raise ValueError(f"a {self.kind} command needs {name}")
        assert self.job is not None and self.world_size is not None
        if not self.job.min_nodes <= self.world_size <= self.job.max_nodes:
            raise ValueError(
                f"world_size {self.world_size} is outside the job's "
                f"[min_nodes {self.job.min_nodes}, max_nodes {self.job.max_nodes}]"
            )
        if self.spb_depth < 0:
            raise ValueError(f"spb_depth {self.spb_depth} is negative")
        host, _, port = self.rendezvous_endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"rendezvous_endpoint {self.rendezvous_endpoint!r} is not host:port")
        return self


def parse_command(payload: dict) -> Command:
    """Validate one command of the service.

    Args:
        payload: the JSON object of one command (protocol version 2 or 1).

    Returns:
        The command.

    Raises:
        BadCommand: the command is malformed or its world size is outside the job's
            bounds; the message names the field, ``job_failed`` is set when every
            problem lies in the job's own fields.
    """
    try:
        return Command.model_validate(payload)
    except ValidationError as error:
        issues = error.errors()
        locations = [".".join(str(part) for part in issue["loc"]) for issue in issues]
        problems = "; ".join(
            f"{location or 'command'}: {issue['msg']}"
            for location, issue in zip(locations, issues, strict=True)
        )
        job_failed = all(location.split(".")[0] == "job" for location in locations)
        raise BadCommand(f"bad command: {problems}", job_failed=job_failed) from error
