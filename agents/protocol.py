"""The messages of the agent protocol (docs/agent-protocol.md) as the agent reads them.

A command that does not parse, or that asks for something this node cannot do, is a bad
command: the agent acknowledges it with ``ok: false`` and the error, and keeps running.
"""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DEFAULT_ENTRYPOINT = "interstice.agents.worker"


class BadCommand(ValueError):
    """A command this agent refuses; its message is what the service records."""


class JobSpec(BaseModel):
    """The job a ``start``/``rescale`` command runs (``Command.job``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str
    parallelism: Literal["dp", "spb", "splitbrain"] = "dp"
    batch_size: int = Field(gt=0, description="samples per worker per optimizer step")
    total_samples: int = Field(gt=0, description="the job ends once this many are trained")
    min_nodes: int = Field(ge=1)
    max_nodes: int = Field(ge=1)
    entrypoint: str | None = DEFAULT_ENTRYPOINT
    command: list[str] | None = Field(default=None, description="argv run instead of entrypoint")
    checkpoint_dir: str


class Command(BaseModel):
    """One command of ``GET /v1/agents/{agent_id}/commands``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    command_id: int
    kind: Literal["start", "rescale", "stop"]
    job_id: str
    world_size: int | None = None
    rendezvous_endpoint: str | None = None
    rendezvous_id: str | None = None
    spb_depth: int = 0
    deadline: datetime | None = None
    created_at: datetime | None = None
    job: JobSpec | None = None

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
        payload: the JSON object of one command.

    Returns:
        The command.

    Raises:
        BadCommand: the command is malformed or its world size is outside the job's
            bounds; the message names the field.
    """
    try:
        return Command.model_validate(payload)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in issue['loc']) or 'command'}: {issue['msg']}"
            for issue in error.errors()
        )
        raise BadCommand(f"bad command: {problems}") from error
