"""A user's own script as a job, on real launchers, against a fake service.

The script uses plain ``torch.distributed`` (no ``interstice.elastic``): the agent must judge
joining and ending from torch elastic alone. Checked: a script that exits 1 on one rank is
``failed`` with that rank's last log lines; a rescale delivers SIGTERM to the workers; a
missing script, an argv too long for the OS and a fractional ``total_samples`` are acked
``job_failed`` at once, before anything starts; a stop requested twice (a preemption
taking over a rescale's stop) sends each worker one SIGTERM, so its checkpoint completes.
(A script that trains at world size 2, on two agents: tests/agents/test_user_script_fast.py.)
"""

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from interstice.agents.agent import Agent
from interstice.agents.generation import Generation
from interstice.agents.launch_config import clean_environment
from interstice.agents.launcher_process import EXIT_BAD_JOB, EXIT_LAUNCH_FAILED
from interstice.agents.outcome import Outcome, judge
from interstice.agents.protocol import parse_command
from interstice.agents.stopping import end_generation
from polling import wait_until
from test_agent_commands import FakeService, make_agent

from interstice import files, wire

AGENT_TOKEN = "agent-secret-7f3a"
ARG_MAX = os.sysconf("SC_ARG_MAX")  # execve's limit on argv + env, bytes
SCRIPT = """\
import os, signal, sys, time
import torch.distributed as dist

mode, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
os.makedirs(out, exist_ok=True)
if mode == "crash":
    if rank == 1:
        print("boom on rank 1", file=sys.stderr, flush=True)
        sys.exit(1)
    time.sleep(600)
elif mode == "wait-for-sigterm":
    def on_sigterm(signum, frame):
        open(os.path.join(out, f"sigterm-{rank}"), "w").close()
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_sigterm)
    open(os.path.join(out, f"ready-{rank}"), "w").close()
    while True:
        time.sleep(0.05)
elif mode == "checkpoint-on-sigterm":  # as interstice.elastic does: a second SIGTERM kills
    signalled = []
    def on_sigterm(signum, frame):
        with open(os.path.join(out, f"sigterm-{rank}"), "a") as f:
            f.write("SIGTERM\\n")
        if signalled:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)
        signalled.append(time.monotonic())
    signal.signal(signal.SIGTERM, on_sigterm)
    open(os.path.join(out, f"ready-{rank}"), "w").close()
    while not signalled or time.monotonic() - signalled[0] < 1.0:  # a checkpoint takes 1 s
        time.sleep(0.05)
    open(os.path.join(out, f"checkpointed-{rank}"), "w").close()
    sys.exit(0)
dist.destroy_process_group()
"""

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "script.py").write_text(SCRIPT)
    return folder


MakeAgent = Callable[[str], tuple[Agent, FakeService]]


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MakeAgent]:
    """Makes agents on this machine, each with its fake service; their launchers are
    killed afterwards. The agent token is in the environment, as ``interstice agent``
    would find it."""
    monkeypatch.setenv("INTERSTICE_AGENT_TOKEN", AGENT_TOKEN)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    made: list[Agent] = []

    def make(node: str) -> tuple[Agent, FakeService]:
        service = FakeService()
        agent = make_agent(tmp_path / node, service, token=AGENT_TOKEN, node=node)
        made.append(agent)
        return agent, service

    yield make
    for agent in made:
        agent.launcher.close_spare()
        if agent.generation is not None:
            agent._end_generation(agent.generation, time.monotonic())


def user_command(
    agent: Agent, job_dir: Path, code_dir: Path, mode: str, **changes: Any
) -> dict[str, Any]:
    """A v2 start command for ``script.py MODE {job_dir}/out``."""
    job = {
        "model": None,
        "parallelism": "dp",
        "global_batch_size": 8,
        "total_samples": 1000,
        "min_nodes": 1,
        "max_nodes": 2,
        "command": ["script.py", mode, "{job_dir}/out"],
        "workdir": str(code_dir),
        "env": {"USER_SETTING": "42"},
        "nproc_per_node": 1,
        "job_dir": str(job_dir),
        "checkpoint_dir": str(job_dir / "checkpoints"),
        **changes.pop("job", {}),
    }
    return {
        "command_id": 7,
        "kind": "start",
        "job_id": "j-1",
        "world_size": 1,
        "rendezvous_endpoint": f"127.0.0.1:{agent.config.ports[0]}",
        "rendezvous_id": "j-1-g1",
        "spb_depth": 0,
        "job": job,
        **changes,
    }


def acked(agent: Agent, service: FakeService) -> list[dict]:
    """The acks ``agent`` sent, once it checked its pending start."""
    agent._check_pending_ack()
    return [body for _, body in service.acks()]


def test_the_workers_environment_holds_no_agent_credential() -> None:
    environ = {
        "PATH": "/usr/bin",
        "INTERSTICE_AGENT_TOKEN": AGENT_TOKEN,
        "INTERSTICE_DATABASE_URL": "sqlite:///x",
        "MY_COPY_OF_THE_TOKEN": AGENT_TOKEN,
        "TORCHELASTIC_RUN_ID": "old",
        "INTERSTICE_SLURM_JOB_ID": "5",  # kept: the Epilog finds leftover workers by it
    }
    assert clean_environment(environ, [AGENT_TOKEN]) == {
        "PATH": "/usr/bin",
        "INTERSTICE_SLURM_JOB_ID": "5",
    }


@pytest.mark.parametrize(
    ("job", "error"),
    [
        ({"command": ["missing.py"]}, "no script"),
        ({"command": ["no-such-program-xyz"]}, "no executable"),
        ({"command": ["script.py", "x" * 200_000]}, "E2BIG"),
        ({"total_samples": 1.5}, "total_samples"),
        ({"command": []}, "empty argv"),
        ({"env": {f"BIG_{i}": "x" * 100_000 for i in range(ARG_MAX // 100_000 + 2)}}, "E2BIG"),
        ({"workdir": "/no/such/folder"}, "is not a folder"),
    ],
    ids=[
        "missing-script",
        "missing-program",
        "argv-too-long",
        "fractional-samples",
        "empty",
        "env-too-long",
        "missing-workdir",
    ],
)
def test_a_job_that_cannot_run_is_acked_job_failed_before_anything_starts(
    agents: MakeAgent, tmp_path: Path, code_dir: Path, job: dict, error: str
) -> None:
    agent, service = agents("n0")
    agent._execute(user_command(agent, tmp_path / "j-1", code_dir, "unused", job=job))
    ((body),) = acked(agent, service)
    assert body["ok"] is False and body["job_failed"] is True
    assert error in body["error"]
    assert agent.generation is None
    assert agent.launcher._spare is None  # no launcher was even warmed for it


def test_a_node_side_refusal_is_not_a_job_failure(
    agents: MakeAgent, tmp_path: Path, code_dir: Path
) -> None:
    agent, service = agents("n0")
    agent._execute(user_command(agent, tmp_path / "j-1", code_dir, "unused", world_size=3))
    ((body),) = acked(agent, service)
    assert body["ok"] is False and body["job_failed"] is False
    assert "world_size 3 is outside" in body["error"]


def ended_generation(agent: Agent, tmp_path: Path, code_dir: Path, exit_code: int) -> Any:
    """A generation of ``j-1-g1`` whose launcher (a stand-in process) exited with
    ``exit_code``, made the agent's current one."""
    command = parse_command(user_command(agent, tmp_path / "j-1", code_dir, "unused"))
    process = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({exit_code})"])
    process.wait()
    run_dir = wire.run_dir(agent.config.workdir, "j-1")
    run_dir.mkdir(parents=True, exist_ok=True)
    generation = Generation(
        command=command,
        process=process,
        run_dir=run_dir,
        job_dir=tmp_path / "j-1",
        log_path=tmp_path / "launcher.log",
        result_path=tmp_path / "launcher.result.json",
    )
    agent.generation = generation
    return generation


def test_the_heartbeat_carries_the_generations_progress_and_its_end(
    agents: MakeAgent, tmp_path: Path, code_dir: Path
) -> None:
    agent, _ = agents("n0")
    generation = ended_generation(agent, tmp_path, code_dir, exit_code=0)
    metrics = {"text": "odd", "nan": float("nan"), **{f"m{i}": float(i) for i in range(40)}}
    for local_rank, (rendezvous_id, step) in enumerate([("j-1-g1", 7), ("j-1-g0", 99)]):
        files.write_json_atomic(
            wire.progress_path(generation.run_dir, local_rank),
            {
                "rendezvous_id": rendezvous_id,  # g0: an older generation's, ignored
                "nodes": 2,
                "step": step,
                "samples": 8.0 * step,
                "samples_per_s": 100.0,
                "loss": 0.5,
                "metrics": metrics,
                "state": "finished",
                "time": 1.0,
            },
        )
    beat = agent.heartbeat_body()
    assert beat["rendezvous_id"] == "j-1-g1" and beat["step"] == 7
    assert beat["samples_done"] == 56.0 and beat["world_size"] == 2 and beat["loss"] == 0.5
    assert len(beat["metrics"]) == wire.HEARTBEAT_METRICS_MAX
    assert beat["metrics"]["m0"] == 0.0 and "text" not in beat["metrics"]
    assert "nan" not in beat["metrics"]  # only finite numbers reach the service
    assert beat["job_state"] == "finished" and "error" not in beat

    # A newer command of the job already waits: the end was a peer's stop, not the job's.
    agent._commands.put({"command_id": 9, "job_id": "j-1"})
    assert "job_state" not in agent.heartbeat_body()
    agent._commands.get()
    # Stopped by us: neither finished nor failed.
    generation.stop_requested = True
    assert "job_state" not in agent.heartbeat_body()


def test_a_launcher_that_failed_for_the_node_fails_no_job(
    agents: MakeAgent, tmp_path: Path, code_dir: Path
) -> None:
    agent, _ = agents("n0")
    ended_generation(agent, tmp_path, code_dir, exit_code=EXIT_LAUNCH_FAILED)
    assert "job_state" not in agent.heartbeat_body()
    generation = ended_generation(agent, tmp_path, code_dir, exit_code=EXIT_BAD_JOB)
    files.write_json_atomic(generation.result_path, {"error": "cannot start the workers: E2BIG"})
    beat = agent.heartbeat_body()
    assert beat["job_state"] == "failed" and "E2BIG" in beat["error"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_script_that_exits_1_on_one_rank_fails_with_that_ranks_last_log_lines(
    agents: MakeAgent, tmp_path: Path, code_dir: Path
) -> None:
    agent, service = agents("n0")
    job_dir = tmp_path / "j-1"
    agent._execute(user_command(agent, job_dir, code_dir, "crash", job={"nproc_per_node": 2}))
    beat = wait_until(
        lambda: agent.heartbeat_body().get("job_state") == "failed" and agent.heartbeat_body(),
        240,
        "the job failed",
    )
    assert "rank 1 exited with code 1" in beat["error"]
    assert "boom on rank 1" in beat["error"]  # the last lines of rank 1's log
    assert len(beat["error"]) <= wire.HEARTBEAT_ERROR_MAX_CHARS
    # Joined (its workers ran), so the start itself was acked ok; the end is the failure.
    ((body),) = acked(agent, service)
    assert body["ok"] is True or body["job_failed"] is True


def start_until_ready(
    agent: Agent, service: FakeService, job_dir: Path, code_dir: Path, mode: str
) -> dict[str, Any]:
    """Start ``script.py MODE`` (a mode that waits for SIGTERM) on ``agent``; wait until it
    joined and rank 0 installed its SIGTERM handler. Returns the start command."""
    start = user_command(agent, job_dir, code_dir, mode)
    agent._execute(start)
    wait_until(lambda: acked(agent, service), 240, "joined")
    wait_until(lambda: (job_dir / "out" / "ready-0").exists(), 120, "SIGTERM handler installed")
    return start


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rescale_delivers_sigterm_to_the_workers(
    agents: MakeAgent, tmp_path: Path, code_dir: Path
) -> None:
    agent, service = agents("n0")
    job_dir = tmp_path / "j-1"
    start = start_until_ready(agent, service, job_dir, code_dir, "wait-for-sigterm")
    old = agent.generation
    assert old is not None and agent.heartbeat_body()["job_state"] == "running"

    rescale = {
        **start,
        "command_id": 8,
        "kind": "rescale",
        "rendezvous_id": "j-1-g2",
        "rendezvous_endpoint": f"127.0.0.1:{agent.config.ports[1]}",
    }
    agent._execute(rescale)  # ends the old generation before it launches the new one

    assert (job_dir / "out" / "sigterm-0").exists()  # its handler ran: not killed outright
    assert old.process.poll() is not None
    assert judge(old) == Outcome(None)  # our stop: neither end nor failure
    assert agent.generation is not old and agent.generation.rendezvous_id == "j-1-g2"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_stop_requested_twice_signals_each_worker_once(
    agents: MakeAgent, tmp_path: Path, code_dir: Path
) -> None:
    agent, service = agents("n0")
    job_dir = tmp_path / "j-1"
    start_until_ready(agent, service, job_dir, code_dir, "checkpoint-on-sigterm")
    generation = agent.generation
    assert generation is not None

    # The executor's stop of a rescale, interrupted by the preemption signal...
    assert end_generation(generation, time.monotonic() + 30, lambda: True) is None
    # ...which the main thread's leave takes over.
    assert end_generation(generation, time.monotonic() + 30) is True

    assert (job_dir / "out" / "sigterm-0").read_text() == "SIGTERM\n"
    assert (job_dir / "out" / "checkpointed-0").exists()  # not killed by a second SIGTERM
