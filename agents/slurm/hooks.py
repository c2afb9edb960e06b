"""What the Slurm Prolog and Epilog do: start the node's agent, and stop it within the grace.

The preemption path (on Slurm 22.05, as tests/agents/test_slurm_real.py runs it):

1. A placeholder job of the scavenger partition starts on an idle node. slurmd runs the Prolog
   (as root, outside the job) which calls :func:`start_agent`: ``interstice agent --report-idle``
   in a new session (``setsid``), its pid recorded in ``<state_dir>/agent-<job_id>.pid``. The
   agent is not a process of the job, so the token it holds never enters the user's job.
2. A job of a higher ``PriorityTier`` partition needs the node. slurmctld preempts the
   placeholder: it sends SIGCONT and SIGTERM to the job's *steps* at once (not to the batch
   shell, which Slurm only signals when GraceTime ends); the placeholder's batch script runs
   a single step (``srun sleep infinity``), so that step ends, the batch script ends, and the
   job completes within a fraction of a second.
3. slurmd runs the Epilog, which calls :func:`stop_agent`: the preemption signal (SIGTERM) to
   the agent, which releases its node (``DELETE /v1/agents/{id}``) and exits; after
   ``grace_s`` it kills the agent and every process the agent started. The node stays
   COMPLETING, so the preempting job cannot start, until the Epilog returns: the agent and
   the real job never share the node.
"""

import os
import pwd
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from interstice.agents.slurm.config import AUTO_PORTS, AgentConf
from interstice.agents.slurm.env import SlurmJobEnv

from interstice import wire
from interstice.ports import free_ports

POLL_S = 0.05
"""How often the Epilog checks whether the agent has exited, in seconds."""

JOB_MARKER = wire.ENV_SLURM_JOB_MARKER
"""Environment variable naming the placeholder job in the agent and every process it starts;
the Epilog kills the processes that carry their job's id."""

START_TOLERANCE_S = 0.02
"""Two start times closer than this are one process's (psutil derives them from clock ticks,
0.01 s)."""

AGENT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""PATH of the agent; slurmd gives its Prolog an environment without one."""


@dataclass(frozen=True)
class AgentStop:
    """What the Epilog did to one job's agent.

    Attributes:
        pid: the agent's process id.
        signalled: whether the agent was still running and got the preemption signal.
        exited_within_grace: whether it exited before ``grace_s`` (else it was killed).
        waited_s: seconds from the signal to the agent's exit or kill.
    """

    pid: int
    signalled: bool
    exited_within_grace: bool
    waited_s: float


def pid_file(conf: AgentConf, job_id: str) -> Path:
    """The file in which the Prolog records the agent of Slurm job ``job_id``."""
    return conf.state_dir / f"agent-{job_id}.pid"


def agent_log(conf: AgentConf, job_id: str) -> Path:
    """The log of the agent of Slurm job ``job_id`` (its output, then the Epilog's verdict)."""
    return conf.state_dir / f"agent-{job_id}.log"


def agent_command(conf: AgentConf, node: str) -> list[str]:
    """The ``interstice agent`` command line the Prolog runs for ``node``.

    The token is not on it (``ps`` shows argument vectors to every user): the agent reads it
    from ``INTERSTICE_AGENT_TOKEN``, see :func:`agent_environment`.

    Args:
        conf: the node's agent configuration.
        node: the Slurm node name, which the service knows the node by.

    Returns:
        The argument vector.
    """
    return [
        conf.interstice_bin,
        "agent",
        "--server",
        conf.server_url,
        "--node",
        node,
        "--workdir",
        str(conf.workdir),
        "--report-idle",
        "--preempt-signal",
        conf.preemption_signal,
        "--grace-s",
        f"{conf.grace_s:g}",
        *(["--ports", _ports(conf.ports)] if conf.ports else []),
    ]


def _ports(setting: str) -> str:
    """The ``--ports`` value of agent.conf's ``ports``: as given, or two free ports for auto."""
    return ",".join(map(str, free_ports(2))) if setting == AUTO_PORTS else setting


def agent_environment(conf: AgentConf, job_id: str) -> dict[str, str]:
    """The agent's whole environment: a PATH (slurmd's Prolog has none), HOME, the token, and
    the job's :data:`JOB_MARKER`, which its workers inherit."""
    return {
        "PATH": AGENT_PATH,
        "HOME": str(conf.workdir),
        wire.ENV_AGENT_TOKEN: conf.agent_token,
        JOB_MARKER: job_id,
    }


def start_agent(conf: AgentConf, job: SlurmJobEnv) -> int | None:
    """Start the node's agent for a placeholder job (the Prolog's work), detached.

    Args:
        conf: the node's agent configuration.
        job: the job the Prolog runs for.

    Returns:
        The agent's pid, or None where the job is not in ``conf.partition`` (nothing done).

    Raises:
        OSError: the state directory, workdir or log cannot be made, or the agent cannot be
            executed.
    """
    if job.partition != conf.partition:
        return None
    conf.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    account = pwd.getpwnam(conf.agent_user) if conf.agent_user else None
    if not conf.workdir.is_dir():
        conf.workdir.mkdir(parents=True)
        if account is not None:
            os.chown(conf.workdir, account.pw_uid, account.pw_gid)
    with open(agent_log(conf, job.job_id), "ab") as log:
        # A new session: slurmd neither waits for nor kills the agent when the Prolog returns.
        process = subprocess.Popen(
            agent_command(conf, job.node),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=conf.workdir,
            env=agent_environment(conf, job.job_id),
            start_new_session=True,
            # As agent_user: its uid, primary group and groups, not root's.
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=os.getgrouplist(account.pw_name, account.pw_gid) if account else None,
        )
    # The Popen child is not reaped before the Prolog exits, so its stat is there to read.
    started = _started_at(process.pid, zombie_ok=True)
    pid_file(conf, job.job_id).write_text(f"{process.pid} {started!r}\n")
    return process.pid


def stop_agent(conf: AgentConf, job_id: str) -> AgentStop | None:
    """Signal the job's agent, wait up to ``grace_s`` for it to exit, then kill what is left.

    What is left: the agent if still running, and every process that carries the job's
    :data:`JOB_MARKER` in its environment (workers that outlived a crashed agent, or left its
    session). A node is never held past its grace.

    Args:
        conf: the node's agent configuration.
        job_id: the Slurm job whose Epilog this is.

    Returns:
        What was done, or None where the job has no pid file (not a placeholder job, or
        already cleaned up). The pid file is removed.
    """
    path = pid_file(conf, job_id)
    try:
        pid_text, started_text = path.read_text().split()
        pid, started = int(pid_text), float(started_text)
    except (FileNotFoundError, ValueError):
        path.unlink(missing_ok=True)
        return None
    # The pid may have been reused since the Prolog: signal only the process it started.
    ours = _same_start(_started_at(pid), started)
    begun = time.monotonic()
    exited = True
    if ours:
        os.kill(pid, conf.signal_number)
        deadline = begun + conf.grace_s
        while _started_at(pid) is not None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        exited = _started_at(pid) is None
    for leftover in processes_with_env(f"{JOB_MARKER}={job_id}"):
        try:
            os.kill(leftover, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    path.unlink(missing_ok=True)
    return AgentStop(
        pid=pid,
        signalled=ours,
        exited_within_grace=exited,
        waited_s=time.monotonic() - begun,
    )


def processes_with_env(entry: str) -> list[int]:
    """Pids of the live processes whose environment holds ``entry`` (``"KEY=value"``).

    Args:
        entry: one environment entry, matched whole.

    Returns:
        The pids (psutil reads every process's environment when run as root, else only the
        caller's own).
    """
    name, _, value = entry.partition("=")
    pids = []
    for process in psutil.process_iter(["environ"]):
        environ = process.info["environ"]  # None where access is denied
        if environ is not None and environ.get(name) == value:
            pids.append(process.pid)
    return pids


def _started_at(pid: int, zombie_ok: bool = False) -> float | None:
    """A process's start time (Unix seconds, clock-tick precision); None if gone or a zombie.

    A zombie counts as gone: in a container, PID 1 may never reap a detached agent. With
    ``zombie_ok`` a zombie's start time is returned (the Prolog records an agent that died at
    once, before the Prolog reaped it).
    """
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE and not zombie_ok:
            return None
        return process.create_time()
    except psutil.NoSuchProcess:
        return None


def _same_start(first: float | None, second: float | None) -> bool:
    """Whether two start times are one process's (equal to within one clock tick)."""
    return first is not None and second is not None and abs(first - second) < START_TOLERANCE_S
