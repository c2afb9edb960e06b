"""What one generation runs on this node: the config line a launcher process reads (the
workers' argv, environment and cwd, the rendezvous settings), and the refusal of a command that
cannot run, before anything is started.

What a job runs on every node:

- its ``command``: an argv (a first element ending in ``.py`` runs under this Python, as
  torchrun does), with the placeholders of :data:`interstice.wire.PLACEHOLDERS` expanded,
  in ``workdir`` (default: the job dir), with the job's ``env`` added. A command that runs
  this Python on a script or module (:func:`python_main`) runs as a function forked from the
  launcher's fork server (:func:`interstice.agents.forked_main.run_python_main`), so it
  starts with torch, numpy and scikit-learn imported; any other command is executed as a
  program;
- or its ``entrypoint`` module (``python -m ENTRYPOINT``);
- or the built-in worker (``interstice.agents.worker``), run as a function forked from the
  launcher's fork server, so it inherits torch and the models already imported.

The workers' environment is built from a clean base: this process's environment without
any ``INTERSTICE_*`` variable (the agent's token among them) nor any value equal to one of
the agent's secrets; for a job run as its owner, only PATH, HOME, USER and LOGNAME
(:func:`interstice.agents.owner.owner_environment`). Then torch's ``RANK``/``WORLD_SIZE``/…
and the job's variables (:data:`interstice.wire.JOB_ENV_VARS`).

A job run as its owner is checked here only for what needs no look at its files (the argv's
length): the agent may run as root, and what root finds in a user's folders is not what
the owner may use; the launcher, running as the owner, refuses a missing program or workdir
itself (:mod:`interstice.agents.launcher_process`).

Exactly one node hosts the rendezvous' TCP store: torch's c10d backend guesses the host by
matching the endpoint's host name to this machine, which is ambiguous with several agents
on one machine, so the config says ``is_host`` explicitly (:func:`is_host`): true on the node
whose host and port the endpoint names (docs/reference/agent-protocol.md: the job's first node).
"""

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interstice.agents.owner import Account, owner_environment
from interstice.agents.protocol import BadCommand, Command
from interstice.agents.rank_logs import MERGE_STDERR

from interstice import wire


@dataclass(frozen=True)
class NodeSettings:
    """What this node's agent tells every generation it launches.

    Attributes:
        workdir: the agent's folder; a job's run directory is ``workdir/<job_id>``.
        node: this node's name (``INTERSTICE_NODE`` of the workers).
        host: the address the workers and the rendezvous bind on this node.
        ports: this agent's rendezvous ports (decides ``is_host``).
        nproc_per_node: workers per node when the job does not say (1 on CPU).
        join_timeout_s: a rendezvous not complete after this long fails the launch.
        worker_args: extra arguments for the built-in worker (e.g. ``--checkpoint-every 20``).
        secrets: the agent's credentials: no worker environment variable holds one.
    """

    workdir: Path
    node: str
    host: str
    ports: Sequence[int]
    nproc_per_node: int = 1
    join_timeout_s: float = 60.0
    worker_args: Sequence[str] = ()
    secrets: Sequence[str] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "secrets", tuple(secret for secret in self.secrets if secret))


def is_host(endpoint: str, host: str, ports: Sequence[int]) -> bool:
    """Whether the node of ``host`` and ``ports`` hosts the rendezvous' TCP store at
    ``endpoint`` (``host:port``)."""
    endpoint_host, _, port = endpoint.rpartition(":")
    return endpoint_host.strip("[]") == host and int(port) in ports


def generation_config(
    command: Command, settings: NodeSettings, account: Account | None = None
) -> dict[str, Any]:
    """The JSON line a launcher reads: the launch config, the workers' argv and env.

    Args:
        command: a validated start or rescale command.
        settings: this node's.
        account: the job's owner's account (:func:`interstice.agents.owner.job_account`);
            None runs it as the agent's account.

    Raises:
        BadCommand: with ``job_failed``: the job's command cannot run (a missing script or
            program, a workdir that is not a folder, an argv too long for the OS; for a job
            run as its owner, only the last).
    """
    job = command.job
    assert job is not None and command.rendezvous_endpoint is not None
    run_dir = wire.run_dir(settings.workdir, command.job_id)
    cwd = Path(job.workdir or job.job_dir)
    job_env = {
        **job.env,
        wire.ENV_JOB_ID: command.job_id,
        wire.ENV_JOB_DIR: job.job_dir,
        wire.ENV_CHECKPOINT_DIR: job.checkpoint_dir,
        wire.ENV_RUN_DIR: str(run_dir),
        wire.ENV_TOTAL_SAMPLES: str(job.total_samples),
        wire.ENV_GLOBAL_BATCH_SIZE: str(job.global_batch_size),
        wire.ENV_NODE: settings.node,
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
    base_env = job_base_environment(settings, account)
    if argv is not None:
        check_runnable(argv, cwd, {**base_env, **job_env}, files=account is None)
    elif account is None and job.workdir is not None and not cwd.is_dir():
        raise BadCommand(f"workdir {str(cwd)!r} is not a folder", job_failed=True)
    return {
        "model": job.model if argv is None else None,
        "world_size": command.world_size,
        "nproc_per_node": job.nproc_per_node or settings.nproc_per_node,
        "rendezvous_id": command.rendezvous_id,
        "rendezvous_endpoint": command.rendezvous_endpoint,
        "is_host": is_host(command.rendezvous_endpoint, settings.host, settings.ports),
        "join_timeout_s": settings.join_timeout_s,
        "local_addr": settings.host,
        "argv": argv,
        "python_main": argv is not None and python_main(argv, cwd, base_env.get("PATH")),
        "builtin_args": builtin_args(command, settings) if argv is None else None,
        "env": job_env,
        "cwd": str(cwd),
        "job_dir": job.job_dir,
        "owner": account.name if account is not None else None,
    }


def builtin_args(command: Command, settings: NodeSettings) -> list[str]:
    """The built-in worker's command line (its numbers also come as the job's env)."""
    job = command.job
    assert job is not None and job.model is not None
    run_dir = wire.run_dir(settings.workdir, command.job_id)
    return [
        *("--model", job.model, "--parallelism", job.parallelism),
        *("--spb-depth", str(command.spb_depth)),
        *("--global-batch-size", str(job.global_batch_size)),
        *("--total-samples", str(job.total_samples)),
        *("--checkpoint-dir", job.checkpoint_dir, "--run-dir", str(run_dir)),
        *("--node", settings.node, *settings.worker_args),
    ]


def job_base_environment(settings: NodeSettings, account: Account | None) -> dict[str, str]:
    """The environment a job's launcher starts with (before the job's own variables): that
    of :func:`interstice.agents.owner.owner_environment` for an owner's job, else the agent's
    own through :func:`clean_environment`."""
    if account is not None:
        return owner_environment(account, os.environ)
    return clean_environment(os.environ, settings.secrets)


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


def check_runnable(argv: list[str], cwd: Path, env: Mapping[str, str], files: bool = True) -> None:
    """Refuse a command that cannot be executed, before starting anything.

    Linux's limits on ``execve``: one argument or environment entry at most
    ``MAX_ARG_STRLEN`` (32 pages) bytes with its NUL, all of them with their pointers at
    most ``ARG_MAX`` (``sysconf(SC_ARG_MAX)``) bytes.

    Args:
        argv: the expanded command (a ``.py`` first element already behind the Python).
        cwd: the workers' working directory.
        env: their environment, besides torch's variables.
        files: also check the workdir, the program and the script (False: only the lengths,
            for a job the agent does not run as its own account).

    Raises:
        BadCommand: with ``job_failed``: the workdir is not a folder, the program or script
            is missing or not executable, or the argv and env are too long for the OS.
    """
    if files:
        check_files(argv, cwd, env.get("PATH"))
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


def check_files(argv: list[str], cwd: Path, path: str | None) -> None:
    """Refuse a command whose workdir, program or script is missing (see
    :func:`check_runnable`)."""
    if not cwd.is_dir():
        raise BadCommand(f"workdir {str(cwd)!r} is not a folder", job_failed=True)
    program = argv[0]
    resolved = shutil.which(program, path=path) if "/" not in program else None
    found = Path(resolved) if resolved else cwd / program
    if not (found.is_file() and os.access(found, os.X_OK)):
        raise BadCommand(f"command: no executable {program!r} (cwd {cwd})", job_failed=True)
    if program == sys.executable and len(argv) > 1 and not argv[1].startswith("-"):
        script = cwd / argv[1]
        if not script.is_file():
            raise BadCommand(f"command: no script {str(script)!r}", job_failed=True)


def python_main(argv: Sequence[str], cwd: Path, path: str | None) -> bool:
    """Whether ``argv`` runs this very Python on a script or a module with no interpreter
    option: ``[python, SCRIPT, args...]`` or ``[python, -m, MODULE, args...]``.

    ``python`` must name this interpreter (``sys.executable``; a ``.py`` command got it
    already, see :func:`generation_config`), looked up in ``path`` without following links: a
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
