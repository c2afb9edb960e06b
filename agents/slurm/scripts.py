"""Render the files a site installs for interstice: the placeholder sbatch script and the
slurm.conf fragment of the scavenger partition.

The templates are package data beside this module in ``agents/slurm/`` (``placeholder.sbatch``,
``slurm.conf.fragment``, ``${name}`` placeholders, :class:`string.Template`); so are the Prolog
and Epilog scripts the fragment points at. tests/agents/golden/ holds rendered copies.
"""

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from string import Template

PLACEHOLDER_JOB_NAME = "interstice-placeholder"
"""The job name of placeholder jobs; ``interstice slurm fill`` counts its jobs by it."""


def slurm_dir() -> Path:
    """The installed folder of the Slurm scripts and templates (``agents/slurm``)."""
    return Path(str(files("interstice.agents.slurm")))


@dataclass(frozen=True)
class PlaceholderJob:
    """One placeholder job of the scavenger partition.

    Attributes:
        partition: the scavenger partition.
        time_limit: Slurm ``--time``, e.g. ``"1-00:00:00"``; at its end the job ends and the
            Epilog releases the node like a preemption.
        output: Slurm ``--output`` path of the batch script's output.
        job_name: the job name by which placeholders are counted.
    """

    partition: str = "scavenger"
    time_limit: str = "1-00:00:00"
    output: str = "/dev/null"
    job_name: str = PLACEHOLDER_JOB_NAME


@dataclass(frozen=True)
class ScavengerPartition:
    """The slurm.conf settings of the scavenger partition.

    Attributes:
        partition: the partition's name.
        nodes: the nodes it spans, a Slurm node list or ``ALL``.
        grace_s: Slurm ``GraceTime`` in whole seconds: how long a preempted placeholder may
            hold its node; the agent's ``grace_s`` (agent.conf) should equal it.
        priority_tier: the partition's ``PriorityTier``; every other partition needs a
            higher one.
        max_time: the partition's ``MaxTime``.
        prolog: path of prolog.sh as installed on the compute nodes.
        epilog: path of epilog.sh as installed on the compute nodes.
    """

    prolog: Path
    epilog: Path
    partition: str = "scavenger"
    nodes: str = "ALL"
    grace_s: int = 30
    priority_tier: int = 0
    max_time: str = "INFINITE"


def render_sbatch(job: PlaceholderJob) -> str:
    """The placeholder job's batch script.

    Args:
        job: the placeholder job's settings.

    Returns:
        The script text, for ``sbatch`` on standard input.

    Raises:
        ValueError: a setting holds a newline (it would inject sbatch options).
    """
    return _render("placeholder.sbatch", vars(job))


def render_conf_fragment(partition: ScavengerPartition) -> str:
    """The slurm.conf lines of the scavenger partition, preemption, Prolog and Epilog.

    Args:
        partition: the partition's settings.

    Returns:
        The fragment's text, to append to slurm.conf.

    Raises:
        ValueError: a setting holds whitespace where slurm.conf takes one word, or
            ``grace_s`` or ``priority_tier`` is negative.
    """
    if partition.grace_s < 0 or partition.priority_tier < 0:
        raise ValueError("grace_s and priority_tier must be >= 0")
    values = {key: str(value) for key, value in vars(partition).items()}
    for key, value in values.items():
        if not value or any(char.isspace() for char in value):
            raise ValueError(f"{key}={value!r} must be one word for slurm.conf")
    return _render("slurm.conf.fragment", values)


def _render(template_name: str, values: dict[str, object]) -> str:
    """Substitute ``values`` into the named template of :func:`slurm_dir`."""
    for key, value in values.items():
        if "\n" in str(value):
            raise ValueError(f"{key} must not hold a newline")
    template = Template((slurm_dir() / template_name).read_text())
    return template.substitute({key: str(value) for key, value in values.items()})
