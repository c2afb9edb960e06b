"""The agent's record of one generation running on this node (one rendezvous, one world size:
the launcher process running it), and what torch elastic shows of its workers.

Joining is judged by torch elastic itself, never by a file the workers write: the workers
joined once the launcher has live worker processes (torch starts them only after the
rendezvous completed) or has exited (:func:`joined`).
"""

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from interstice.agents.launcher_process import SPARE_READY
from interstice.agents.owner import Account, file_gid, file_uid
from interstice.agents.protocol import Command

MULTIPROCESSING_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


@dataclass
class Generation:
    """This node's part of one rendezvous of a job: the launcher process running it.

    Attributes:
        log_path: the launcher's own log (torch elastic's events, its errors).
        result_path: the file the launcher writes its end into
            (:mod:`interstice.agents.outcome`).
        stop_requested: the agent asked these workers to stop (stop file and SIGTERM): an
            exit after it is a stop, never the job's end or failure.
        signalled: pids of the workers sent SIGTERM already. A script's own handler may
            die on a second SIGTERM, before its checkpoint (``interstice.elastic``'s
            :class:`~interstice.elastic.signals.StopSignals` ignores it), so each worker
            gets one, however many times a stop is requested (a preemption taking over a
            rescale's stop requests it again).
        account: the account the launcher and its workers run as (the job's owner); None
            for the agent's own.
    """

    command: Command
    process: subprocess.Popen
    run_dir: Path
    job_dir: Path
    log_path: Path
    result_path: Path
    started_at: float = field(default_factory=time.monotonic)
    stop_requested: bool = False
    signalled: set[int] = field(default_factory=set)
    account: Account | None = None
    _warmed_up: bool = False

    @property
    def uid(self) -> int:
        """The uid that owns the files this generation's processes write."""
        return file_uid(self.account)

    @property
    def gid(self) -> int:
        """The primary group of the account this generation runs as."""
        return file_gid(self.account)

    @property
    def rendezvous_id(self) -> str:
        """The rendezvous (``<job_id>-g<generation>``) this launcher joined."""
        assert self.command.rendezvous_id is not None
        return self.command.rendezvous_id

    def warmed_up(self) -> bool:
        """Whether the launcher finished its warm-up (its log holds the ready line)."""
        if not self._warmed_up:
            try:
                with self.log_path.open("rb") as stream:
                    self._warmed_up = SPARE_READY.encode() in stream.read(65536)
            except OSError:
                return False
        return self._warmed_up

    def log_tail(self, chars: int = 600) -> str:
        """The end of the launcher's log, for an error message."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return " ".join(text[-chars:].split())


def worker_processes(generation: Generation) -> list[psutil.Process]:
    """The live workers of ``generation``'s launcher.

    A worker is a child of the launcher that is not one of its multiprocessing helpers
    (a binary worker), or a child of its fork server (a function worker). torch starts
    them only after the rendezvous completed. Until the launcher logged that its warm-up
    is over, the fork server's child is its warm-up probe, not a worker.
    """
    process = generation.process
    if process.poll() is not None or not generation.warmed_up():
        return []
    try:
        children = psutil.Process(process.pid).children()
    except psutil.Error:
        return []
    workers = []
    for child in children:
        try:
            command_line = " ".join(child.cmdline())
            if "multiprocessing.forkserver" in command_line:
                workers.extend(child.children())
            elif not any(helper in command_line for helper in MULTIPROCESSING_HELPERS):
                workers.append(child)
        except psutil.Error:
            continue  # exited meanwhile
    return [worker for worker in workers if alive(worker)]


def workers_alive(generation: Generation) -> bool:
    """Whether ``generation``'s launcher still has a live worker."""
    return bool(worker_processes(generation))


def joined(generation: Generation) -> bool:
    """Whether this node's workers of ``generation`` joined its rendezvous: the launcher has
    live workers (started only once the rendezvous completed) or has exited."""
    return generation.process.poll() is not None or workers_alive(generation)


def alive(process: psutil.Process) -> bool:
    """Whether ``process`` runs (a zombie does not)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
