"""A launch that fails for a reason of the node is acknowledged with ``node_fault`` (the
service quarantines the node and places the job elsewhere): an owner unknown on the node, a
full disk, a launcher that cannot start (torch missing under the agent's Python). The agent
then has a fault, which every registration carries until its health check passes: a warm
spare launcher and a workdir that takes a file. Against a fake service
(httpx.MockTransport); the launcher that cannot start is a real one.
"""

import errno
from pathlib import Path

import pytest
from interstice.agents import health
from interstice.agents.agent import Agent
from polling import wait_until
from shadow_torch import NO_TORCH, shadow_torch
from test_agent_commands import FakeService, command, make_agent


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Agent:
    """A registered agent of node n0 whose health checks are due at once."""
    monkeypatch.setattr(health, "FIRST_CHECK_S", 0.0)
    service = FakeService()
    made = make_agent(tmp_path / "n0", service)
    made.service = service  # type: ignore[attr-defined]
    return made


def service_of(agent: Agent) -> FakeService:
    return agent.service  # type: ignore[attr-defined]


def registrations(agent: Agent) -> list[dict]:
    return [body for _, path, body in service_of(agent).requests if path == "/v1/agents"]


def full_disk(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("cause", ["owner unknown", "disk full"])
def test_a_launch_refused_for_a_reason_of_the_node_is_its_fault(
    agent: Agent, monkeypatch: pytest.MonkeyPatch, cause: str
) -> None:
    job = command()["job"]
    if cause == "owner unknown":
        job = {**job, "owner": {"name": "no-such-user-x7", "uid": 4242}}
        expected = "node n0: "  # unknown here, or the agent does not run as root
    else:
        monkeypatch.setattr("interstice.agents.launcher.rundir.prepare", full_disk)
        expected = "node n0 cannot launch: [Errno 28] No space left on device"
    agent._execute(command(job=job))

    ((_, ack),) = service_of(agent).acks()
    assert (ack["ok"], ack["job_failed"], ack["node_fault"]) == (False, False, True)
    assert expected in ack["error"], ack
    assert agent.health.fault == ack["error"]
    agent._register()  # (after a 404, say): the fault goes with it
    assert registrations(agent)[-1]["fault"] == ack["error"]


@pytest.mark.timeout(120)
def test_a_launcher_that_cannot_start_is_the_nodes_fault_not_the_jobs(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow_torch(tmp_path, monkeypatch, NO_TORCH)
    (tmp_path / "train.py").write_text("print('training')\n")
    job = {**command()["job"], "model": None, "entrypoint": None, "command": ["train.py"]}
    job["workdir"] = str(tmp_path)
    payload = command(world_size=2, job=job)
    payload["rendezvous_endpoint"] = f"127.0.0.1:{agent.config.ports[0]}"
    agent._execute(payload)
    try:
        wait_until(lambda: agent._check_pending_ack() or service_of(agent).acks(), 60, "an ack")
    finally:
        if agent.generation is not None:
            agent.generation.process.kill()

    ((_, ack),) = service_of(agent).acks()
    assert (ack["ok"], ack["job_failed"], ack["node_fault"]) == (False, False, True)
    assert ack["error"].startswith("launch failed (exit 1)")
    assert "ModuleNotFoundError: No module named 'torch'" in ack["error"]
    assert "job_state" not in agent.heartbeat_body()  # the job did not fail
    assert agent.health.fault == ack["error"]


def test_the_agent_registers_without_its_fault_once_its_check_passes(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("interstice.agents.launcher.rundir.prepare", full_disk)
    agent._execute(command())
    assert agent.health.fault is not None and agent.health.due()
    spare = {"ready": False}
    monkeypatch.setattr(agent.launcher, "warm", lambda *args, **kwargs: None)
    monkeypatch.setattr(agent.launcher, "spare_ready", lambda: spare["ready"])

    agent._check_health()  # its spare still warms up: no verdict yet
    assert len(registrations(agent)) == 1 and agent.health.fault is not None
    spare["ready"] = True
    agent._check_health()
    assert agent.health.fault is None
    assert len(registrations(agent)) == 2 and "fault" not in registrations(agent)[-1]


def test_a_workdir_that_takes_no_file_is_a_fault(tmp_path: Path) -> None:
    assert health.workdir_problem(tmp_path) is None
    problem = health.workdir_problem(tmp_path / "gone")
    assert problem is not None and "takes no file" in problem and "gone" in problem
