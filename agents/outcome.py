"""How a generation ended, judged from torch elastic, never from a file the workers write:
its launcher's exit code and the result file the launcher writes
(:mod:`interstice.agents.launcher_process`), with the failing rank's last log lines.

The result file and the rank logs are the job's files (written as its owner): they are read
with :func:`interstice.agents.rundir.read_job_file`, so a job cannot make the agent put
another account's file into its error.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from interstice.agents import rundir
from interstice.agents.generation import Generation
from interstice.agents.launcher_process import (
    EXIT_BAD_JOB,
    EXIT_WORKERS_FAILED,
    LAUNCHER_EXITS,
)

from interstice import wire

LOG_TAIL_LINES = 20


@dataclass(frozen=True)
class Outcome:
    """How a generation ended, judged from its launcher's exit code.

    Attributes:
        job_state: ``finished`` (every worker exited 0, no stop requested), ``failed``
            (a worker exited non-zero or the job could not start), or None (a stop we
            requested, a failed rendezvous: the node's fault or a peer's preemption, or a
            launcher that could not start; the job goes on elsewhere).
        error: why, for ``failed`` or a node-side failure; None otherwise.
        node_fault: the launcher itself could not start: it exited with an error before its
            own report (e.g. torch missing under the agent's Python). Nothing of the job ran,
            so the node is at fault: it is quarantined and the job placed elsewhere.
    """

    job_state: wire.HeartbeatJobState | None
    error: str | None = None
    node_fault: bool = False


def judge(generation: Generation) -> Outcome | None:
    """How ``generation`` ended, or None while its launcher runs.

    Args:
        generation: a generation.

    Returns:
        See :class:`Outcome`. A generation whose stop we requested ended by our doing.
    """
    returncode = generation.process.poll()
    if returncode is None:
        return None
    if generation.stop_requested:
        return Outcome(None)
    result = rundir.read_json(generation.result_path, generation.uid) or {}
    if returncode == 0:
        return Outcome("finished")
    if returncode == EXIT_WORKERS_FAILED and "rank" in result:
        rank = int(result["rank"])
        rank_log = wire.rank_log_path(generation.job_dir, generation.rendezvous_id, rank)
        tail = log_tail(rank_log, generation.uid)
        reason = str(result.get("error") or f"rank {rank} failed")
        return Outcome("failed", clip(f"{reason}; last lines of rank {rank}'s log:\n{tail}"))
    if returncode == EXIT_BAD_JOB:
        return Outcome("failed", clip(str(result.get("error") or generation.log_tail())))
    if returncode not in LAUNCHER_EXITS and returncode > 0 and not result:
        # It exited with an error of no code of its own, before it could say why (every end
        # it knows writes the result): it could not start at all, e.g. torch missing under
        # this Python. The job's code never ran: the node is at fault, not the job.
        tail = log_tail(generation.log_path, os.geteuid())  # the agent's own file
        error = f"launch failed (exit {returncode}); last lines of its log:\n{tail}"
        return Outcome(None, clip(error), node_fault=True)
    return Outcome(None, f"launch failed (exit {returncode}): {generation.log_tail()}")


def log_tail(path: Path, uid: int, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file of ``uid`` ('' when it cannot be read, see
    :func:`interstice.agents.rundir.read_job_file`)."""
    content = rundir.read_job_file(path, uid, tail_bytes=16384)
    if content is None:
        return ""
    return "\n".join(content.decode(errors="replace").splitlines()[-lines:])


def clip(text: str) -> str:
    """``text`` within the heartbeat's error limit, keeping its head and its end."""
    limit = wire.HEARTBEAT_ERROR_MAX_CHARS
    if len(text) <= limit:
        return text
    return text[: limit // 4] + "\n…\n" + text[-(limit - limit // 4 - 3) :]
