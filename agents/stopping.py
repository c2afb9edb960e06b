"""Stopping a generation: ask its workers to checkpoint and exit, wait for them until a
deadline, then kill the launcher and everything below it.

The stop file and SIGTERM go to each worker process, not to torch's agent in the launcher: a
script's own checkpoint-on-signal (``interstice.elastic.State.should_stop`` sees either, and
every rank stops after the same step) runs, and torch's agent sees the workers exit.
"""

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable

import psutil
from interstice.agents import rundir
from interstice.agents.generation import Generation, alive, joined, worker_processes

log = logging.getLogger("interstice.agent")


def request_stop(generation: Generation) -> list[psutil.Process]:
    """Ask the workers to checkpoint and exit: the stop file, and SIGTERM to each worker
    not signalled before (see :attr:`Generation.signalled`).

    Returns:
        The live workers.
    """
    generation.stop_requested = True
    if generation.account is None:
        generation.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        rundir.request_stop(generation.run_dir, generation.uid, generation.gid)
    except OSError as error:  # SIGTERM still says it
        log.warning("no stop file in %s: %s", generation.run_dir, error)
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
    while had_joined and any(alive(w) for w in workers) and time.monotonic() < kill_at:
        if interrupted():
            return None
        time.sleep(0.02)
    if had_joined and any(alive(w) for w in workers):
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
