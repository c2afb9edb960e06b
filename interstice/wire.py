"""The facts the service and the node agents share: names, states, environment, files.

Both sides of the agent protocol (docs/reference/agent-protocol.md) and the workers they start read
these constants and path functions from here, so no name is spelled twice. This module
imports neither torch nor fastapi: the service, the agent process and plain scripts all
import it.

Job directory (``<checkpoint_root>/<job_id>``, on the shared filesystem, mode 0700)::

    checkpoints/                       elastic.State.save(); latest wins
    final/model.pt                     elastic.save_final(model), rank 0
    metrics.jsonl                      one JSON object per accepted elastic.report(), rank 0
    logs/<rendezvous_id>/rank-<R>.log  stdout+stderr of global rank R in that generation

Run directory (``<agent workdir>/<job_id>``, node-local)::

    stop                               created by the agent: checkpoint, then exit
    progress-<local_rank>.json         written atomically by elastic.report(), every rank
"""

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

# -- names ------------------------------------------------------------------------------

Parallelism = Literal["dp", "spb", "splitbrain"]
PARALLELISMS: tuple[str, ...] = get_args(Parallelism)

TokenRole = Literal["scheduler", "agent", "user", "admin"]
TOKEN_ROLES: tuple[str, ...] = get_args(TokenRole)
MUNGE_SCHEME = "MUNGE"
"""The ``Authorization`` scheme of a MUNGE credential (``Authorization: MUNGE <credential>``),
which user requests carry instead of a bearer token."""
ENV_MUNGE_SOCKET = "INTERSTICE_MUNGE_SOCKET"
"""munged's socket when it is not munged's default, for the client and the service alike."""

WORKER_ROLE = "trainer"  # torch elastic's role name of every worker of a job

DistBackend = Literal["gloo", "nccl"]
DIST_BACKENDS: tuple[str, ...] = get_args(DistBackend)

CommandKind = Literal["start", "rescale", "stop"]
COMMAND_KINDS: tuple[str, ...] = get_args(CommandKind)

JobState = Literal["queued", "running", "finished", "cancelled", "failed"]
JOB_STATES: tuple[str, ...] = get_args(JobState)

# What a heartbeat says of the node's current generation of a job.
HeartbeatJobState = Literal["running", "finished", "failed"]
HEARTBEAT_JOB_STATES: tuple[str, ...] = get_args(HeartbeatJobState)

# What a progress file says of the rank that wrote it.
ProgressState = Literal["running", "stopped", "finished"]

DEFAULT_ENTRYPOINT = "interstice.agents.worker"  # the built-in worker's module

PROTOCOL_VERSION = 4  # docs/reference/agent-protocol.md; the service still answers version 2 agents

HEARTBEAT_METRICS_MAX = 32  # keys of a heartbeat's ``metrics``
HEARTBEAT_ERROR_MAX_CHARS = 4000  # length of a heartbeat's ``error``

# -- what a request may hold (the service's schemas check it, a client can before sending) --

EARLIEST_TIME = datetime(2000, 1, 1, tzinfo=UTC)
"""The earliest time a request may name."""
LATEST_TIME = datetime(2101, 1, 1, tzinfo=UTC)
"""The first time past the latest a request may name (years 2000..2100 in UTC)."""
EVENT_ID_MAX_CHARS = 200  # length of a node event's ``event_id``

# -- environment of a job's processes (set by the agent's launcher on every node) ----------

ENV_JOB_ID = "INTERSTICE_JOB_ID"
ENV_JOB_DIR = "INTERSTICE_JOB_DIR"
ENV_CHECKPOINT_DIR = "INTERSTICE_CHECKPOINT_DIR"
ENV_RUN_DIR = "INTERSTICE_RUN_DIR"
ENV_TOTAL_SAMPLES = "INTERSTICE_TOTAL_SAMPLES"
ENV_GLOBAL_BATCH_SIZE = "INTERSTICE_GLOBAL_BATCH_SIZE"
ENV_NODE = "INTERSTICE_NODE"
JOB_ENV_VARS: tuple[str, ...] = (
    ENV_JOB_ID,
    ENV_JOB_DIR,
    ENV_CHECKPOINT_DIR,
    ENV_RUN_DIR,
    ENV_TOTAL_SAMPLES,
    ENV_GLOBAL_BATCH_SIZE,
    ENV_NODE,
)

# Seconds from elastic.init() to a worker's stack dump when it has not stepped yet
# (interstice.elastic.watchdog); read by the worker, not set by the agent.
ENV_FIRST_STEP_DUMP_S = "INTERSTICE_FIRST_STEP_DUMP_S"

# The agent's credential: never in a job's environment.
ENV_AGENT_TOKEN = "INTERSTICE_AGENT_TOKEN"

# The Slurm placeholder job of the agent, in the agent's and its workers' environment: the
# Epilog kills the processes that carry it (agents/slurm/hooks.py).
ENV_SLURM_JOB_MARKER = "INTERSTICE_SLURM_JOB_ID"

# -- command placeholders ---------------------------------------------------------------

PLACEHOLDERS: tuple[str, ...] = (
    "job_id",
    "job_dir",
    "checkpoint_dir",
    "total_samples",
    "global_batch_size",
)


def expand_placeholders(argv: Sequence[str], values: Mapping[str, object]) -> list[str]:
    """Replace ``{name}`` by ``values[name]`` wherever it appears in an argument.

    Plain ``str.replace``: other braces are left alone, so a Python format string or a
    JSON argument passes through untouched.

    Args:
        argv: the job's command.
        values: a value for each name of :data:`PLACEHOLDERS` (others are ignored).

    Returns:
        The expanded argv, as long as ``argv``.

    Example:
        >>> expand_placeholders(["train.py", "--out={job_dir}/x"], {"job_dir": "/c/j-1"})
        ['train.py', '--out=/c/j-1/x']
    """
    expanded = []
    for argument in argv:
        for name in PLACEHOLDERS:
            if name in values:
                argument = argument.replace("{" + name + "}", str(values[name]))
        expanded.append(argument)
    return expanded


# -- paged lists ------------------------------------------------------------------------


def all_pages(fetch: Callable[[str | None], Mapping[str, Any]]) -> list[Any]:
    """Every item of a paged list (``GET /v1/nodes``), following ``next_cursor``.

    Args:
        fetch: answers one page (``data`` and ``next_cursor``) given the cursor to send as
            ``?cursor=``, None for the first page.

    Returns:
        The ``data`` of every page, in order.

    Example:
        >>> pages = {None: {"data": [1, 2], "next_cursor": "b"}, "b": {"data": [3],
        ...          "next_cursor": None}}
        >>> all_pages(pages.__getitem__)
        [1, 2, 3]
    """
    items: list[Any] = []
    cursor = None
    while True:
        page = fetch(cursor)
        items += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


# -- job directory ----------------------------------------------------------------------

CHECKPOINTS_DIRNAME = "checkpoints"
FINAL_DIRNAME = "final"
FINAL_MODEL_FILE = "model.pt"
METRICS_FILE = "metrics.jsonl"
LOGS_DIRNAME = "logs"

_GENERATION = re.compile(r"-g(\d+)$")


def job_dir(root: str | Path, job_id: str) -> Path:
    """The job's directory: ``<root>/<job_id>`` (``root`` is the service's checkpoint_root)."""
    return Path(root) / job_id


def checkpoint_dir(job_dir: str | Path) -> Path:
    """Where ``elastic.State`` saves: ``<job_dir>/checkpoints``."""
    return Path(job_dir) / CHECKPOINTS_DIRNAME


def final_dir(job_dir: str | Path) -> Path:
    """Where the trained model goes: ``<job_dir>/final``."""
    return Path(job_dir) / FINAL_DIRNAME


def metrics_path(job_dir: str | Path) -> Path:
    """The job's reported metrics, one JSON object a line: ``<job_dir>/metrics.jsonl``."""
    return Path(job_dir) / METRICS_FILE


def logs_dir(job_dir: str | Path) -> Path:
    """The per-generation rank logs: ``<job_dir>/logs``."""
    return Path(job_dir) / LOGS_DIRNAME


def rank_log_path(job_dir: str | Path, rendezvous_id: str, rank: int) -> Path:
    """stdout+stderr of global ``rank`` in one generation:
    ``<job_dir>/logs/<rendezvous_id>/rank-<rank>.log``."""
    return logs_dir(job_dir) / rendezvous_id / f"rank-{rank}.log"


def generation_of(rendezvous_id: str) -> int | None:
    """The generation number of a rendezvous id ``<job_id>-g<N>``, None if it has none."""
    match = _GENERATION.search(rendezvous_id)
    return int(match.group(1)) if match else None


def rank_log_files(job_dir: str | Path, rank: int) -> list[Path]:
    """The existing log files of global ``rank``, oldest generation first.

    Generations are ordered by the number after ``-g`` in their rendezvous id (numerically:
    ``g10`` after ``g9``); a folder without one comes first, by name.
    """
    root = logs_dir(job_dir)
    if not root.is_dir():
        return []
    found = [
        folder / f"rank-{rank}.log"
        for folder in root.iterdir()
        if (folder / f"rank-{rank}.log").is_file()
    ]
    return sorted(found, key=lambda path: (generation_of(path.parent.name) or -1, path.parent.name))


# -- run directory (node-local) ----------------------------------------------------------

STOP_FILE = "stop"
PROGRESS_GLOB = "progress-*.json"


def run_dir(workdir: str | Path, job_id: str) -> Path:
    """The job's node-local run directory: ``<agent workdir>/<job_id>``."""
    return Path(workdir) / job_id


def stop_path(run_dir: str | Path) -> Path:
    """The stop file the agent creates: ``<run_dir>/stop``."""
    return Path(run_dir) / STOP_FILE


def progress_path(run_dir: str | Path, local_rank: int) -> Path:
    """Where the worker of ``local_rank`` writes its progress: ``progress-<local_rank>.json``."""
    return Path(run_dir) / f"progress-{local_rank}.json"
