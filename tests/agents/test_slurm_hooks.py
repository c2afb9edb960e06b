"""The Prolog and Epilog without Slurm: the agent configuration file, starting the agent
detached, and stopping it within the grace, driven through the shipped prolog.sh/epilog.sh
with the environment slurmd gives them.

A stand-in ``interstice`` executable runs the real ``interstice slurm prolog|epilog`` but,
for ``interstice agent``, a shell loop that records its arguments and environment and obeys
(or ignores) SIGTERM; the real agent runs in tests/agents/test_slurm_real.py.
"""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from interstice.agents.slurm.config import AgentConfError, conf_path, load_agent_conf
from interstice.agents.slurm.env import SlurmJobEnv
from interstice.agents.slurm.hooks import agent_command, pid_file, start_agent, stop_agent
from interstice.agents.slurm.scripts import slurm_dir
from polling import wait_until

INTERSTICE = f'{sys.executable} -c "from interstice.cli import app; app()"'
"""The real ``interstice`` command of the running Python, wherever pip put its script."""

STAND_IN = """#!/bin/bash
if [ "$1" != agent ]; then exec {interstice} "$@"; fi
{on_term}
printf '%s\\n' "$*" > "{record}/argv"
env > "{record}/env.part" && mv "{record}/env.part" "{record}/env"
sleep 60 &
wait
"""
"""The stand-in ``interstice``: real for ``slurm ...``; a fake agent with a child (a worker).
Its records appear whole (``env`` through a rename): the tests wait for the file, then read it."""

OBEYS = "trap 'kill $!; exit 0' TERM"
IGNORES = "trap '' TERM"


def write_conf(tmp_path: Path, on_term: str = OBEYS, **values: str) -> Path:
    """A valid agent.conf (mode 0640) whose interstice_bin is the stand-in."""
    stand_in = tmp_path / "interstice"
    stand_in.write_text(STAND_IN.format(interstice=INTERSTICE, record=tmp_path, on_term=on_term))
    stand_in.chmod(0o755)
    settings = {
        "server_url": "http://head:8000/",
        "agent_token": "s3cret",
        "partition": "scavenger",
        "grace_s": "2",
        "interstice_bin": str(stand_in),
        "workdir": str(tmp_path / "work"),
        "state_dir": str(tmp_path / "run"),
        **values,
    }
    path = tmp_path / "agent.conf"
    path.write_text("# interstice agent\n" + "".join(f"{k}={v}\n" for k, v in settings.items()))
    path.chmod(0o640)
    return path


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_load_agent_conf(tmp_path: Path) -> None:
    conf = load_agent_conf(write_conf(tmp_path))
    assert conf.server_url == "http://head:8000"
    assert conf.grace_s == 2.0 and conf.partition == "scavenger"
    assert conf.signal_number.name == "SIGTERM"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"server_url": "head:8000"}, "server_url: Value error, 'head:8000': each URL must"),
        ({"server_url": "http://a:8000,b:8000"}, "server_url: Value error, 'b:8000': each URL"),
        ({"server_url": ","}, "server_url: Value error, ',': each URL must start"),
        ({"agent_token": ""}, "agent_token: String should have at least 1 character"),
        ({"grace_s": "0.5"}, "grace_s: Input should be greater than or equal to 1"),
        ({"preemption_signal": "SIGNOPE"}, "preemption_signal: Value error, 'SIGNOPE'"),
        ({"grace": "3"}, "grace: Extra inputs are not permitted"),
        ({"ports": "29500,x"}, "ports: Value error, '29500,x': give ports in 1..65535"),
        ({"ports": "0"}, "ports: Value error, '0': give ports"),
    ],
)
def test_load_agent_conf_names_the_bad_key(tmp_path: Path, values: dict, message: str) -> None:
    with pytest.raises(AgentConfError, match=message):
        load_agent_conf(write_conf(tmp_path, **values))


def test_load_agent_conf_refuses_a_readable_token(tmp_path: Path) -> None:
    path = write_conf(tmp_path)
    path.chmod(0o644)
    with pytest.raises(AgentConfError, match="readable or writable by others .mode 0644."):
        load_agent_conf(path)
    with pytest.raises(AgentConfError, match="cannot read .*absent.conf"):
        load_agent_conf(tmp_path / "absent.conf")


def test_agent_conf_with_every_replica_gives_the_agent_each_url(tmp_path: Path) -> None:
    path = write_conf(tmp_path, server_url="http://head-a:8000/, http://head-b:8000")
    conf = load_agent_conf(path)
    assert conf.server_url == "http://head-a:8000,http://head-b:8000"
    command = agent_command(conf, "a01n02")
    assert command[command.index("--server") + 1] == "http://head-a:8000,http://head-b:8000"


def test_agent_ports_given_default_or_picked_free(tmp_path: Path) -> None:
    def ports_of(**values: str) -> list[str]:
        command = agent_command(load_agent_conf(write_conf(tmp_path, **values)), "a01n02")
        return command[command.index("--ports") + 1 :][:1] if "--ports" in command else []

    assert ports_of() == []  # the agent's own default
    assert ports_of(ports="29600, 29601") == ["29600,29601"]
    first, second = (ports_of(ports="auto")[0].split(",") for _ in range(2))
    assert len(first) == 2 and len(set(first)) == 2 and all(int(p) > 0 for p in first)
    assert len(second) == 2


def test_conf_path() -> None:
    assert conf_path({}) == Path("/etc/interstice/agent.conf")
    assert conf_path({"INTERSTICE_AGENT_CONF": "/x.conf"}) == Path("/x.conf")


def test_agent_command_keeps_the_token_off_the_command_line(tmp_path: Path) -> None:
    command = agent_command(load_agent_conf(write_conf(tmp_path)), "a01n02")
    assert "s3cret" not in command
    assert command[1:] == [
        "agent", "--server", "http://head:8000", "--node", "a01n02",
        "--workdir", str(tmp_path / "work"), "--report-idle",
        "--preempt-signal", "SIGTERM", "--grace-s", "2",
    ]  # fmt: skip


def test_start_agent_ignores_other_partitions(tmp_path: Path) -> None:
    conf = load_agent_conf(write_conf(tmp_path))
    assert start_agent(conf, SlurmJobEnv(job_id="5", node="n1", partition="batch")) is None
    assert not (tmp_path / "run").exists()


def test_start_then_stop_within_grace(tmp_path: Path) -> None:
    conf = load_agent_conf(write_conf(tmp_path))
    pid = start_agent(conf, SlurmJobEnv(job_id="5", node="n1", partition="scavenger"))
    assert pid is not None
    wait_until(lambda: (tmp_path / "env").is_file() and (tmp_path / "argv").is_file())
    assert os.getsid(pid) == pid, "the agent runs in a session of its own"
    assert "INTERSTICE_AGENT_TOKEN=s3cret" in (tmp_path / "env").read_text().splitlines()
    assert "--node n1" in (tmp_path / "argv").read_text()
    assert pid_file(conf, "5").read_text().split()[0] == str(pid)
    assert stat_mode(tmp_path / "run") == 0o700

    stopped = stop_agent(conf, "5")
    assert stopped is not None and stopped.signalled and stopped.exited_within_grace
    assert stopped.waited_s < conf.grace_s
    assert not alive(pid)
    assert not pid_file(conf, "5").exists()
    assert stop_agent(conf, "5") is None, "a second Epilog finds nothing to do"


def test_stop_kills_a_hung_agent_and_its_workers_at_the_grace(tmp_path: Path) -> None:
    conf = load_agent_conf(write_conf(tmp_path, on_term=IGNORES, grace_s="1"))
    pid = start_agent(conf, SlurmJobEnv(job_id="6", node="n1", partition="scavenger"))
    assert pid is not None
    wait_until(lambda: (tmp_path / "env").is_file())
    workers = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    assert workers, "the stand-in agent has a child"

    stopped = stop_agent(conf, "6")
    assert stopped is not None and stopped.signalled and not stopped.exited_within_grace
    assert 1.0 <= stopped.waited_s < 3.0
    wait_until(lambda: not alive(pid) and not any(alive(worker) for worker in workers), 5.0)


def test_start_agent_as_agent_user() -> None:
    if os.geteuid() != 0:
        pytest.skip("starting the agent as another user needs root")
    nobody = pwd.getpwnam("nobody")
    # A folder nobody can enter, unlike pytest's tmp_path (0700 root).
    folder = Path(tempfile.mkdtemp(prefix="interstice-agent-user-"))
    try:
        folder.chmod(0o777)
        conf = load_agent_conf(write_conf(folder, agent_user="nobody"))
        pid = start_agent(conf, SlurmJobEnv(job_id="8", node="n1", partition="scavenger"))
        assert pid is not None
        wait_until(lambda: (folder / "env").is_file())
        status = Path(f"/proc/{pid}/status").read_text()
        assert f"Uid:\t{nobody.pw_uid}\t" in status and f"Gid:\t{nobody.pw_gid}\t" in status
        assert (folder / "work").stat().st_uid == nobody.pw_uid
        stopped = stop_agent(conf, "8")
        assert stopped is not None and stopped.exited_within_grace
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_unknown_agent_user_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AgentConfError, match="agent_user: Value error, no such user 'no-such-u'"):
        load_agent_conf(write_conf(tmp_path, agent_user="no-such-u"))


def test_stop_kills_workers_a_crashed_agent_left_behind(tmp_path: Path) -> None:
    crash = f"setsid sleep 60 & echo $! > {tmp_path}/orphan; exit 3"
    conf = load_agent_conf(write_conf(tmp_path, on_term=crash))
    pid = start_agent(conf, SlurmJobEnv(job_id="9", node="n1", partition="scavenger"))
    assert pid is not None
    wait_until(lambda: (tmp_path / "orphan").is_file() and not alive(pid))
    orphan = int((tmp_path / "orphan").read_text())
    # The worker leaves the agent's session (setsid runs in it after the pid file is written).
    wait_until(lambda: alive(orphan) and os.getsid(orphan) != pid)

    stopped = stop_agent(conf, "9")
    assert stopped is not None and not stopped.signalled
    wait_until(lambda: not alive(orphan), 5.0)


def test_stop_does_not_signal_a_reused_pid(tmp_path: Path) -> None:
    conf = load_agent_conf(write_conf(tmp_path))
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "run").mkdir()
        pid_file(conf, "7").write_text(f"{bystander.pid} 1\n")  # start time does not match
        stopped = stop_agent(conf, "7")
        assert stopped is not None and not stopped.signalled
        assert bystander.poll() is None, "the bystander was left alone"
        assert not pid_file(conf, "7").exists()
    finally:
        bystander.kill()
        bystander.wait(timeout=10)


def test_stop_ignores_a_corrupt_pid_file(tmp_path: Path) -> None:
    conf = load_agent_conf(write_conf(tmp_path))
    (tmp_path / "run").mkdir()
    pid_file(conf, "10").write_text("123\n")
    assert stop_agent(conf, "10") is None
    assert not pid_file(conf, "10").exists()


def slurmd_env(conf: Path, job_id: str, partition: str) -> dict[str, str]:
    """The environment slurmd gives a Prolog/Epilog (no PATH), plus the conf override."""
    return {
        "SLURM_JOB_ID": job_id,
        "SLURMD_NODENAME": "n1",
        "SLURM_JOB_PARTITION": partition,
        "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
        "INTERSTICE_AGENT_CONF": str(conf),
    }


def run_hook(name: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(slurm_dir() / name)], env=env, capture_output=True, text=True, timeout=30
    )


def test_shell_hooks_start_and_stop_the_agent(tmp_path: Path) -> None:
    conf = write_conf(tmp_path)
    prolog = run_hook("prolog.sh", slurmd_env(conf, "11", "scavenger"))
    assert prolog.returncode == 0, prolog.stderr
    assert "prolog: job 11: agent of node n1 started" in prolog.stdout
    pid = int((tmp_path / "run" / "agent-11.pid").read_text().split()[0])
    assert alive(pid)

    epilog = run_hook("epilog.sh", slurmd_env(conf, "11", "scavenger"))
    assert epilog.returncode == 0, epilog.stderr
    assert f"epilog: job 11: agent pid {pid} exited" in epilog.stdout
    assert not alive(pid) and not (tmp_path / "run" / "agent-11.pid").exists()
    assert "exited" in (tmp_path / "run" / "agent-11.log").read_text()


def test_shell_hooks_skip_other_jobs_without_python(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, interstice_bin="/nonexistent/interstice")
    for hook in ("prolog.sh", "epilog.sh"):
        result = run_hook(hook, slurmd_env(conf, "12", "batch"))
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_shell_hooks_exit_0_on_a_bad_configuration(tmp_path: Path) -> None:
    """A fault of interstice must not drain the node: exit 0, the error on stderr."""
    conf = write_conf(tmp_path)
    conf.chmod(0o644)
    result = run_hook("prolog.sh", slurmd_env(conf, "13", "scavenger"))
    assert result.returncode == 0
    assert "error: prolog:" in result.stderr and "readable or writable by others" in result.stderr
    assert not (tmp_path / "run").exists()


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777
