"""A job that names an owner runs as that owner: its launcher and workers have the owner's
real, effective and saved uid and gid, the owner's groups, HOME, a clean environment and
umask 077; its files belong to the owner with modes 0700/0600; no process of the job holds
the agent's token in its memory; an owner unknown on the node is the node's fault; and the
Slurm Epilog leaves no process of any owner behind, whether the agent obeyed the preemption
signal or was killed.

The generation tests create the Unix accounts alice and bob (removed afterwards; accounts
that already exist are used and kept) and need root. The interpreter must be one the
accounts can run (not under a 0700 home of root's).
"""

import json
import os
import pwd
import secrets
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from interstice.agents import rundir
from interstice.agents.launch_config import NodeSettings
from interstice.agents.launcher import Launcher
from interstice.agents.launcher_process import prepare_job_dir
from interstice.agents.protocol import BadCommand, parse_command
from interstice.agents.slurm.config import load_agent_conf
from interstice.agents.slurm.env import SlurmJobEnv
from interstice.agents.slurm.hooks import processes_with_env, start_agent, stop_agent
from interstice.agents.stopping import end_generation, kill
from polling import wait_until
from test_agent_commands import FakeService, command, make_agent
from test_slurm_hooks import alive, write_conf
from unix_accounts import owner_accounts, shared_folder

from interstice import wire
from interstice.ports import free_ports

TOKEN = "agent-token-" + secrets.token_hex(16)
PROBE = """
import json, os, sys, time
from pathlib import Path
import torch
from interstice import elastic

ctx = elastic.init()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
state = elastic.State(
    model=model, optimizer=optimizer, sampler=elastic.ElasticSampler(8, 1, seed=0),
    checkpoint_dir=os.environ["INTERSTICE_CHECKPOINT_DIR"], total_samples=8,
)
state.save()
elastic.report(step=1, samples=1, loss=0.5)
elastic.save_final(model)
mask = os.umask(0)
os.umask(mask)
identity = {
    "resuid": os.getresuid(), "resgid": os.getresgid(), "groups": sorted(os.getgroups()),
    "umask": mask, "cwd": os.getcwd(), "env": dict(os.environ),
}
job_dir = Path(os.environ["INTERSTICE_JOB_DIR"])
(job_dir / f"identity-{ctx.rank}.json").write_text(json.dumps(identity))
print("probe: written", flush=True)
stop = Path(os.environ["INTERSTICE_RUN_DIR"]) / "stop"
deadline = time.monotonic() + 300
while not stop.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""
MEMORY_SCAN = r"""
import json, re, sys
pids, needles = json.loads(sys.argv[1]), [n.encode() for n in json.loads(sys.argv[2])]
found = {}
for pid in pids:
    hits, error = set(), None
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in maps:
                fields = line.split()
                start, end = (int(x, 16) for x in fields[0].split("-"))
                name = fields[5] if len(fields) > 5 else ""
                special = name in ("[vvar]", "[vsyscall]")
                if "r" not in fields[1] or special or end - start > 1 << 30:
                    continue
                try:
                    mem.seek(start)
                    chunk = mem.read(end - start)
                except OSError:
                    continue
                hits.update(n.decode() for n in needles if n in chunk)
    except OSError as e:
        error = f"{type(e).__name__}: {e}"
    found[pid] = {"hits": sorted(hits), "error": error}
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def accounts() -> Iterator[dict[str, pwd.struct_passwd]]:
    """alice (with a supplementary group) and bob, created for the module and removed."""
    with owner_accounts() as created:
        yield created


@pytest.fixture(scope="module")
def share(accounts: dict[str, pwd.struct_passwd]) -> Iterator[Path]:
    """A shared folder like a cluster's, with the probe job's code."""
    with shared_folder(accounts) as root:
        (root / "code" / "probe.py").write_text(PROBE)
        (root / "code" / "probe.py").chmod(0o644)
        yield root


def start_command(
    share: Path, job_id: str, owner: dict[str, Any] | None, port: int, **job: Any
) -> dict[str, Any]:
    job_dir = share / "checkpoints" / (owner["name"] if owner else "root") / job_id
    return {
        "command_id": 1,
        "kind": "start",
        "job_id": job_id,
        "world_size": 1,
        "rendezvous_endpoint": f"127.0.0.1:{port}",
        "rendezvous_id": f"{job_id}-g1",
        "job": {
            "global_batch_size": 1,
            "total_samples": 8,
            "min_nodes": 1,
            "max_nodes": 1,
            "command": [str(share / "code" / "probe.py")],
            "job_dir": str(job_dir),
            "checkpoint_dir": str(wire.checkpoint_dir(job_dir)),
            "owner": owner,
            **job,
        },
    }


def launcher_tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


@pytest.fixture(scope="module")
def alice_run(share: Path, accounts: dict[str, pwd.struct_passwd]) -> Iterator[dict[str, Any]]:
    """One generation of alice's probe job, run by a launcher of an agent (this process,
    root) that holds a token in its environment; what the probe and a memory scan saw."""
    alice = accounts["alice"]
    ports = free_ports(2)
    settings = NodeSettings(
        workdir=share / "agent", node="n0", host="127.0.0.1", ports=ports, secrets=(TOKEN,)
    )
    marker = "probe-marker-" + secrets.token_hex(8)
    os.environ[wire.ENV_AGENT_TOKEN] = TOKEN
    launcher = Launcher(settings)
    owner = {"name": "alice", "uid": alice.pw_uid}
    command = parse_command(
        start_command(share, "j-alice", owner, ports[0], env={"PROBE_MARKER": marker})
    )
    generation = launcher.launch(command)
    try:
        identity_path = Path(command.job.job_dir) / "identity-0.json"  # type: ignore[union-attr]
        deadline = time.monotonic() + 300
        while not identity_path.exists():
            if generation.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the probe did not run: {generation.log_tail(3000)}")
            time.sleep(0.2)
        processes = launcher_tree(generation.process.pid)
        scan = subprocess.run(
            [
                *("runuser", "-u", "alice", "--", sys.executable, "-c", MEMORY_SCAN),
                json.dumps([p.pid for p in processes]),
                json.dumps([TOKEN, marker]),
            ],
            capture_output=True,
            text=True,
            cwd="/",
            check=True,
        )
        uids = {p.pid: (p.uids(), p.gids()) for p in processes}
        # what the agent gave the launcher (its workers add torch's and the job's variables)
        environ = Path(f"/proc/{generation.process.pid}/environ").read_bytes()
        launcher_env = dict(entry.split("=", 1) for entry in environ.decode().split("\0") if entry)
        end_generation(generation, time.monotonic() + 30)
        yield {
            "generation": generation,
            "identity": json.loads(identity_path.read_text()),
            "scan": json.loads(scan.stdout),
            "marker": marker,
            "uids": uids,
            "launcher_env": launcher_env,
            "pids": [p.pid for p in processes],
        }
    finally:
        kill(generation.process)
        launcher.close_spare()
        os.environ.pop(wire.ENV_AGENT_TOKEN, None)


def test_the_launcher_and_workers_run_with_the_owners_ids_and_groups(
    alice_run: dict[str, Any], accounts: dict[str, pwd.struct_passwd]
) -> None:
    alice = accounts["alice"]
    identity = alice_run["identity"]
    assert identity["resuid"] == [alice.pw_uid] * 3
    assert identity["resgid"] == [alice.pw_gid] * 3
    groups = sorted(set(os.getgrouplist("alice", alice.pw_gid)))
    assert sorted(set(identity["groups"])) == groups
    assert 0 not in identity["groups"]
    # every process of the generation (launcher, fork server, workers), as ps shows them
    assert len(alice_run["uids"]) >= 2
    for pid, (uids, gids) in alice_run["uids"].items():
        assert tuple(uids) == (alice.pw_uid,) * 3, pid
        assert tuple(gids) == (alice.pw_gid,) * 3, pid


def test_the_workers_get_the_owners_home_a_clean_environment_and_umask_077(
    alice_run: dict[str, Any], accounts: dict[str, pwd.struct_passwd], share: Path
) -> None:
    alice = accounts["alice"]
    identity = alice_run["identity"]
    env = identity["env"]
    assert identity["umask"] == 0o077
    assert identity["cwd"] == str(share / "checkpoints" / "alice" / "j-alice")
    assert env["HOME"] == alice.pw_dir and env["USER"] == env["LOGNAME"] == "alice"
    assert env["PROBE_MARKER"] == alice_run["marker"]  # the job's own env
    assert env[wire.ENV_JOB_ID] == "j-alice"
    assert TOKEN not in env.values()
    interstice_names = {name for name in env if name.startswith("INTERSTICE_")}
    assert interstice_names <= set(wire.JOB_ENV_VARS)
    # The launcher starts with nothing of the agent's environment but its PATH.
    launcher_env = alice_run["launcher_env"]
    assert set(launcher_env) == {"PATH", "HOME", "USER", "LOGNAME", "LOGLEVEL"}, launcher_env
    assert launcher_env["PATH"] == os.environ["PATH"] and launcher_env["HOME"] == alice.pw_dir


def test_the_jobs_files_belong_to_the_owner_with_modes_0700_and_0600(
    alice_run: dict[str, Any], accounts: dict[str, pwd.struct_passwd], share: Path
) -> None:
    alice = accounts["alice"]
    generation = alice_run["generation"]
    job_dir = share / "checkpoints" / "alice" / "j-alice"
    folders = [
        job_dir,
        wire.checkpoint_dir(job_dir),
        wire.final_dir(job_dir),
        wire.logs_dir(job_dir),
        generation.run_dir,
    ]
    files = [
        *wire.checkpoint_dir(job_dir).iterdir(),
        wire.final_dir(job_dir) / wire.FINAL_MODEL_FILE,
        wire.metrics_path(job_dir),
        wire.rank_log_path(job_dir, "j-alice-g1", 0),
        wire.progress_path(generation.run_dir, 0),
        wire.stop_path(generation.run_dir),
    ]
    for path, mode in [*((f, 0o700) for f in folders), *((f, 0o600) for f in files)]:
        status = path.lstat()
        assert (status.st_uid, stat.S_IMODE(status.st_mode)) == (alice.pw_uid, mode), path
    logs = share / "agent" / "logs"  # the launchers' logs stay the agent's
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700 and logs.stat().st_uid == 0


def test_no_process_of_the_job_holds_the_agents_token_in_its_memory(
    alice_run: dict[str, Any],
) -> None:
    scan = alice_run["scan"]
    assert set(map(int, scan)) == set(alice_run["pids"])
    errors = {pid: result["error"] for pid, result in scan.items() if result["error"]}
    if len(errors) == len(scan):
        pytest.skip(f"the owner may not read its own processes' memory here: {errors}")
    # The scan works: it finds the job's own variable in the worker's memory ...
    assert any(alice_run["marker"] in result["hits"] for result in scan.values()), scan
    # ... and the agent's token in none.
    assert not [pid for pid, result in scan.items() if TOKEN in result["hits"]], scan


# -- an owner this node cannot run as ------------------------------------------------------


@pytest.fixture
def launcher(tmp_path: Path) -> Launcher:
    ports = free_ports(2)
    return Launcher(NodeSettings(workdir=tmp_path, node="n7", host="127.0.0.1", ports=ports))


def refusal(launcher: Launcher, tmp_path: Path, owner: dict[str, Any]) -> BadCommand:
    command = parse_command(start_command(tmp_path, "j-1", owner, 29400))
    with pytest.raises(BadCommand) as refused:
        launcher.launch(command)
    assert launcher._spare is None  # nothing started
    assert not (tmp_path / "j-1").exists()  # nor made
    return refused.value


def test_an_owner_unknown_on_the_node_is_the_nodes_fault(
    launcher: Launcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    error = refusal(launcher, tmp_path, {"name": "no-such-user-x", "uid": 4242})
    assert not error.job_failed
    assert str(error) == "node n7: owner 'no-such-user-x' is unknown here (no passwd entry)"


def test_an_owner_of_another_uid_on_the_node_is_the_nodes_fault(
    launcher: Launcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    name = pwd.getpwuid(0).pw_name  # uid 0 here, 4242 for the service
    error = refusal(launcher, tmp_path, {"name": name, "uid": 4242})
    assert not error.job_failed
    assert str(error) == f"node n7: owner {name!r} is uid 0 here, not uid 4242 as on the service"


def test_an_owner_of_uid_0_fails_the_job_on_every_node(launcher: Launcher, tmp_path: Path) -> None:
    error = refusal(launcher, tmp_path, {"name": "root", "uid": 0})
    assert error.job_failed
    assert str(error) == "owner 'root' is uid 0: no job runs as root"


def test_an_agent_that_is_not_root_refuses_an_owners_job_as_the_nodes_fault(
    launcher: Launcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    error = refusal(launcher, tmp_path, {"name": "alice", "uid": 1001})
    assert not error.job_failed
    assert "the agent runs as uid 1234, not root" in str(error)


# -- the Epilog leaves no process of any account behind --------------------------------------


def marked(job_id: str) -> dict[int, int]:
    """The live processes that carry the placeholder job's marker: pid -> real uid."""
    return {
        pid: psutil.Process(pid).uids().real
        for pid in processes_with_env(f"{wire.ENV_SLURM_JOB_MARKER}={job_id}")
        if alive(pid)
    }


@pytest.mark.parametrize("end", ["preemption", "agent SIGKILL"])
def test_the_epilog_leaves_no_process_of_any_owner_behind(
    accounts: dict[str, pwd.struct_passwd], tmp_path: Path, end: str
) -> None:
    job_id = "41" if end == "preemption" else "42"
    # A stand-in agent whose workers run as alice and bob, each in a session of its own (as
    # the launchers are): it exits at the preemption signal, leaving them, or is killed.
    workers = " ".join(f"runuser -u {name} -- setsid sleep 120 &" for name in ("alice", "bob"))
    conf = load_agent_conf(write_conf(tmp_path, on_term=f"trap 'exit 0' TERM; {workers}"))
    pid = start_agent(conf, SlurmJobEnv(job_id=job_id, node="n1", partition="scavenger"))
    assert pid is not None
    uids = {accounts[name].pw_uid for name in ("alice", "bob")}
    wait_until(lambda: uids <= set(marked(job_id).values()), 30.0)
    if end == "agent SIGKILL":
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not alive(pid))

    stopped = stop_agent(conf, job_id)
    assert stopped is not None and stopped.signalled == (end == "preemption")
    wait_until(lambda: not marked(job_id), 5.0)


def test_the_agent_acks_an_unknown_owner_as_the_nodes_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    service = FakeService()
    agent = make_agent(tmp_path, service)
    payload = command(world_size=2)
    payload["job"]["owner"] = {"name": "no-such-user-x", "uid": 4242}
    agent._execute(payload)
    ((_, body),) = service.acks()
    assert body == {
        "ok": False,
        "error": f"node {agent.config.node}: owner 'no-such-user-x' is unknown here "
        "(no passwd entry)",
        "job_failed": False,
        "node_fault": True,  # the service quarantines the node and places the job elsewhere
    }
    assert agent.generation is None


# -- the agent's writes into and reads from the job's folders --------------------------------


def test_the_agent_reads_only_regular_files_of_the_jobs_account(tmp_path: Path) -> None:
    me = os.geteuid()
    secret = tmp_path / "secret"
    secret.write_text("root's")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "plain.json").write_text('{"step": 3}')
    (run_dir / "link.json").symlink_to(secret)
    os.mkfifo(run_dir / "fifo.json")  # would block a plain open for reading
    assert rundir.read_json(run_dir / "plain.json", me) == {"step": 3}
    assert rundir.read_job_file(run_dir / "plain.json", me, tail_bytes=3) == b" 3}"
    assert rundir.read_job_file(run_dir / "link.json", me) is None
    assert rundir.read_job_file(run_dir / "fifo.json", me) is None
    assert rundir.read_job_file(run_dir / "plain.json", me + 1) is None  # another account's
    (run_dir / "sub").symlink_to(tmp_path)  # a link higher up reaches a file of another uid
    assert rundir.read_job_file(run_dir / "sub" / "secret", me + 1) is None


def test_the_stop_file_is_made_new_and_never_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("untouched")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / wire.STOP_FILE).symlink_to(target)
    rundir.request_stop(run_dir, os.geteuid(), os.getegid())
    assert target.read_text() == "untouched" and (run_dir / wire.STOP_FILE).is_symlink()
    rundir.clear(run_dir)
    rundir.request_stop(run_dir, os.geteuid(), os.getegid())
    stop = (run_dir / wire.STOP_FILE).lstat()
    assert stat.S_ISREG(stop.st_mode) and stat.S_IMODE(stop.st_mode) == 0o600


def test_an_owners_run_directory_needs_a_workdir_of_the_agents_alone(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    workdir.chmod(0o777)
    with pytest.raises(BadCommand, match="must belong to uid") as refused:
        rundir.prepare(workdir / "j-1", os.geteuid() + 1, os.getegid())
    assert not refused.value.job_failed and not (workdir / "j-1").exists()
    rundir.prepare(workdir / "j-1", os.geteuid(), os.getegid())  # the agent's own job: as ever
    assert stat.S_IMODE((workdir / "j-1").stat().st_mode) == 0o700


def test_an_owners_job_directory_must_lie_where_no_other_account_can_change_it(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("gives a folder to another uid: needs root")

    def problem(parent: Path) -> str | None:
        job_dir = parent / "j-1"
        config = {"job_dir": str(job_dir), "owner": "me", "cwd": str(job_dir)}
        return prepare_job_dir(config)

    assert problem(tmp_path / "mine") is None  # made, with its parent, as this account
    assert stat.S_IMODE((tmp_path / "mine" / "j-1").stat().st_mode) == 0o700
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 4242, 4242)
    assert f"lies in {str(theirs)!r} (uid 4242" in str(problem(theirs))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert "mode 0777), which another account than me may change" in str(problem(shared))
    shared.chmod(0o1777)  # sticky, as /tmp: no one else may replace what is there
    assert problem(shared) is None
