"""Keep one placeholder job per usable node of the scavenger partition queued or running.

Each pass asks Slurm for the partition's usable nodes (``sinfo``, node lists expanded by
:func:`~interstice.agents.slurm.env.node_names`, which leaves out a line it cannot read with a
note) and for the placeholder jobs pending or
running there (``squeue``, by job name), then submits the difference with ``sbatch``. So a
node that turns idle finds a placeholder waiting, and one preempted (PreemptMode=CANCEL) is
replaced at the next pass.
"""

import subprocess
from dataclasses import dataclass

from interstice.agents.slurm.env import node_names
from interstice.agents.slurm.scripts import PlaceholderJob, render_sbatch

SLURM_COMMAND_TIMEOUT_S = 30.0
"""Bound on one sinfo, squeue or sbatch call, in seconds."""

USABLE_NODE_STATES = "idle,mixed,allocated,completing"
"""``sinfo -t`` states of nodes a placeholder may get (not down, drained or reserved)."""

QUEUED_JOB_STATES = "pending,running,configuring"
"""``squeue -t`` states of placeholders that still hold or wait for a node."""


class SlurmCommandError(RuntimeError):
    """A Slurm command failed, timed out, or is not installed."""


@dataclass(frozen=True)
class FillPass:
    """The outcome of one pass of :func:`fill_once`.

    Attributes:
        nodes: usable nodes in the partition.
        queued: placeholder jobs pending or running before the pass.
        submitted: ids of the jobs submitted in the pass.
        dropped: notes of the sinfo lines left out (not node lists).
    """

    nodes: int
    queued: int
    submitted: tuple[str, ...]
    dropped: tuple[str, ...] = ()


def placeholders_missing(nodes: int, queued: int, max_jobs: int | None = None) -> int:
    """How many placeholders to submit so that every usable node has one.

    Args:
        nodes: usable nodes in the partition.
        queued: placeholder jobs pending or running.
        max_jobs: a cap on placeholders queued or running, None for none.

    Returns:
        ``min(nodes, max_jobs) - queued``, at least 0.
    """
    target = nodes if max_jobs is None else min(nodes, max_jobs)
    return max(0, target - queued)


def run_slurm(
    arguments: list[str], stdin: str | None = None, env: dict[str, str] | None = None
) -> str:
    """Run a Slurm client command and return its standard output.

    Args:
        arguments: the command line, e.g. ``["squeue", "-h"]``.
        stdin: text for standard input (sbatch reads the script there).
        env: the command's environment; None: this process's.

    Returns:
        The standard output.

    Raises:
        SlurmCommandError: the command is missing, ran past
            :data:`SLURM_COMMAND_TIMEOUT_S`, or exited non-zero (with its stderr).
    """
    try:
        result = subprocess.run(
            arguments,
            input=stdin,
            env=env,
            capture_output=True,
            text=True,
            timeout=SLURM_COMMAND_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError as error:
        raise SlurmCommandError(f"{arguments[0]} not found: is Slurm installed?") from error
    except subprocess.TimeoutExpired as error:
        raise SlurmCommandError(f"{arguments[0]} ran past {SLURM_COMMAND_TIMEOUT_S:g} s") from error
    if result.returncode != 0:
        message = " ".join(result.stderr.split()) or f"exit code {result.returncode}"
        raise SlurmCommandError(f"{' '.join(arguments[:2])} failed: {message}")
    return result.stdout


def usable_nodes(partition: str, dropped: list[str]) -> list[str]:
    """The partition's nodes in a usable state, from ``sinfo``; a line that is not a node
    list is left out with a note in ``dropped``.

    Raises:
        SlurmCommandError: sinfo failed.
    """
    output = run_slurm(["sinfo", "-h", "-p", partition, "-t", USABLE_NODE_STATES, "-o", "%N"])
    return sorted(node_names(output, "sinfo", dropped))


def queued_placeholders(job: PlaceholderJob) -> list[str]:
    """Ids of the placeholder jobs pending or running in ``job.partition``, from ``squeue``.

    Raises:
        SlurmCommandError: squeue failed.
    """
    output = run_slurm(
        ["squeue", "-h", "-p", job.partition, "-n", job.job_name, "-t", QUEUED_JOB_STATES]
        + ["-o", "%i"]
    )
    return output.split()


def submit_placeholder(job: PlaceholderJob) -> str:
    """Submit one placeholder job; returns its Slurm job id.

    Raises:
        SlurmCommandError: sbatch failed (e.g. the partition does not exist).
    """
    output = run_slurm(["sbatch", "--parsable"], stdin=render_sbatch(job))
    return output.strip().split(";")[0]


def fill_once(job: PlaceholderJob, max_jobs: int | None = None) -> FillPass:
    """One pass: submit the placeholders the partition's usable nodes lack.

    Args:
        job: the placeholder job to submit.
        max_jobs: a cap on placeholders queued or running, None for one per usable node.

    Returns:
        What the pass saw and submitted, and the notes of the sinfo lines left out.

    Raises:
        SlurmCommandError: a Slurm command failed.
    """
    dropped: list[str] = []
    nodes = usable_nodes(job.partition, dropped)
    queued = queued_placeholders(job)
    missing = placeholders_missing(len(nodes), len(queued), max_jobs)
    submitted = tuple(submit_placeholder(job) for _ in range(missing))
    return FillPass(len(nodes), len(queued), submitted, tuple(dropped))
