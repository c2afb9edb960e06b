"""The launcher process (``python -m interstice.agents.launcher_process``): runs one generation
of a job on this node with torch elastic.

It warms up first: imports torch and the models, and starts a multiprocessing fork server
holding torch, the built-in worker and :data:`PRELOAD_MODULES`, so that workers start as its
forks in milliseconds. A fork server, not plain ``fork``: it is a fresh single-threaded
process that never touches CUDA, so its children may (a process that initialised CUDA cannot
fork workers that use it). Then it prints :data:`SPARE_READY` (its log's first line: the
agent's sign that it is warm) and blocks on its stdin for one JSON line, the generation's
config (:func:`interstice.agents.launch_config.generation_config`); an empty stdin (the agent
closed its spare) ends it with 0.

It runs as the account of the job (its owner in multi-user mode, see
:mod:`interstice.agents.owner`), so the job directory it makes first
(:func:`prepare_job_dir`) and every file of the workers are that account's.

The generation runs under torch's :func:`torch.distributed.launcher.api.elastic_launch` (the
launcher API behind ``torchrun``): a c10d rendezvous at the commanded endpoint with
``min_nodes = max_nodes = world_size``, no restarts, then ``nproc_per_node`` workers. Its end
is told to the agent by its exit code (0: every worker exited 0; else one of ``EXIT_*``) and a
result file (``{"exit_code", "rank", "error"}``) that
:func:`interstice.agents.outcome.judge` reads.
"""

import errno
import json
import logging
import os
import stat
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from interstice.agents import forked_main, rank_logs

from interstice import files, wire

WORKER_MODULE = wire.DEFAULT_ENTRYPOINT
# Imported by the fork server besides the worker, for users' scripts: the heavy modules of
# the `train` extra (scikit-learn's datasets and model selection import SciPy: 7 s on a loaded
# 2-core machine, which a script forked from the server no longer pays). One not installed
# is skipped (multiprocessing's preload ignores an ImportError).
PRELOAD_MODULES = (
    forked_main.__name__,
    WORKER_MODULE,
    "numpy",
    "sklearn.datasets",
    "sklearn.model_selection",
)
SPARE_READY = "interstice: spare launcher ready"  # the first line of a launcher's log

# Exit codes of a launcher process (besides 0: every worker exited 0).
EXIT_WORKERS_FAILED = 3  # a worker exited non-zero: the job's fault
EXIT_BAD_JOB = 4  # the job cannot start here or anywhere (exec failed, unknown model)
EXIT_LAUNCH_FAILED = 5  # the rendezvous or the launcher failed: the node's fault
LAUNCHER_EXITS = frozenset({EXIT_WORKERS_FAILED, EXIT_BAD_JOB, EXIT_LAUNCH_FAILED})
"""The launcher's own exit codes: it ran (any other non-zero code: it could not start)."""

# errno of an exec that fails for a reason of the command itself.
EXEC_ERRNOS = frozenset({errno.E2BIG, errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR})


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


def prepare_job_dir(config: dict[str, Any]) -> str | None:
    """Make the job directory (mode 0700, with any missing parent) as the account this
    launcher runs as, and check the workers' cwd.

    For a job run as its owner (``config["owner"]``), no other account may be able to
    replace the job directory or change what it holds (it could plant a checkpoint that the
    job loads): the job directory must belong to this account, and each folder above it to
    this account or root, writable by no one else unless sticky (as ``/tmp``), the rule of
    OpenSSH's ``StrictModes``. A job directory made ahead by another account (whose name a
    job id made guessable) is refused rather than written into.

    Returns:
        None, or why the job cannot start (the job's fault: a job directory that cannot be
        made, that belongs to another account or lies in a folder another account may
        change; a workdir that is not a folder).
    """
    job_dir = Path(config["job_dir"])
    try:
        job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        owner_uid = job_dir.stat().st_uid
    except OSError as error:
        return f"cannot make the job directory: {error}"
    if config.get("owner") is not None:
        if owner_uid != os.getuid():
            return (
                f"job directory {str(job_dir)!r} belongs to uid {owner_uid}, not to "
                f"{config['owner']} (uid {os.getuid()}), whom the job runs as"
            )
        for folder in Path(os.path.realpath(job_dir)).parents:
            try:
                status = folder.stat()
            except OSError as error:
                return f"cannot check the folders above the job directory: {error}"
            shared = status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if status.st_uid not in (0, os.getuid()) or (
                shared and not status.st_mode & stat.S_ISVTX
            ):
                return (
                    f"job directory {str(job_dir)!r} lies in {str(folder)!r} (uid "
                    f"{status.st_uid}, mode {stat.S_IMODE(status.st_mode):04o}), which "
                    f"another account than {config['owner']} may change"
                )
    if not os.path.isdir(config["cwd"]):
        return f"workdir {config['cwd']!r} is not a folder"
    return None


def run_generation(config: dict[str, Any]) -> int:
    """Run one generation with torch's launcher API; the exit code of the launcher."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    def finish(code: int, **result: Any) -> int:
        files.write_json_atomic(config["result_path"], {"exit_code": code, **result})
        if "error" in result:
            print(f"interstice: {result['error']}", file=sys.stderr, flush=True)
        return code

    problem = prepare_job_dir(config)
    if problem is not None:
        return finish(EXIT_BAD_JOB, error=problem)
    if config["model"] is not None:
        from interstice.models import MODEL_NAMES

        if config["model"] not in MODEL_NAMES:
            known = ", ".join(MODEL_NAMES)
            return finish(EXIT_BAD_JOB, error=f"unknown model {config['model']!r}: known {known}")
    nproc_per_node = config["nproc_per_node"]
    if nproc_per_node == "auto":
        nproc_per_node = _visible_cuda_devices()
    os.environ.update(config["env"])  # binary workers inherit it
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
        logs_specs=rank_logs.rank_logs_specs(config["job_dir"], config["rendezvous_id"]),
    )
    if config["argv"] is None:
        launch = elastic_launch(launch_config, forked_main.run_builtin_worker)
        args: tuple[Any, ...] = (config["env"], config["cwd"], config["builtin_args"])
    elif config["python_main"]:
        launch = elastic_launch(launch_config, forked_main.run_python_main)
        args = (config["env"], config["cwd"], config["argv"])
    else:
        launch = elastic_launch(launch_config, rank_logs.MERGE_STDERR[0])
        args = (*rank_logs.MERGE_STDERR[1:], *config["argv"])
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


FAILURE_LOGGER = "torch.distributed.elastic.multiprocessing.api"
"""The logger by which torch elastic logs a failed worker's traceback."""


class PlainTraceback(logging.Filter):
    """Puts a record's traceback into its message, formatted by :mod:`traceback`: torch's
    log formatter imports ``torch._dynamo`` to format an exception, and on a worker's
    failure that import (seconds; 6 s on a loaded 2-core machine) would stand between the
    failure and this process's exit code, which is how the agent learns of it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            trace = "".join(traceback.format_exception(*record.exc_info))
            record.msg, record.args = f"{record.getMessage()}\n{trace}", ()
            record.exc_info = record.exc_text = None
        return True


def main() -> int:
    """Warm up (see the module docstring), wait for one config line, run it."""
    import multiprocessing.forkserver

    import torch.distributed.launcher.api  # noqa: F401  (import now, before the config)
    from interstice.models import MODEL_NAMES  # noqa: F401  (torchvision: seconds)

    multiprocessing.set_forkserver_preload(list(PRELOAD_MODULES))
    multiprocessing.forkserver.ensure_running()
    logging.getLogger(FAILURE_LOGGER).addFilter(PlainTraceback())
    # A no-op child returns only once the fork server finished its imports.
    probe = multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(0,))
    probe.start()
    probe.join()
    print(SPARE_READY, flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the agent closed its spare without using it
    return run_generation(json.loads(line))


def exit_at_once(code: int) -> None:
    """End this process with ``code`` without finalizing the interpreter: the agent judges
    the generation by this exit, and tearing down an interpreter that holds torch takes
    seconds (8 s on a loaded 2-core machine) after the result file is written. Nothing is
    left to clean up: the workers are gone, and the fork server and resource tracker exit
    when their pipes from this process close."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_at_once(main())
