"""Launch and stop this node's workers of a job with PyTorch elastic.

Each generation of a job (one rendezvous, one world size) runs in one launcher process,
``python -m interstice.agents.launcher``, which calls torch's
:func:`torch.distributed.launcher.api.elastic_launch` (the launcher API behind
``torchrun``): a c10d rendezvous at the commanded endpoint with ``min_nodes = max_nodes =
world_size``, then ``nproc_per_node`` workers. torch supervises the workers; this module only
starts the launcher, asks it to stop, and kills it past a deadline.

Why a pre-started ("spare") launcher: importing torch and torchvision takes 2-10 s, most of
a rescale's cost. The agent keeps one launcher process started with torch imported and a
multiprocessing fork server holding torch, the models and the worker, blocked on its stdin;
a start or rescale writes the generation's config to it (one JSON line), and the agent
starts the next spare once the new workers joined. The default worker runs as a function
forked from that fork server, so it inherits the imports. Workers on CPU use gloo, on GPU
nccl (decided by the worker).

Exactly one node hosts the rendezvous' TCP store: torch's c10d backend guesses the host by
matching the endpoint's host name to this machine, which is ambiguous with several agents
on one machine, so the agent passes ``is_host`` explicitly: true on the node whose host and
port the endpoint names (docs/agent-protocol.md: the job's first node).
"""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from interstice.agents import rundir
from interstice.agents.protocol import DEFAULT_ENTRYPOINT, Command

LAUNCHER_MODULE = "interstice.agents.launcher"
WORKER_MODULE = DEFAULT_ENTRYPOINT
SPARE_READY = "interstice: spare launcher ready"  # the first line of a launcher's log
MULTIPROCESSING_HELPERS = (b"multiprocessing.forkserver", b"multiprocessing.resource_tracker")

log = logging.getLogger("interstice.agent")


@dataclass
class Generation:
    """This node's part of one rendezvous of a job: the launcher process running it."""

    command: Command
    process: subprocess.Popen
    run_dir: Path
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)

    @property
    def rendezvous_id(self) -> str:
        """The rendezvous (``<job_id>-g<generation>``) this launcher joined."""
        assert self.command.rendezvous_id is not None
        return self.command.rendezvous_id

    def log_tail(self, chars: int = 600) -> str:
        """The end of the launcher's log, for an error message."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return " ".join(text[-chars:].split())


class Launcher:
    """Starts generations of this node's workers and stops them.

    Args:
        workdir: the agent's folder; a job's run directory is ``workdir/<job_id>``.
        node: this node's name (given to the workers, who name their step logs with it).
        host: the address the workers and the rendezvous bind on this node.
        ports: this agent's rendezvous ports (decides ``is_host``).
        nproc_per_node: workers per node (1 on CPU; one per GPU).
        join_timeout_s: a rendezvous not complete after this long fails the launch.
        worker_args: extra arguments for every worker (e.g. ``--checkpoint-every 20``).
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
    ) -> None:
        self.workdir = workdir
        self.node = node
        self.host = host
        self.ports = ports
        self.nproc_per_node = nproc_per_node
        self.join_timeout_s = join_timeout_s
        self.worker_args = worker_args
        self._spare: tuple[subprocess.Popen, Path] | None = None
        self._launches = 0
        (workdir / "logs").mkdir(parents=True, exist_ok=True)

    def warm(self) -> None:
        """Start a spare launcher (torch imported, waiting for its config) if none runs."""
        if self._spare is not None and self._spare[0].poll() is None:
            return
        self._launches += 1
        log_path = self.workdir / "logs" / f"launcher-{os.getpid()}-{self._launches}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", LAUNCHER_MODULE],
                # torch elastic's rendezvous and worker events, timed, in the launcher log
                env={"LOGLEVEL": "INFO", **os.environ},
                stdin=subprocess.PIPE,
                stdout=log,
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
        """
        assert command.job is not None and command.rendezvous_endpoint is not None
        run_dir = self.workdir / command.job_id
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / rundir.STOP_FILE).unlink(missing_ok=True)
        for status in run_dir.glob("status-*.json"):
            status.unlink(missing_ok=True)
        self.warm()
        assert self._spare is not None
        process, log_path = self._spare
        self._spare = None
        config = self._config(command, run_dir)
        try:
            assert process.stdin is not None
            process.stdin.write((json.dumps(config) + "\n").encode())
            process.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it died: the agent sees the exit code and acknowledges the error
        return Generation(command=command, process=process, run_dir=run_dir, log_path=log_path)

    def _config(self, command: Command, run_dir: Path) -> dict[str, Any]:
        """The JSON line a launcher reads: the launch config and the worker's command line."""
        job = command.job
        assert job is not None
        worker_args = [
            *("--model", job.model, "--parallelism", job.parallelism),
            *("--spb-depth", str(command.spb_depth), "--batch-size", str(job.batch_size)),
            *("--total-samples", str(job.total_samples)),
            *("--checkpoint-dir", job.checkpoint_dir, "--run-dir", str(run_dir)),
            *("--node", self.node, *self.worker_args),
        ]
        if job.command:
            argv = list(job.command)
        elif job.entrypoint and job.entrypoint != DEFAULT_ENTRYPOINT:
            argv = [sys.executable, "-m", job.entrypoint, *worker_args]
        else:
            argv = [DEFAULT_ENTRYPOINT, *worker_args]  # run in-process, forked
        return {
            "model": job.model if argv[0] == DEFAULT_ENTRYPOINT else None,
            "world_size": command.world_size,
            "nproc_per_node": self.nproc_per_node,
            "rendezvous_id": command.rendezvous_id,
            "rendezvous_endpoint": command.rendezvous_endpoint,
            "is_host": self.is_host(command.rendezvous_endpoint),
            "join_timeout_s": self.join_timeout_s,
            "local_addr": self.host,
            "argv": argv,
            # for a job's own entrypoint or command (the worker has them as arguments)
            "env": {"INTERSTICE_JOB_ID": command.job_id, "INTERSTICE_NODE": self.node},
        }


def spare_ready(log_path: Path) -> bool:
    """Whether the launcher logging to ``log_path`` is a spare that finished its imports
    and has not been used (its log holds the ready line and nothing else)."""
    try:
        return log_path.read_text().strip() == SPARE_READY
    except OSError:
        return False


def request_stop(run_dir: Path) -> None:
    """Ask the workers in ``run_dir`` to checkpoint at their next step and exit."""
    (run_dir / rundir.STOP_FILE).touch()


def joined(generation: Generation) -> bool:
    """Whether a worker of ``generation`` reported from its rendezvous (trained or about to)."""
    return any(
        status.get("rendezvous_id") == generation.rendezvous_id
        for status in rundir.read_statuses(generation.run_dir)
    )


def workers_done(generation: Generation, nproc_per_node: int) -> bool:
    """Whether every local worker of ``generation`` checkpointed and reported its end."""
    ended = [
        status
        for status in rundir.read_statuses(generation.run_dir)
        if status.get("rendezvous_id") == generation.rendezvous_id
        and status.get("state") in ("stopped", "finished")
    ]
    return len(ended) >= nproc_per_node


def end_generation(
    generation: Generation,
    kill_at: float,
    nproc_per_node: int,
    interrupted: Callable[[], bool] = lambda: False,
) -> bool | None:
    """Ask the workers to checkpoint and exit; kill what is left at ``kill_at``.

    Workers that have not reported from this rendezvous yet have trained no step of it
    (every step all-reduces across all ranks), so they are killed at once: waiting would
    only hold peers in a rendezvous that has been replaced.

    Args:
        generation: the running generation.
        kill_at: ``time.monotonic()`` at which whatever still runs is killed.
        nproc_per_node: workers on this node.
        interrupted: polled while waiting; True returns at once, killing nothing.

    Returns:
        Whether the workers had joined, or None when interrupted.
    """
    request_stop(generation.run_dir)
    process = generation.process
    had_joined = joined(generation)
    while (
        had_joined
        and workers_alive(process)
        and not workers_done(generation, nproc_per_node)
        and time.monotonic() < kill_at
    ):
        if interrupted():
            return None
        time.sleep(0.02)
    if had_joined and workers_alive(process) and not workers_done(generation, nproc_per_node):
        log.warning("workers of %s missed their deadline: killed", generation.rendezvous_id)
    # The workers checkpointed and reported their end (or never trained): what is left
    # is process teardown and torch's exit barrier, so the launcher goes now.
    kill(process)
    return had_joined


def workers_alive(process: subprocess.Popen) -> bool:
    """Whether the launcher ``process`` still has a worker: a process below it other than
    the multiprocessing helpers it started itself (fork server, resource tracker)."""
    if process.poll() is not None:
        return False
    for pid, parent in _descendants(process.pid).items():
        if parent != process.pid:
            return True  # forked by the fork server: a worker
        try:
            command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if not any(helper in command_line for helper in MULTIPROCESSING_HELPERS):
            return True
    return False


def kill(process: subprocess.Popen) -> None:
    """SIGKILL a launcher, its process group and every process it started."""
    victims = [process.pid, *_descendants(process.pid)]
    for pid in victims:
        for send in (os.killpg, os.kill):
            try:
                send(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _descendants(pid: int) -> dict[int, int]:
    """Every live process below ``pid`` (Linux ``/proc``), with its parent's pid."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may hold spaces; state and parent pid follow its ')'.
        state, parent_text = stat.rpartition(")")[2].split()[:2]
        if state == "Z":
            continue  # exited, not yet reaped
        children.setdefault(int(parent_text), []).append(int(entry.name))
    found: dict[int, int] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child in children.get(parent, []):
            found[child] = parent
            frontier.append(child)
    return found


def _close_quietly(stream: IO[bytes] | None) -> None:
    if stream is not None:
        try:
            stream.close()
        except OSError:
            pass


def _run_generation(config: dict[str, Any]) -> int:
    """Run one generation with torch's launcher API; the exit code of the launcher."""
    from interstice.agents import worker
    from interstice.models import MODEL_NAMES
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if config["model"] is not None and config["model"] not in MODEL_NAMES:
        print(f"unknown model {config['model']!r}: known are {', '.join(MODEL_NAMES)}")
        return 2
    os.environ.update(config["env"])
    launch_config = LaunchConfig(
        min_nodes=config["world_size"],
        max_nodes=config["world_size"],
        nproc_per_node=config["nproc_per_node"],
        run_id=config["rendezvous_id"],
        role="trainer",
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
    )
    argv = config["argv"]
    if argv[0] == DEFAULT_ENTRYPOINT:
        launch = elastic_launch(launch_config, worker.main)
        args: tuple[Any, ...] = (argv[1:],)
    else:
        launch = elastic_launch(launch_config, argv[0])
        args = tuple(argv[1:])
    try:
        launch(*args)
    except ChildFailedError as error:
        print(f"workers failed: {error}", file=sys.stderr, flush=True)
        return 1
    except Exception as error:  # the rendezvous failed (timeout, unreachable store, ...)
        print(f"launch failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


def main() -> int:
    """Entry point of a launcher process: warm up, wait for one config line, run it.

    Warming up starts the multiprocessing fork server with torch, the models and the
    worker imported, so workers start as forks of it in milliseconds. A fork server, not
    plain ``fork``: it is a fresh single-threaded process that never touches CUDA, so its
    children may (a process that initialised CUDA cannot fork workers that use it).
    """
    import multiprocessing
    import multiprocessing.forkserver

    import torch.distributed.launcher.api  # noqa: F401  (import now, before the config)
    from interstice.models import MODEL_NAMES  # noqa: F401  (torchvision: seconds)

    multiprocessing.set_forkserver_preload([WORKER_MODULE, "interstice.models.trainer"])
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
    sys.exit(main())
