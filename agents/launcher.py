"""Launch and stop this node's workers of a job with PyTorch elastic.

Each generation of a job (one rendezvous, one world size) runs in one launcher process,
``python -m interstice.agents.launcher``, which calls torch's
:func:`torch.distributed.launcher.api.elastic_launch` (the launcher API behind
``torchrun``): a c10d rendezvous at the commanded endpoint with ``min_nodes = max_nodes =
world_size``, then ``nproc_per_node`` workers. torch supervises the workers; this module
starts the launcher, judges from torch elastic what became of it, asks it to stop, and kills
it past a deadline.

What a job runs on every node:

- its ``command``: an argv (a first element ending in ``.py`` runs under this Python, as
  torchrun does), with the placeholders of :data:`interstice.wire.PLACEHOLDERS` expanded,
  in ``workdir`` (default: the job dir), with the job's ``env`` added. A command that runs
  this Python on a script or module (:func:`python_main`) runs as a function forked from the
  launcher's fork server (:func:`run_python_main`), so it starts with torch, numpy and
  scikit-learn imported; any other command is executed as a program;
- or its ``entrypoint`` module (``python -m ENTRYPOINT``);
- or the built-in worker (``interstice.agents.worker``), run as a function forked from the
  launcher's fork server, so it inherits torch and the models already imported.

Joining and ending are judged by torch elastic itself, never by a file the workers write:
the workers joined once the launcher has live worker processes (torch starts them only after
the rendezvous completed) or has exited; the launcher's exit code says how the generation
ended (see :class:`Outcome`).

The workers' environment is built from a clean base: this process's environment without
any ``INTERSTICE_*`` variable (the agent's token among them) nor any value equal to one of
the agent's secrets, plus torch's ``RANK``/``WORLD_SIZE``/… and the job's variables
(:data:`interstice.wire.JOB_ENV_VARS`). stdout and stderr of global rank R go to
``wire.rank_log_path(job_dir, rendezvous_id, R)`` through torch's ``LogsSpecs``.

Why a pre-started ("spare") launcher: importing torch and torchvision takes 2-10 s (20-30 s
on a loaded 2-core machine, scikit-learn another 7 s there), most of a rescale's cost. The
agent keeps one launcher process started with torch imported and a multiprocessing fork
server holding torch, the models, the worker and :data:`PRELOAD_MODULES`, blocked on its stdin;
a start or rescale writes the generation's config to it (one JSON line), and the agent
starts the next spare once the new workers trained their first step (or 5 s after they
joined), so its imports do not slow their start. A fork server, not plain ``fork``: it is a
fresh single-threaded process that never touches CUDA, so its children may.

Exactly one node hosts the rendezvous' TCP store: torch's c10d backend guesses the host by
matching the endpoint's host name to this machine, which is ambiguous with several agents
on one machine, so the agent passes ``is_host`` explicitly: true on the node whose host and
port the endpoint names (docs/agent-protocol.md: the job's first node).
"""

import atexit
import errno
import json
import logging
import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil
from interstice.agents import rundir
from interstice.agents.protocol import BadCommand, Command

from interstice import files, wire

LAUNCHER_MODULE = "interstice.agents.launcher"
WORKER_MODULE = wire.DEFAULT_ENTRYPOINT
# Imported by the fork server besides the worker, for users' scripts: the heavy modules of
# the `train` extra (scikit-learn's datasets and model selection import SciPy: 7 s on a loaded
# 2-core machine, which a script forked from the server no longer pays). One not installed
# is skipped (multiprocessing's preload ignores an ImportError).
PRELOAD_MODULES = (WORKER_MODULE, "numpy", "sklearn.datasets", "sklearn.model_selection")
SPARE_READY = "interstice: spare launcher ready"  # the first line of a launcher's log
MULTIPROCESSING_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")
# A binary worker runs as `sh -c 'exec "$@" 2>&1' ...`: torch's LogsSpecs opens stdout and
# stderr as two files, so stderr joins stdout in the rank log here (exec: same pid).
MERGE_STDERR = ("/bin/sh", "-c", 'exec "$@" 2>&1', "interstice-worker")
LOG_TAIL_LINES = 20

# Exit codes of a launcher process (besides 0: every worker exited 0).
EXIT_WORKERS_FAILED = 3  # a worker exited non-zero: the job's fault
EXIT_BAD_JOB = 4  # the job cannot start here or anywhere (exec failed, unknown model)
EXIT_LAUNCH_FAILED = 5  # the rendezvous or the launcher failed: the node's fault
LAUNCHER_EXITS = frozenset({EXIT_WORKERS_FAILED, EXIT_BAD_JOB, EXIT_LAUNCH_FAILED})
"""The launcher's own exit codes: it ran (any other non-zero code: it could not start)."""

# errno of an exec that fails for a reason of the command itself.
EXEC_ERRNOS = frozenset({errno.E2BIG, errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR})

log = logging.getLogger("interstice.agent")


@dataclass
class Generation:
    """This node's part of one rendezvous of a job: the launcher process running it.

    Attributes:
        stop_requested: the agent asked these workers to stop (stop file and SIGTERM): an
            exit after it is a stop, never the job's end or failure.
        signalled: pids of the workers sent SIGTERM already. A script's own handler may
            die on a second SIGTERM, before its checkpoint (``interstice.elastic``'s
            :class:`~interstice.elastic.signals.StopSignals` ignores it), so each worker
            gets one, however many times a stop is requested (a preemption taking over a
            rescale's stop requests it again).
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
    _warmed_up: bool = False

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


@dataclass(frozen=True)
class Outcome:
    """How a generation ended, judged from its launcher's exit code.

    Attributes:
        job_state: ``finished`` (every worker exited 0, no stop requested), ``failed``
            (a worker exited non-zero, the job could not start, or the launcher itself could
            not: it exited with an error before its own report, e.g. torch missing under
            the agent's Python), or None (a stop we requested, or a failed rendezvous: the
            node's fault, or a peer's preemption; the job goes on elsewhere).
        error: why, for ``failed`` or a node-side failure; None otherwise.
    """

    job_state: wire.HeartbeatJobState | None
    error: str | None = None


class Launcher:
    """Starts generations of this node's workers and stops them.

    Args:
        workdir: the agent's folder; a job's run directory is ``workdir/<job_id>``.
        node: this node's name (``INTERSTICE_NODE`` of the workers).
        host: the address the workers and the rendezvous bind on this node.
        ports: this agent's rendezvous ports (decides ``is_host``).
        nproc_per_node: workers per node when the job does not say (1 on CPU).
        join_timeout_s: a rendezvous not complete after this long fails the launch.
        worker_args: extra arguments for the built-in worker (e.g. ``--checkpoint-every 20``).
        secrets: the agent's credentials: no worker environment variable holds one.
    """

    def __init__(
        self,
        workdir: Path,
        node: str,
        host: str,
        ports: list[int],
        nproc_per_node: int,
        join_timeout_s: float,
        worker_args: list[str],
        secrets: Sequence[str] = (),
    ) -> None:
        self.workdir = workdir
        self.node = node
        self.host = host
        self.ports = ports
        self.nproc_per_node = nproc_per_node
        self.join_timeout_s = join_timeout_s
        self.worker_args = worker_args
        self.secrets = tuple(secret for secret in secrets if secret)
        self._spare: tuple[subprocess.Popen, Path] | None = None
        self._launches = 0
        (workdir / "logs").mkdir(parents=True, exist_ok=True)

    def warm(self) -> None:
        """Start a spare launcher (torch imported, waiting for its config) if none runs."""
        if self._spare is not None and self._spare[0].poll() is None:
            return
        self._launches += 1
        log_path = self.workdir / "logs" / f"launcher-{os.getpid()}-{self._launches}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", LAUNCHER_MODULE],
                # torch elastic's rendezvous and worker events, timed, in the launcher log
                env={**clean_environment(os.environ, self.secrets), "LOGLEVEL": "INFO"},
                stdin=subprocess.PIPE,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed as one
            )
        self._spare = (process, log_path)

    def spare_ready(self) -> bool:
        """Whether the spare launcher finished its imports (a launch now is fast)."""
        return self._spare is not None and spare_ready(self._spare[1])

    def close_spare(self) -> None:
        """Let the spare launcher exit (it exits when its stdin closes); one still importing
        torch holds no work and is killed after half a second, so a release within the
        grace period never waits on it."""
        if self._spare is not None:
            process, _ = self._spare
            _close_quietly(process.stdin)
            try:
                process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                kill(process)
            self._spare = None

    def is_host(self, endpoint: str) -> bool:
        """Whether this node hosts the rendezvous' TCP store at ``endpoint``."""
        host, _, port = endpoint.rpartition(":")
        return host.strip("[]") == self.host and int(port) in self.ports

    def launch(self, command: Command) -> Generation:
        """Start this node's workers of ``command`` (a start or rescale).

        Args:
            command: a validated start or rescale command.

        Returns:
            The running generation.

        Raises:
            BadCommand: with ``job_failed``: the job's command cannot run (a missing
                script or program, a workdir that is not a folder, an argv too long for
                the OS). Nothing was started.
        """
        assert command.job is not None and command.rendezvous_endpoint is not None
        run_dir = wire.run_dir(self.workdir, command.job_id)
        config = self.config(command)  # raises before anything is started
        run_dir.mkdir(parents=True, exist_ok=True)
        rundir.clear(run_dir)
        job_dir = Path(command.job.job_dir)
        job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.warm()
        assert self._spare is not None
        process, log_path = self._spare
        self._spare = None
        result_path = log_path.with_suffix(".result.json")
        config["result_path"] = str(result_path)
        try:
            assert process.stdin is not None
            process.stdin.write((json.dumps(config) + "\n").encode())
            process.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it died: the agent sees the exit code and acknowledges the error
        return Generation(
            command=command,
            process=process,
            run_dir=run_dir,
            job_dir=job_dir,
            log_path=log_path,
            result_path=result_path,
        )

    def config(self, command: Command) -> dict[str, Any]:
        """The JSON line a launcher reads: the launch config, the workers' argv and env.

        Raises:
            BadCommand: with ``job_failed``: the job's command cannot run (see
                :meth:`launch`).
        """
        job = command.job
        assert job is not None and command.rendezvous_endpoint is not None
        run_dir = wire.run_dir(self.workdir, command.job_id)
        cwd = Path(job.workdir or job.job_dir)
        job_env = {
            **job.env,
            wire.ENV_JOB_ID: command.job_id,
            wire.ENV_JOB_DIR: job.job_dir,
            wire.ENV_CHECKPOINT_DIR: job.checkpoint_dir,
            wire.ENV_RUN_DIR: str(run_dir),
            wire.ENV_TOTAL_SAMPLES: str(job.total_samples),
            wire.ENV_GLOBAL_BATCH_SIZE: str(job.global_batch_size),
            wire.ENV_NODE: self.node,
        }
        if job.command is not None:
            argv = wire.expand_placeholders(
                job.command,
                {
                    "job_id": command.job_id,
                    "job_dir": job.job_dir,
                    "checkpoint_dir": job.checkpoint_dir,
                    "total_samples": job.total_samples,
                    "global_batch_size": job.global_batch_size,
                },
            )
            if argv[0].endswith(".py"):
                argv = [sys.executable, *argv]
        elif not job.runs_builtin_worker:
            assert job.entrypoint is not None
            argv = [sys.executable, "-m", job.entrypoint]
        else:
            argv = None
        base_env = clean_environment(os.environ, self.secrets)
        if argv is not None:
            check_runnable(argv, cwd, {**base_env, **job_env})
        elif job.workdir is not None and not cwd.is_dir():
            raise BadCommand(f"workdir {str(cwd)!r} is not a folder", job_failed=True)
        return {
            "model": job.model if argv is None else None,
            "world_size": command.world_size,
            "nproc_per_node": job.nproc_per_node or self.nproc_per_node,
            "rendezvous_id": command.rendezvous_id,
            "rendezvous_endpoint": command.rendezvous_endpoint,
            "is_host": self.is_host(command.rendezvous_endpoint),
            "join_timeout_s": self.join_timeout_s,
            "local_addr": self.host,
            "argv": argv,
            "python_main": argv is not None and python_main(argv, cwd, base_env.get("PATH")),
            "builtin_args": self._builtin_args(command, run_dir) if argv is None else None,
            "env": job_env,
            "cwd": str(cwd) if cwd.is_dir() else None,
            "job_dir": job.job_dir,
        }

    def _builtin_args(self, command: Command, run_dir: Path) -> list[str]:
        """The built-in worker's command line (its numbers also come as the job's env)."""
        job = command.job
        assert job is not None and job.model is not None
        return [
            *("--model", job.model, "--parallelism", job.parallelism),
            *("--spb-depth", str(command.spb_depth)),
            *("--global-batch-size", str(job.global_batch_size)),
            *("--total-samples", str(job.total_samples)),
            *("--checkpoint-dir", job.checkpoint_dir, "--run-dir", str(run_dir)),
            *("--node", self.node, *self.worker_args),
        ]


def clean_environment(environ: Mapping[str, str], secrets: Sequence[str] = ()) -> dict[str, str]:
    """The base environment of a job's processes: ``environ`` without the agent's secrets.

    Dropped: every ``INTERSTICE_*`` variable (the agent token, the service's settings; the
    job's own ``INTERSTICE_*`` are added per job) but the Slurm placeholder job's marker
    (the Epilog finds leftover workers by it), torch elastic's per-run variables, and any
    variable whose value is one of ``secrets``.

    Args:
        environ: the agent's environment.
        secrets: values no worker may see (the agent's token).

    Returns:
        A new mapping.
    """
    return {
        name: value
        for name, value in environ.items()
        if value not in secrets
        and (
            name == wire.ENV_SLURM_JOB_MARKER
            or not name.startswith(("INTERSTICE_", "TORCHELASTIC_"))
        )
    }


def check_runnable(argv: list[str], cwd: Path, env: Mapping[str, str]) -> None:
    """Refuse a command that cannot be executed, before starting anything.

    Linux's limits on ``execve``: one argument or environment entry at most
    ``MAX_ARG_STRLEN`` (32 pages) bytes with its NUL, all of them with their pointers at
    most ``ARG_MAX`` (``sysconf(SC_ARG_MAX)``) bytes.

    Args:
        argv: the expanded command (a ``.py`` first element already behind the Python).
        cwd: the workers' working directory.
        env: their environment, besides torch's variables.

    Raises:
        BadCommand: with ``job_failed``: the workdir is not a folder, the program or script
            is missing or not executable, or the argv and env are too long for the OS.
    """
    if not cwd.is_dir():
        raise BadCommand(f"workdir {str(cwd)!r} is not a folder", job_failed=True)
    program = argv[0]
    resolved = shutil.which(program, path=env.get("PATH")) if "/" not in program else None
    path = Path(resolved) if resolved else cwd / program
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BadCommand(f"command: no executable {program!r} (cwd {cwd})", job_failed=True)
    if program == sys.executable and len(argv) > 1 and not argv[1].startswith("-"):
        script = cwd / argv[1]
        if not script.is_file():
            raise BadCommand(f"command: no script {str(script)!r}", job_failed=True)
    strings = [*MERGE_STDERR, *argv, *(f"{name}={value}" for name, value in env.items())]
    longest = max(len(text.encode()) + 1 for text in strings)
    max_arg_bytes = 32 * os.sysconf("SC_PAGE_SIZE")
    if longest > max_arg_bytes:
        raise BadCommand(
            f"command: an argument of {longest} bytes is longer than the OS allows "
            f"({max_arg_bytes}, E2BIG)",
            job_failed=True,
        )
    # The launcher adds torch's ~20 variables to env: leave them room.
    total = sum(len(text.encode()) + 1 + 8 for text in strings) + 16384
    if total > os.sysconf("SC_ARG_MAX"):
        raise BadCommand(
            f"command: argv and env of {total} bytes are longer than the OS allows "
            f"({os.sysconf('SC_ARG_MAX')}, E2BIG)",
            job_failed=True,
        )


def python_main(argv: Sequence[str], cwd: Path, path: str | None) -> bool:
    """Whether ``argv`` runs this very Python on a script or a module with no interpreter
    option: ``[python, SCRIPT, args...]`` or ``[python, -m, MODULE, args...]``.

    ``python`` must name this interpreter (``sys.executable``; a ``.py`` command got it
    already, see :meth:`Launcher.config`), looked up in ``path`` without following links: a
    virtual environment's ``python`` links to the same binary with other packages, and runs
    as a program.

    Args:
        argv: the expanded command.
        cwd: the workers' working directory (a relative program is found from it).
        path: the workers' ``PATH``.
    """
    if len(argv) < 2 or (argv[1].startswith("-") and (argv[1] != "-m" or len(argv) < 3)):
        return False
    program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=path)
    return program is not None and os.path.abspath(cwd / program) == sys.executable


def spare_ready(log_path: Path) -> bool:
    """Whether the launcher logging to ``log_path`` is a spare that finished its imports
    and has not been used (its log holds the ready line and nothing else)."""
    try:
        return log_path.read_text().strip() == SPARE_READY
    except OSError:
        return False


# -- the agent's view of a running launcher ------------------------------------------------


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
    return [worker for worker in workers if _alive(worker)]


def workers_alive(generation: Generation) -> bool:
    """Whether ``generation``'s launcher still has a live worker."""
    return bool(worker_processes(generation))


def joined(generation: Generation) -> bool:
    """Whether this node's workers of ``generation`` joined its rendezvous: the launcher has
    live workers (started only once the rendezvous completed) or has exited."""
    return generation.process.poll() is not None or workers_alive(generation)


def outcome(generation: Generation) -> Outcome | None:
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
    result = rundir.read_json(generation.result_path) or {}
    if returncode == 0:
        return Outcome("finished")
    if returncode == EXIT_WORKERS_FAILED and "rank" in result:
        rank = int(result["rank"])
        tail = log_tail(wire.rank_log_path(generation.job_dir, generation.rendezvous_id, rank))
        reason = str(result.get("error") or f"rank {rank} failed")
        return Outcome("failed", _clip(f"{reason}; last lines of rank {rank}'s log:\n{tail}"))
    if returncode == EXIT_BAD_JOB:
        return Outcome("failed", _clip(str(result.get("error") or generation.log_tail())))
    if returncode not in LAUNCHER_EXITS and returncode > 0 and not result:
        # It exited with an error of no code of its own, before it could say why (every end
        # it knows writes the result): it could not start at all, e.g. torch missing under
        # this Python. No node of the job would do better, and nothing would replan it.
        tail = log_tail(generation.log_path)
        return Outcome(
            "failed", _clip(f"launch failed (exit {returncode}); last lines of its log:\n{tail}")
        )
    return Outcome(None, f"launch failed (exit {returncode}): {generation.log_tail()}")


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' when it cannot be read)."""
    try:
        with path.open("rb") as stream:
            stream.seek(max(0, path.stat().st_size - 16384))
            text = stream.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _clip(text: str) -> str:
    """``text`` within the heartbeat's error limit, keeping its head and its end."""
    limit = wire.HEARTBEAT_ERROR_MAX_CHARS
    if len(text) <= limit:
        return text
    return text[: limit // 4] + "\n…\n" + text[-(limit - limit // 4 - 3) :]


def request_stop(generation: Generation) -> list[psutil.Process]:
    """Ask the workers to checkpoint and exit: the stop file, and SIGTERM to each worker
    not signalled before (see :attr:`Generation.signalled`).

    The workers, not torch's agent in the launcher: a script's own checkpoint-on-signal
    (``interstice.elastic.State.should_stop``) runs, and torch's agent sees them exit.

    Returns:
        The live workers.
    """
    generation.stop_requested = True
    generation.run_dir.mkdir(parents=True, exist_ok=True)
    wire.stop_path(generation.run_dir).touch()
    workers = worker_processes(generation)
    for worker in workers:
        if worker.pid in generation.signalled:
            continue
        generation.signalled.add(worker.pid)
        try:
            worker.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    return workers


def end_generation(
    generation: Generation,
    kill_at: float,
    interrupted: Callable[[], bool] = lambda: False,
) -> bool | None:
    """Stop the workers (stop file and SIGTERM), wait for them until ``kill_at``, then kill
    what is left.

    Workers that have not joined yet have trained no step of this rendezvous (every step
    all-reduces across all ranks), so they are killed at once: waiting would only hold
    peers in a rendezvous that has been replaced.

    Args:
        generation: the running generation.
        kill_at: ``time.monotonic()`` at which whatever still runs is killed.
        interrupted: polled while waiting; True returns at once, killing nothing.

    Returns:
        Whether the workers had joined, or None when interrupted.
    """
    process = generation.process
    had_joined = joined(generation)
    workers = request_stop(generation)
    while had_joined and any(_alive(w) for w in workers) and time.monotonic() < kill_at:
        if interrupted():
            return None
        time.sleep(0.02)
    if had_joined and any(_alive(w) for w in workers):
        log.warning("workers of %s missed their deadline: killed", generation.rendezvous_id)
    # The workers checkpointed and exited (or never trained): what is left is process
    # teardown and torch's exit barrier, so the launcher goes now.
    kill(process)
    return had_joined


def kill(process: subprocess.Popen) -> None:
    """SIGKILL a launcher, its process group and every process below it."""
    try:
        victims = [psutil.Process(process.pid)]
        victims += victims[0].children(recursive=True)
    except psutil.Error:
        victims = []
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for victim in victims:
        try:
            victim.kill()
        except psutil.Error:
            pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _close_quietly(stream: IO[bytes] | None) -> None:
    if stream is not None:
        try:
            stream.close()
        except OSError:
            pass


# -- the launcher process ----------------------------------------------------------------


def rank_logs_specs(job_dir: str, rendezvous_id: str) -> Any:
    """torch ``LogsSpecs`` writing global rank R's stdout to ``wire.rank_log_path``.

    stderr joins it in the worker (see :data:`MERGE_STDERR` and :func:`run_builtin_worker`):
    torch would open it as a second file handle that overwrites the first. torch's error
    file of rank R (``@record``) lies beside it as ``rank-R.error.json``.
    """
    from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs

    class RankLogsSpecs(LogsSpecs):
        def __init__(self) -> None:
            super().__init__(log_dir=str(wire.logs_dir(job_dir)))

        @property
        def root_log_dir(self) -> str:
            return str(wire.logs_dir(job_dir))

        def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
            destination = LogsDest()
            for local_rank, env in envs.items():
                path = wire.rank_log_path(job_dir, rendezvous_id, int(env["RANK"]))
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                error_file = path.with_suffix(".error.json")
                error_file.unlink(missing_ok=True)
                destination.stdouts[local_rank] = str(path)
                destination.stderrs[local_rank] = ""  # merged into stdout by the worker
                destination.error_files[local_rank] = str(error_file)
                env["TORCHELASTIC_ERROR_FILE"] = str(error_file)
            return destination

    return RankLogsSpecs()


def run_builtin_worker(env: dict[str, str], cwd: str | None, argv: list[str]) -> Any:
    """The built-in worker in a process forked from the fork server: the job's env and
    cwd (the fork server predates the job), stderr into the rank log, then its ``main``."""
    os.dup2(1, 2)  # torch redirected stdout to the rank log already
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    from interstice.agents import worker

    return worker.main(argv)


def run_python_main(env: dict[str, str], cwd: str | None, argv: list[str]) -> None:
    """A user's Python script or module in a process forked from the fork server, as
    ``python SCRIPT args...`` (or ``python -m MODULE args...``) would run it.

    The job's env and cwd are applied (the fork server predates the job), stderr joins
    stdout in the rank log, ``sys.argv`` and ``sys.path[0]`` are the script's (its folder;
    the cwd for a module), and it runs as ``__main__`` (``runpy``). Its end maps to the exit
    code torch elastic sees, as for a process: ``SystemExit(code)`` that code (torch's
    ``record`` makes 0 a normal return), an exception its traceback on stderr and 1 (with
    torch's error file), ``KeyboardInterrupt`` death by SIGINT. ``atexit`` handlers run
    before the exit.

    Args:
        env: the job's variables (torch's were set by torch).
        cwd: the working directory, or None to keep the fork server's.
        argv: ``[python, SCRIPT, args...]`` or ``[python, -m, MODULE, args...]`` (see
            :func:`python_main`).
    """
    os.dup2(1, 2)  # torch redirected stdout to the rank log already
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    try:
        if argv[1] == "-m":
            sys.argv = [argv[2], *argv[3:]]  # run_module sets argv[0] to the module's file
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(argv[1])
            sys.argv = [script, *argv[2:]]
            sys.path[0] = os.path.dirname(os.path.realpath(script))
            runpy.run_path(script, run_name="__main__")
    except KeyboardInterrupt:
        traceback.print_exc()
        atexit._run_exitfuncs()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except SystemExit:
        atexit._run_exitfuncs()
        raise
    except BaseException:
        traceback.print_exc()
        atexit._run_exitfuncs()
        raise
    atexit._run_exitfuncs()


def _visible_cuda_devices() -> int:
    """Workers for ``nproc_per_node: auto``: one per visible CUDA device, else 1."""
    import torch

    return max(1, torch.cuda.device_count()) if torch.cuda.is_available() else 1


def _recorded_message(data: dict[str, Any]) -> str | None:
    """The exception's message in a worker's error file (torch's ``@record``), which torch
    hands over as ``{"message": str, "extraInfo": ...}`` or nested once more in ``message``
    (None when there is none)."""
    message: Any = data
    while isinstance(message, dict):
        message = message.get("message")
    return message if isinstance(message, str) and message else None


def _run_generation(config: dict[str, Any]) -> int:
    """Run one generation with torch's launcher API; the exit code of the launcher."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    def finish(code: int, **result: Any) -> int:
        files.write_json_atomic(config["result_path"], {"exit_code": code, **result})
        if "error" in result:
            print(f"interstice: {result['error']}", file=sys.stderr, flush=True)
        return code

    if config["model"] is not None:
        from interstice.models import MODEL_NAMES

        if config["model"] not in MODEL_NAMES:
            known = ", ".join(MODEL_NAMES)
            return finish(EXIT_BAD_JOB, error=f"unknown model {config['model']!r}: known {known}")
    nproc_per_node = config["nproc_per_node"]
    if nproc_per_node == "auto":
        nproc_per_node = _visible_cuda_devices()
    os.environ.update(config["env"])  # binary workers inherit it
    if config["cwd"] is not None:
        os.chdir(config["cwd"])
    launch_config = LaunchConfig(
        min_nodes=config["world_size"],
        max_nodes=config["world_size"],
        nproc_per_node=nproc_per_node,
        run_id=config["rendezvous_id"],
        role=wire.WORKER_ROLE,
        rdzv_endpoint=config["rendezvous_endpoint"],
        rdzv_backend="c10d",
        rdzv_configs={
            "is_host": config["is_host"],
            "join_timeout": int(config["join_timeout_s"]),
            "read_timeout": int(config["join_timeout_s"]),
        },
        max_restarts=0,  # a failed generation is the service's to replan, not ours to retry
        monitor_interval=0.05,
        start_method="forkserver",
        local_addr=config["local_addr"],
        logs_specs=rank_logs_specs(config["job_dir"], config["rendezvous_id"]),
    )
    if config["argv"] is None:
        launch = elastic_launch(launch_config, run_builtin_worker)
        args: tuple[Any, ...] = (config["env"], config["cwd"], config["builtin_args"])
    elif config["python_main"]:
        launch = elastic_launch(launch_config, run_python_main)
        args = (config["env"], config["cwd"], config["argv"])
    else:
        launch = elastic_launch(launch_config, MERGE_STDERR[0])
        args = (*MERGE_STDERR[1:], *config["argv"])
    try:
        launch(*args)
    except ChildFailedError as error:
        rank, failure = error.get_first_failure()
        reason = f"rank {rank} exited with code {failure.exitcode}"
        if failure.signal_name() != "<N/A>":
            reason = f"rank {rank} was killed by {failure.signal_name()}"
        if isinstance(failure.message, dict):  # from the error file of @record
            message = _recorded_message(failure.message)
            reason += f": {message}" if message else ""
        return finish(EXIT_WORKERS_FAILED, rank=rank, error=reason)
    except OSError as error:
        if error.errno in EXEC_ERRNOS and error.filename is not None:
            return finish(EXIT_BAD_JOB, error=f"cannot start the workers: {error}")
        return finish(EXIT_LAUNCH_FAILED, error=f"launch failed: {type(error).__name__}: {error}")
    except Exception as error:  # the rendezvous failed (timeout, unreachable store, ...)
        return finish(EXIT_LAUNCH_FAILED, error=f"launch failed: {type(error).__name__}: {error}")
    return finish(0)


def main() -> int:
    """Entry point of a launcher process: warm up, wait for one config line, run it.

    Warming up starts the multiprocessing fork server with torch, the models, the worker
    and :data:`PRELOAD_MODULES` imported, so workers start as forks of it in milliseconds.
    A fork server, not plain ``fork``: it is a fresh single-threaded process that never
    touches CUDA, so its children may (a process that initialised CUDA cannot fork workers
    that use it).
    """
    import multiprocessing
    import multiprocessing.forkserver

    import torch.distributed.launcher.api  # noqa: F401  (import now, before the config)
    from interstice.models import MODEL_NAMES  # noqa: F401  (torchvision: seconds)

    multiprocessing.set_forkserver_preload(list(PRELOAD_MODULES))
    multiprocessing.forkserver.ensure_running()
    # A no-op child returns only once the fork server finished its imports.
    probe = multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(0,))
    probe.start()
    probe.join()
    print(SPARE_READY, flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the agent closed its spare without using it
    return _run_generation(json.loads(line))


if __name__ == "__main__":
    # Through the module's own name, so what the fork server unpickles
    # (run_builtin_worker) is interstice.agents.launcher's, not __main__'s.
    from interstice.agents import launcher

    sys.exit(launcher.main())
