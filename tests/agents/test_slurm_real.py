"""The Slurm integration on a real single-host Slurm: placeholder, Prolog, preemption, Epilog.

A temporary cluster (munged, slurmctld and slurmd of Debian's ``slurm-wlm``, this host as
controller and only compute node, cgroup-free) runs the shipped slurm.conf fragment, Prolog,
Epilog and placeholder job against the real ``interstice serve`` and ``interstice agent``:

1. ``interstice slurm fill --once`` submits a placeholder to the scavenger partition; the
   Prolog starts the agent, and the service shows the node idle with the agent alive.
2. A job of the ``batch`` partition (higher PriorityTier) preempts it; within GraceTime the
   service shows the agent left and the node not allocatable, and the batch job starts only
   after that (the Epilog holds the node until the agent is gone).

Skips, saying what failed, where Slurm or munge is not installed or not root.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from interstice.agents.slurm.hooks import processes_with_env
from interstice.agents.slurm.scripts import ScavengerPartition, render_conf_fragment, slurm_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

GRACE_S = 15
"""GraceTime of the test's scavenger partition, and the agent's grace."""

START_TIMEOUT_S = 30.0
"""Bound on each start-up wait (daemons, service, job start, agent registration)."""

SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel")


@dataclass
class Cluster:
    """The running test cluster."""

    root: Path
    env: dict[str, str]
    node: str
    server_url: str
    admin_token: str
    agent_state_dir: Path

    def slurm(self, *arguments: str) -> str:
        """Run a Slurm client command against the test cluster; returns its stdout."""
        result = subprocess.run(
            arguments, env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        assert result.returncode == 0, f"{arguments}: {result.stderr}"
        return result.stdout

    def logs(self) -> list[Path]:
        """The daemons' and the agents' logs, for a failure message."""
        daemons = [self.root / "log" / name for name in ("slurmctld.log", "slurmd.log")]
        return daemons + [self.root / "log/serve.log"] + sorted(self.agent_state_dir.glob("*.log"))

    def fill_once(self) -> str:
        """Run ``interstice slurm fill --once`` against the cluster; returns its line."""
        result = subprocess.run(
            [_interstice_bin(), "slurm", "fill", "--once", "--output", f"{self.root}/ph-%j.out"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def node_record(self) -> dict | None:
        """The service's record of this host's node, None before it knows the node."""
        nodes = self.get("/v1/nodes")["data"]
        return next((node for node in nodes if node["name"] == self.node), None)

    def get(self, path: str) -> dict:
        """GET a service path as admin."""
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        response = httpx.get(f"{self.server_url}{path}", headers=headers, timeout=5)
        response.raise_for_status()
        return response.json()


def _wait_for(
    what: str, check: Callable[[], object], timeout_s: float, logs: Callable[[], list[Path]]
) -> object:
    """Poll ``check`` every 0.1 s until it returns a truthy value; fail naming ``what`` and
    showing the tails of ``logs()``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    tails = "\n".join(f"--- {log}:\n{_tail(log)}" for log in logs())
    pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}\n{tails}")


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"({error.strerror})"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _interstice_bin() -> str:
    """The ``interstice`` executable of the running Python (the venv's, or CI's)."""
    beside = Path(sys.executable).with_name("interstice")
    found = str(beside) if beside.is_file() else shutil.which("interstice")
    if not found:
        pytest.skip("the interstice executable is not installed (pip install -e .)")
    return found


def _slurm_conf(root: Path, node: str, wrappers: dict[str, Path]) -> str:
    """A single-host slurm.conf: this host as controller and node, plus the shipped fragment."""
    base = f"""\
ClusterName=interstice-test
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/linear
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MailProg=/bin/true
NodeName={node} NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=batch Nodes={node} PreemptMode=OFF MaxTime=INFINITE State=UP
"""
    fragment = render_conf_fragment(
        ScavengerPartition(
            prolog=wrappers["prolog"], epilog=wrappers["epilog"], nodes=node, grace_s=GRACE_S
        )
    )
    return base + fragment


def _hook_wrapper(root: Path, hook: str, agent_conf: Path) -> Path:
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


def _start(arguments: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "ab") as handle:
        return subprocess.Popen(
            arguments, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the process's group, SIGKILL after 10 s."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """munged, slurmctld, slurmd and ``interstice serve``, all stopped afterwards."""
    missing = [name for name in SLURM_BINARIES if shutil.which(name) is None]
    if missing:
        pytest.skip(
            f"Slurm/munge not installed ({', '.join(missing)} absent): "
            "apt-get install slurm-wlm munge"
        )
    if os.geteuid() != 0:
        pytest.skip("the real-Slurm test runs slurmd, which must run as root")
    interstice = _interstice_bin()
    root = tmp_path
    for folder in ("munge", "state", "spool", "log", "run", "work"):
        (root / folder).mkdir(mode=0o700)
    node = socket.gethostname().split(".")[0]
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    processes: list[subprocess.Popen] = []
    slurm_started = False
    munge_pid_file = root / "munge" / "munged.pid"
    try:
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        munged = subprocess.run(
            [
                "munged",
                "--force",
                f"--socket={root}/munge/munge.socket",
                f"--key-file={key}",
                f"--pid-file={munge_pid_file}",
                f"--log-file={root}/log/munged.log",
                f"--seed-file={root}/munge/munged.seed",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if munged.returncode != 0:
            pytest.skip(f"munged cannot start here: {munged.stderr.strip()}")

        database = f"sqlite:///{root}/interstice.db"
        tokens = {
            role: subprocess.run(
                [interstice, "token", "create", "--role", role, "--db", database],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout.strip()
            for role in ("admin", "agent")
        }
        port = _free_port()
        service = _start(
            [interstice, "serve", "--db", database, "--port", str(port)],
            root / "log/serve.log",
            env,
        )
        processes.append(service)
        server_url = f"http://127.0.0.1:{port}"

        agent_conf = root / "agent.conf"
        agent_conf.write_text(
            f"server_url={server_url}\nagent_token={tokens['agent']}\npartition=scavenger\n"
            f"grace_s={GRACE_S}\ninterstice_bin={interstice}\nworkdir={root}/work\n"
            f"state_dir={root}/run\n"
        )
        agent_conf.chmod(0o640)
        wrappers = {hook: _hook_wrapper(root, hook, agent_conf) for hook in ("prolog", "epilog")}
        (root / "slurm.conf").write_text(_slurm_conf(root, node, wrappers))

        slurm_started = True
        processes.append(_start(["slurmctld", "-D", "-i"], root / "log/slurmctld.out", env))
        processes.append(_start(["slurmd", "-D"], root / "log/slurmd.out", env))

        def logs() -> list[Path]:
            return [root / "log" / name for name in ("slurmctld.log", "slurmd.log", "slurmd.out")]

        def node_idle() -> bool:
            result = subprocess.run(
                ["sinfo", "-h", "-n", node, "-o", "%T"],
                env=env,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            return result.stdout.split() == ["idle"]

        _wait_for("slurmd to register its node idle", node_idle, START_TIMEOUT_S, logs)

        def service_up() -> bool:
            try:
                return httpx.get(f"{server_url}/docs", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        _wait_for(
            "interstice serve to listen",
            service_up,
            START_TIMEOUT_S,
            lambda: [root / "log/serve.log"],
        )
        yield Cluster(
            root=root,
            env=env,
            node=node,
            server_url=server_url,
            admin_token=tokens["admin"],
            agent_state_dir=root / "run",
        )
    finally:
        if slurm_started:
            _cancel_jobs(env)
        for process in reversed(processes):
            _stop(process)
        # slurmstepd daemonizes, so it and the job's processes escape the group kills above;
        # every process of this cluster inherited its SLURM_CONF.
        for pid in processes_with_env(f"SLURM_CONF={root}/slurm.conf"):
            _kill(pid)
        for pid_file in (root / "run").glob("agent-*.pid"):
            _kill(int(pid_file.read_text().split()[0]), group=True)
        if munge_pid_file.is_file():
            _kill(int(munge_pid_file.read_text()))


def _cancel_jobs(env: dict[str, str], timeout_s: float = 20.0) -> None:
    """Cancel every job of the test cluster and wait (bounded) until none is left."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        queue = subprocess.run(
            ["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True, timeout=10
        )
        job_ids = queue.stdout.split()
        if queue.returncode != 0 or not job_ids:
            return
        subprocess.run(["scancel", *job_ids], env=env, capture_output=True, timeout=10)
        time.sleep(0.2)


def _kill(pid: int, group: bool = False) -> None:
    """SIGKILL a process, or its process group; no error where it is gone."""
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def test_placeholder_prolog_preemption_epilog(cluster: Cluster) -> None:
    # 1. fill submits one placeholder (one usable node); the Prolog starts the agent.
    assert "1 usable nodes, 0 placeholders queued or running, submitted 1" in cluster.fill_once()

    def agent_alive_on_idle_node() -> dict | None:
        node = cluster.node_record()
        if node is None or node["agent"] is None:
            return None
        alive = node["state"] == "idle" and node["allocatable"]
        return node if alive and node["agent"]["state"] == "alive" else None

    what = "the service to show the node idle with an alive agent"
    node = _wait_for(what, agent_alive_on_idle_node, START_TIMEOUT_S, cluster.logs)
    agent_id = node["agent"]["agent_id"]
    agents = cluster.get("/v1/agents")["data"]
    assert [(a["agent_id"], a["node"], a["state"]) for a in agents] == [
        (agent_id, cluster.node, "alive")
    ]
    (placeholder_id,) = cluster.slurm("squeue", "-h", "-t", "R", "-o", "%i").split()
    assert "1 placeholders queued or running, submitted 0" in cluster.fill_once()

    # 2. A batch job preempts the placeholder; the agent leaves within GraceTime.
    started_file = cluster.root / "batch-started"
    submitted_at = time.time()
    stamp = "python3 -c 'import time; print(time.time())'"
    cluster.slurm(
        "sbatch", "-p", "batch", "-o", "/dev/null", f"--wrap={stamp} > {started_file}; sleep 2"
    )

    def agent_left() -> dict | None:
        agent = next(a for a in cluster.get("/v1/agents")["data"] if a["agent_id"] == agent_id)
        return agent if agent["state"] == "left" else None

    _wait_for("the agent to leave the service", agent_left, GRACE_S + 5, cluster.logs)
    released_s = time.time() - submitted_at
    node = cluster.node_record()
    assert node is not None and not node["allocatable"] and node["holder"] is None

    _wait_for("the batch job to start", started_file.is_file, START_TIMEOUT_S, cluster.logs)
    what = "the batch job's start time"
    batch_started_at = float(_wait_for(what, started_file.read_text, 5, cluster.logs))
    epilog_line = (cluster.agent_state_dir / f"agent-{placeholder_id}.log").read_text()
    print(
        f"release {released_s:.2f} s after the preempting submission; "
        f"batch job started {batch_started_at - submitted_at:.2f} s after it; "
        f"{epilog_line.splitlines()[-1]}"
    )
    assert released_s < GRACE_S, f"node released {released_s:.1f} s after preemption"
    # The Epilog holds the node until the agent is gone: the real job never shares it.
    assert batch_started_at >= submitted_at + released_s - 0.5
    assert "exited" in epilog_line and "killed" not in epilog_line
    assert not (cluster.agent_state_dir / f"agent-{placeholder_id}.pid").exists()

    # 3. fill queues a new placeholder behind the batch job; when the batch job ends, the
    # node returns to interstice: idle, with its agent registered again.
    assert "0 placeholders queued or running, submitted 1" in cluster.fill_once()
    what = "the node to return idle after the batch job"
    node = _wait_for(what, agent_alive_on_idle_node, START_TIMEOUT_S, cluster.logs)
    assert node["agent"]["agent_id"] == agent_id, "re-registration keeps the agent id"
