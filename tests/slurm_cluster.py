"""A real Slurm cluster on this host for the tests: munged, slurmctld and one ``slurmd -N NAME``
per compute node, all from Debian's ``slurm-wlm``, with the shipped scavenger fragment, Prolog
and Epilog.

Several compute nodes on one host: every node is defined with ``NodeHostname=<this host>
NodeAddr=127.0.0.1`` and a ``Port=`` of its own, and ``slurmd -N NAME`` takes the node's
name; ``SlurmdSpoolDir``, ``SlurmdPidFile`` and ``SlurmdLogFile`` carry ``%n`` so each daemon
has its own (shared/SLURM.md). This works unprivileged of namespaces: a network namespace per
node would need one address per node and gains nothing a port does not. Cgroup-free
(``proctrack/linuxproc``, ``task/none``): a cgroup hierarchy is not ours to use here.

:func:`slurm_cluster` is a context manager that starts everything and stops every process it
started by pid (slurmstepd daemonizes, so the job processes are found by the ``SLURM_CONF``
they inherit). Use it from a fixture; it skips, saying what failed, where Slurm or munge is
not installed or the test is not root.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from interstice.agents.slurm.hooks import processes_with_env
from interstice.agents.slurm.scripts import ScavengerPartition, render_conf_fragment, slurm_dir
from munge_daemon import start_munged

SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel")
START_TIMEOUT_S = 90.0
"""Bound on each start-up wait (daemons, nodes idle, an agent registered: it registers once
its spare launcher has imported torch, 13-24 s on a loaded 2-core VM)."""


def host_name() -> str:
    """This host's short name (the ``NodeHostname`` of every test node)."""
    return socket.gethostname().split(".")[0]


def free_port() -> int:
    """An unused TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def interstice_bin() -> str:
    """The ``interstice`` executable of the running Python (the venv's, or CI's); skips
    where it is not installed."""
    beside = Path(sys.executable).with_name("interstice")
    found = str(beside) if beside.is_file() else shutil.which("interstice")
    if not found:
        pytest.skip("the interstice executable is not installed (pip install -e .)")
    return found


def create_tokens(
    interstice: list[str], database: str, roles: Sequence[str], timeout_s: float
) -> dict[str, str]:
    """One token per role, made with ``interstice token create`` on ``database``.

    Args:
        interstice: the argv that runs ``interstice`` (the installed one, or from an image).
        database: the service's database URL.
        roles: the roles to make a token for.
        timeout_s: bound on each ``token create``, seconds.

    Returns:
        The tokens by role.
    """
    return {
        role: subprocess.run(
            [*interstice, "token", "create", "--role", role, "--db", database],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        ).stdout.strip()
        for role in roles
    }


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log, or why it cannot be read."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"({error.strerror})"


def wait_for(
    what: str,
    check: Callable[[], object],
    timeout_s: float,
    logs: Callable[[], list[Path]],
    tail_lines: int = 25,
) -> object:
    """Poll ``check`` every 0.1 s until it returns a truthy value, and return that value.

    Fails the test naming ``what`` and showing the last ``tail_lines`` lines of each of
    ``logs()`` after ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    tails = "\n".join(f"--- {log}:\n{tail(log, tail_lines)}" for log in logs())
    pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}\n{tails}")


def start_process(arguments: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start a daemon in a session of its own, its output appended to ``log``."""
    with open(log, "ab") as handle:
        return subprocess.Popen(
            arguments, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def stop_process(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM the process's group, SIGKILL after ``timeout_s``; nothing where it is gone."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass


def kill(pid: int, group: bool = False) -> None:
    """SIGKILL a process, or its process group; no error where it is gone."""
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_leftovers(entry: str) -> list[str]:
    """SIGKILL every process whose environment holds ``entry`` (``"KEY=value"``).

    Returns:
        ``"<pid>: <command line>"`` of each process killed (empty: none was left).
    """
    killed = []
    for pid in processes_with_env(entry):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        kill(pid)
        killed.append(f"{pid}: {command.strip()}")
    return killed


def hook_wrapper(root: Path, hook: str, agent_conf: Path) -> Path:
    """A Prolog/Epilog that points the shipped script at the test's agent.conf.

    slurmd passes its hooks only SLURM_* variables, so INTERSTICE_AGENT_CONF is set here.
    """
    wrapper = root / f"{hook}-wrapper.sh"
    wrapper.write_text(
        "#!/bin/bash\n"
        f"export INTERSTICE_AGENT_CONF={agent_conf}\n"
        f"exec {slurm_dir() / f'{hook}.sh'}\n"
    )
    wrapper.chmod(0o755)
    return wrapper


def write_agent_conf(
    root: Path, server_urls: Sequence[str], agent_token: str, grace_s: float
) -> Path:
    """The nodes' agent.conf (mode 0640): the service's URLs (all replicas, comma-separated),
    the agent token, the scavenger partition, the grace, folders under ``root``, and
    ``ports=auto`` (the nodes share this host: each agent needs rendezvous ports of its own)."""
    agent_conf = root / "agent.conf"
    agent_conf.write_text(
        f"server_url={','.join(server_urls)}\nagent_token={agent_token}\n"
        f"partition=scavenger\ngrace_s={grace_s:g}\ninterstice_bin={interstice_bin()}\n"
        f"workdir={root}/work\nstate_dir={root}/run\nports=auto\n"
    )
    agent_conf.chmod(0o640)
    return agent_conf


def slurm_conf(
    root: Path, nodes: Sequence[str], grace_s: float, agent_conf: Path, extra: str = ""
) -> str:
    """slurm.conf of the test cluster: this host as controller, ``nodes`` as compute nodes on
    ports of their own, a ``batch`` partition that never is preempted, and the shipped
    scavenger fragment over all nodes with the test's Prolog/Epilog wrappers; ``extra``
    (whole lines) goes before the nodes.

    ``bf_interval=1``: the backfill planner runs every second, so a pending job's planned
    start (``squeue --start``) is known within a pass.
    """
    host = host_name()
    node_lines = "".join(
        f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={free_port()} "
        "CPUs=1 RealMemory=100 State=UNKNOWN\n"
        for name in nodes
    )
    node_list = ",".join(nodes)
    base = f"""\
ClusterName=interstice-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/linear
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MailProg=/bin/true
{extra}{node_lines}PartitionName=batch Nodes={node_list} PreemptMode=OFF MaxTime=INFINITE State=UP
"""
    wrappers = {hook: hook_wrapper(root, hook, agent_conf) for hook in ("prolog", "epilog")}
    fragment = render_conf_fragment(
        ScavengerPartition(
            prolog=wrappers["prolog"], epilog=wrappers["epilog"], nodes=node_list, grace_s=grace_s
        )
    )
    return base + fragment


@dataclass
class SlurmCluster:
    """A running test cluster.

    Attributes:
        root: its folder (configuration, state, logs, the agents' ``run`` and ``work``).
        env: the environment of its client commands (``SLURM_CONF`` set).
        nodes: the compute nodes' names.
        daemons: slurmctld and the slurmds.
        leftovers: after the cluster stopped, the processes that were still there and were
            killed (``"<pid>: <command line>"``): Slurm's, the agents and their workers.
    """

    root: Path
    env: dict[str, str]
    nodes: tuple[str, ...]
    daemons: list[subprocess.Popen] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)

    @property
    def agent_state_dir(self) -> Path:
        """Where the Prolog keeps the agents' pid files and logs."""
        return self.root / "run"

    def slurm(self, *arguments: str) -> str:
        """Run a Slurm client command against the cluster; returns its stdout."""
        result = subprocess.run(
            arguments, env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        assert result.returncode == 0, f"{arguments}: {result.stderr}"
        return result.stdout

    def logs(self) -> list[Path]:
        """The daemons' and the agents' logs, for a failure message."""
        daemons = [self.root / "log" / "slurmctld.log"]
        daemons += [self.root / "log" / f"slurmd-{node}.log" for node in self.nodes]
        return daemons + sorted(self.agent_state_dir.glob("*.log"))

    def node_states(self) -> dict[str, str]:
        """Each node's state as ``sinfo`` shows it (``idle``, ``allocated``, ...)."""
        result = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return dict(line.split()[:2] for line in result.stdout.splitlines() if line.strip())

    def fill_command(self, *extra: str) -> list[str]:
        """``interstice slurm fill`` against the cluster, placeholders' output under root."""
        return [interstice_bin(), "slurm", "fill", "--output", f"{self.root}/ph-%j.out", *extra]

    def fill_once(self) -> str:
        """Run ``interstice slurm fill --once``; returns its line."""
        result = subprocess.run(
            self.fill_command("--once"),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def cancel_jobs(self, timeout_s: float = 20.0) -> None:
        """Cancel every job and wait (bounded) until none is left."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            queue = subprocess.run(
                ["squeue", "-h", "-o", "%i"],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=10,
            )
            job_ids = queue.stdout.split()
            if queue.returncode != 0 or not job_ids:
                return
            subprocess.run(["scancel", *job_ids], env=self.env, capture_output=True, timeout=10)
            time.sleep(0.2)


def require_slurm() -> None:
    """Skip, saying why, where Slurm or munge is absent or the test is not root."""
    missing = [name for name in SLURM_BINARIES if shutil.which(name) is None]
    if missing:
        pytest.skip(
            f"Slurm/munge not installed ({', '.join(missing)} absent): "
            "apt-get install slurm-wlm munge"
        )
    if os.geteuid() != 0:
        pytest.skip("the real-Slurm tests run slurmd, which must run as root")


@contextmanager
def slurm_cluster(
    root: Path, nodes: Sequence[str], grace_s: float, agent_conf: Path, extra_conf: str = ""
) -> Iterator[SlurmCluster]:
    """munged, slurmctld and a slurmd per node, until the block ends; then every job is
    cancelled (the Epilogs stop the agents) and every process of the cluster is gone.

    Args:
        root: an empty folder for the cluster's files.
        nodes: the compute nodes' names.
        grace_s: GraceTime of the scavenger partition (set the agents' grace_s the same).
        agent_conf: the nodes' agent.conf (see :func:`write_agent_conf`).
        extra_conf: more slurm.conf lines (e.g. ``JobCompType=``), each ending in a newline.

    Yields:
        The cluster, every node idle.
    """
    require_slurm()
    for folder in ("munge", "state", "log", "run", *(f"spool/{node}" for node in nodes)):
        (root / folder).mkdir(mode=0o700, parents=True, exist_ok=True)
    # the agents' workdir: root's, writable by it alone, and passable, so that a job run as
    # its owner reaches its run directory there (interstice.agents.rundir.prepare)
    (root / "work").mkdir(mode=0o755, exist_ok=True)
    (root / "work").chmod(0o755)
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    cluster = SlurmCluster(root=root, env=env, nodes=tuple(nodes))
    munge_pid_file = root / "munge" / "munged.pid"
    slurm_started = False
    try:
        # its files in root/munge: munge.socket and munged.pid, as below and in slurm.conf
        start_munged(root / "munge", root / "log" / "munged.log")
        (root / "slurm.conf").write_text(slurm_conf(root, nodes, grace_s, agent_conf, extra_conf))
        slurm_started = True
        cluster.daemons.append(
            start_process(["slurmctld", "-D", "-i"], root / "log/slurmctld.out", env)
        )
        for node in nodes:
            cluster.daemons.append(
                start_process(["slurmd", "-D", "-N", node], root / f"log/slurmd-{node}.out", env)
            )

        def all_idle() -> bool:
            states = cluster.node_states()
            return sorted(states) == sorted(nodes) and set(states.values()) == {"idle"}

        wait_for("slurmd to register every node idle", all_idle, START_TIMEOUT_S, cluster.logs)
        yield cluster
    finally:
        if slurm_started:
            # The placeholders' Epilogs stop their agents within GraceTime.
            cluster.cancel_jobs(timeout_s=grace_s + 15)
        for process in reversed(cluster.daemons):
            stop_process(process)
        # slurmstepd daemonizes, so it and the job's processes escape the group kills above;
        # every process of this cluster inherited its SLURM_CONF. The agents (started in a
        # session of their own with an environment of their own) and their workers have
        # HOME set to the agents' workdir.
        cluster.leftovers += kill_leftovers(f"SLURM_CONF={root}/slurm.conf")
        cluster.leftovers += kill_leftovers(f"HOME={root}/work")
        if munge_pid_file.is_file():
            kill(int(munge_pid_file.read_text()))
