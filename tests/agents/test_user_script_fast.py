"""A user's Python script forked from the launcher's fork server, as ``python`` would run it.

A ``command`` that runs this Python on a script or a module (``script.py ...``,
``[sys.executable, "-m", MODULE, ...]``) runs as a function in a process forked from the fork
server, which imported torch and scikit-learn ahead (``forked_main.run_python_main``); any
other command is still executed as a program. Checked on real launchers against fake
services: which commands take the fork path; a script that trains at world size 2 (two
agents, one rank each, its gradients all-reduced) is acked as joined, sees its argv (its
placeholders expanded), cwd, ``sys.path[0]``, ``__name__ == "__main__"`` and the job's env
without the agent's token, runs its ``atexit`` handlers, writes each rank's stdout+stderr in
its rank log and its exit 0 is ``finished``; a module whose rank 1 raises ``SystemExit(3)``
fails the job with ``exit code 3`` and that rank's last log lines, as a program exiting 3
does; a forked worker that never steps writes its stack to its rank log once the job's
``INTERSTICE_FIRST_STEP_DUMP_S`` has passed.
"""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from interstice.agents.launch_config import python_main
from polling import wait_until
from test_user_script import AGENT_TOKEN, MakeAgent, acked, agents, user_command

from interstice import wire

__all__ = ["agents"]  # the fixture, imported for the tests below

SCRIPT = """\
import atexit, json, os, sys
preloaded = "sklearn.datasets" in sys.modules  # imported by the fork server, not by us
import torch
import torch.distributed as dist

out = sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
    parent = f.read().replace(b"\\0", b" ").decode()
seen = {
    "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "name": __name__,
    "main_is_us": sys.modules["__main__"].__dict__ is globals(), "env": dict(os.environ),
    "preloaded": preloaded, "parent": parent, "world_size": dist.get_world_size(),
}
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, f"seen-{rank}.json"), "w") as f:
    json.dump(seen, f)
world_size = seen["world_size"]
total = torch.ones(1)
dist.all_reduce(total)  # a collective across both nodes
assert total.item() == world_size
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 4)
y = x.sum(1, keepdim=True)
for step in range(20):  # data parallel: each rank's share, the gradients all-reduced
    optimizer.zero_grad()
    loss = ((model(x[rank::world_size]) - y[rank::world_size]) ** 2).mean()
    loss.backward()
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
        parameter.grad /= world_size
    optimizer.step()
atexit.register(lambda: open(os.path.join(out, f"atexit-{rank}"), "w").close())
print(f"rank {rank} of {world_size}: final loss {loss.item():.4f}", flush=True)
print(f"rank {rank}: a line on stderr", file=sys.stderr, flush=True)
dist.destroy_process_group()
"""

MODULE = """\
import sys, time
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    print("rank 1 gives up", file=sys.stderr, flush=True)
    raise SystemExit(int(sys.argv[1]))
time.sleep(600)
"""


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "script.py").write_text(SCRIPT)
    (folder / "exiting.py").write_text(MODULE)
    return folder


@pytest.mark.parametrize(
    ("argv", "forked"),
    [
        ([sys.executable, "train.py", "--lr", "1"], True),
        ([sys.executable, "-m", "train", "--lr", "1"], True),
        ([sys.executable, "-u", "train.py"], False),  # interpreter options: a program
        ([sys.executable, "-m"], False),
        ([sys.executable], False),
        (["/bin/sh", "train.py"], False),
        (["python-link", "train.py"], False),  # a link to this Python: maybe a venv's
    ],
)
def test_only_this_python_on_a_script_or_module_takes_the_fork_path(
    tmp_path: Path, argv: list[str], forked: bool
) -> None:
    (tmp_path / "python-link").symlink_to(sys.executable)
    assert python_main(argv, tmp_path, str(tmp_path)) is forked


MULTIPROCESSING_SCRIPT = """\
import multiprocessing, sys

def square(x):
    return x * x

if __name__ == "__main__":
    for method in ("fork", "spawn", "forkserver"):
        with multiprocessing.get_context(method).Pool(1) as pool:
            print(method, pool.map(square, [3]), flush=True)
    raise SystemExit(int(sys.argv[1]))
"""


@pytest.mark.timeout(120)
def test_a_forked_script_may_use_multiprocessing_and_exits_with_its_code(tmp_path: Path) -> None:
    # run_python_main in a plain process (no torch): what the fork server's child runs.
    (tmp_path / "pool.py").write_text(MULTIPROCESSING_SCRIPT)
    argv = [sys.executable, "pool.py", "3"]
    run = f"run_python_main({{}}, None, {argv!r})"
    code = f"from interstice.agents.forked_main import run_python_main; {run}"
    ran = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=100
    )
    assert ran.returncode == 3, ran.stdout
    assert ran.stdout.splitlines() == ["fork [9]", "spawn [9]", "forkserver [9]"]


def run_failing(agents: MakeAgent, tmp_path: Path, code_dir: Path, command: list[str]) -> str:
    """The error heartbeated for ``command`` run by one agent with 2 workers."""
    agent, _ = agents("n0")
    job = {"command": command, "nproc_per_node": 2}
    agent._execute(user_command(agent, tmp_path / "j-1", code_dir, "unused", job=job))
    beat = wait_until(
        lambda: agent.heartbeat_body().get("job_state") == "failed" and agent.heartbeat_body(),
        240,
        "the job failed",
    )
    return beat["error"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_forked_script_at_world_size_2_sees_what_python_would_give_it(
    agents: MakeAgent, tmp_path: Path, code_dir: Path
) -> None:
    (host, host_service), (guest, guest_service) = agents("n0"), agents("n1")
    job_dir = tmp_path / "j-1"
    for agent in (host, guest):
        agent._execute(user_command(host, job_dir, code_dir, "train", world_size=2))
    for agent, service in ((host, host_service), (guest, guest_service)):
        ((body),) = wait_until(lambda a=agent, s=service: acked(a, s), 240, "joined")
        assert body["ok"] is True, body
    for agent in (host, guest):
        beat: dict[str, Any] = wait_until(
            lambda a=agent: (
                a.heartbeat_body().get("job_state") == "finished" and a.heartbeat_body()
            ),
            120,
            "finished",
        )
        assert beat["job_id"] == "j-1" and beat["rendezvous_id"] == "j-1-g1"
        assert "error" not in beat

    out = job_dir / "out"  # {job_dir} expanded
    for rank in (0, 1):
        seen = json.loads((out / f"seen-{rank}.json").read_text())
        assert "multiprocessing.forkserver" in seen["parent"] and seen["preloaded"]
        assert seen["argv"] == [str(code_dir / "script.py"), "train", str(out)]
        assert seen["cwd"] == str(code_dir) and seen["path0"] == str(code_dir)
        assert seen["name"] == "__main__" and seen["main_is_us"]
        assert seen["world_size"] == 2
        env = seen["env"]
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "2"
        assert env["INTERSTICE_JOB_ID"] == "j-1"
        assert env["INTERSTICE_JOB_DIR"] == str(job_dir)
        assert env["INTERSTICE_CHECKPOINT_DIR"] == str(job_dir / "checkpoints")
        assert env["INTERSTICE_TOTAL_SAMPLES"] == "1000"
        assert env["INTERSTICE_GLOBAL_BATCH_SIZE"] == "8"
        assert env["TORCHELASTIC_RUN_ID"] == "j-1-g1"
        assert env["USER_SETTING"] == "42"
        assert "INTERSTICE_AGENT_TOKEN" not in env and AGENT_TOKEN not in env.values()
        assert (out / f"atexit-{rank}").exists()
        log = wire.rank_log_path(job_dir, "j-1-g1", rank).read_text()
        assert f"rank {rank} of 2: final loss" in log
        assert f"rank {rank}: a line on stderr" in log
    assert wire.rank_log_files(job_dir, 1) == [wire.rank_log_path(job_dir, "j-1-g1", 1)]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_forked_modules_system_exit_code_fails_the_job_with_its_log_lines(
    agents: MakeAgent, tmp_path: Path, code_dir: Path
) -> None:
    error = run_failing(agents, tmp_path, code_dir, [sys.executable, "-m", "exiting", "3"])
    assert "rank 1 exited with code 3" in error
    assert "rank 1 gives up" in error  # the last lines of rank 1's log


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_program_still_runs_as_a_process_and_fails_with_its_exit_code(
    agents: MakeAgent, tmp_path: Path, code_dir: Path
) -> None:
    shell = 'echo "rank $RANK gives up" >&2; [ "$RANK" = 0 ] && sleep 600; exit 3'
    command = ["/bin/sh", "-c", shell]
    error = run_failing(agents, tmp_path, code_dir, command)
    assert "rank 1 exited with code 3" in error
    assert "rank 1 gives up" in error


STUCK_SCRIPT = """\
import time
from interstice import elastic

def waiting_for_a_peer():
    time.sleep(4)

elastic.init()
waiting_for_a_peer()
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_forked_worker_that_never_steps_writes_its_stack_to_its_rank_log(
    agents: MakeAgent, tmp_path: Path, code_dir: Path
) -> None:
    # the job's env sets the dump's seconds (interstice.elastic.watchdog): the one
    # INTERSTICE_ name it may set reaches a worker forked from the fork server
    (code_dir / "stuck.py").write_text(STUCK_SCRIPT)
    agent, _ = agents("n0")
    job_dir = tmp_path / "j-1"
    job = {"command": ["stuck.py"], "env": {wire.ENV_FIRST_STEP_DUMP_S: "1"}}
    agent._execute(user_command(agent, job_dir, code_dir, "unused", job=job))
    wait_until(lambda: agent.heartbeat_body().get("job_state") == "finished", 240, "finished")
    log = wire.rank_log_path(job_dir, "j-1-g1", 0).read_text()
    assert log.count("Timeout (0:00:01)!") == 1, log
    assert "waiting_for_a_peer" in log, log
