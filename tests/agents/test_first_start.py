"""The first start on a fresh agent does not wait for torch's import: the agent registers
(and so makes its node allocatable) only once its spare launcher is warm.

Against a fake service (httpx.MockTransport) that notes, when the registration arrives,
whether the agent's spare launcher was warm. Real launchers: a warm one (torch imported), one
whose torch import never ends (the wait is bounded), one that dies importing torch (no wait
at all), and a shutdown during the warm-up (nothing registered). An agent that registers
without a warm spare says why (``fault``: the service quarantines its node).
"""

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from interstice.agents import health
from interstice.agents.agent import Agent, AgentConfig
from interstice.agents.client import ServiceClient
from interstice.agents.launcher_process import SPARE_READY
from polling import wait_until
from shadow_torch import NO_TORCH, SLOW_TORCH, shadow_torch
from test_agent_commands import FakeService
from test_user_script import user_command

from interstice.ports import free_ports

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")


class WatchingService(FakeService):
    """A :class:`FakeService` that notes, at each registration, whether the agent's spare
    launcher was warm."""

    def __init__(self) -> None:
        super().__init__(protocol_version=3)
        self.agent: Agent | None = None
        self.warm_at_registration: list[bool] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/agents":
            assert self.agent is not None
            self.warm_at_registration.append(self.agent.launcher.spare_ready())
        return super().__call__(request)


FIRST_CHECK_S = 1.0  # seconds to a fault's first health check (then 2 s, 4 s, ...)


@pytest.fixture
def agent(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Agent]:
    """An agent (not registered yet) of node n0 with a :class:`WatchingService`
    (``agent.service``), its first health check :data:`FIRST_CHECK_S` after a fault; its
    launchers are killed afterwards. ``request.param``: the longest wait for the warm-up
    (default 600 s)."""
    monkeypatch.setattr(health, "FIRST_CHECK_S", FIRST_CHECK_S)
    config = AgentConfig(
        server="http://service",
        token="tok",
        node="n0",
        host="127.0.0.1",
        ports=free_ports(2),
        workdir=tmp_path / "n0",
        warm_before_register_s=getattr(request, "param", 600.0),
    )
    service = WatchingService()
    client = ServiceClient(config.server, config.token, transport=httpx.MockTransport(service))
    made = Agent(config, client)
    service.agent = made
    made.service = service  # type: ignore[attr-defined]
    yield made
    made.launcher.close_spare()
    if made.generation is not None:
        made._end_generation(made.generation, time.monotonic())


def service_of(agent: Agent) -> WatchingService:
    return agent.service  # type: ignore[attr-defined]


def registrations(agent: Agent) -> list[dict]:
    """The bodies of the agent's registrations, oldest first."""
    return [body for _, path, body in service_of(agent).requests if path == "/v1/agents"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_agent_registers_once_its_spare_is_warm_and_starts_the_first_job_on_it(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    service = service_of(agent)
    agent.join_service()

    assert service.warm_at_registration == [True]
    assert agent.agent_id == "a-1"
    assert "fault" not in registrations(agent)[0]
    spare = agent.launcher._spare
    assert spare is not None

    # The first start runs on that very process, warm before the command came.
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "script.py").write_text("print('trained')\n")
    agent._execute(user_command(agent, tmp_path / "j-1", code_dir, "unused"))
    generation = agent.generation
    assert generation is not None and generation.process is spare[0]
    assert generation.log_path.read_text().startswith(SPARE_READY)
    assert agent.launcher._launches == 1  # no launcher started for the command
    wait_until(lambda: agent._check_pending_ack() or service.acks(), 120, "the start's ack")
    ((_, ack),) = service.acks()
    assert ack["ok"] is True, ack


@pytest.mark.parametrize("agent", [1.0], indirect=True)
@pytest.mark.timeout(120)
def test_a_warm_up_that_never_ends_delays_the_registration_by_the_bound_only(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow_torch(tmp_path, monkeypatch, SLOW_TORCH)
    began = time.monotonic()
    agent.join_service()

    assert service_of(agent).warm_at_registration == [False]
    assert agent.agent_id == "a-1"
    assert (
        registrations(agent)[0]["fault"]
        == "its launcher is not warm after 1 s (still importing torch)"
    )
    assert time.monotonic() - began >= 1.0  # it did wait for the warm-up, that long
    assert agent.launcher._spare is not None and agent.launcher._spare[0].poll() is None


@pytest.mark.timeout(120)
def test_a_spare_that_dies_warming_up_does_not_hold_the_registration(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wait is 600 s (the fixture's): a registration within the test's timeout means the
    # agent saw its spare die (torch missing) and registered, with that fault.
    shadow_torch(tmp_path, monkeypatch, NO_TORCH)
    agent.join_service()

    assert service_of(agent).warm_at_registration == [False]
    assert agent.agent_id == "a-1"
    assert agent.launcher._spare is None  # it exited: closed
    fault = registrations(agent)[0]["fault"]
    assert fault.startswith("its launcher exited warming up (exit 1)"), fault
    assert "ModuleNotFoundError: No module named 'torch'" in fault


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_once_its_launcher_can_start_the_agent_registers_again_without_the_fault(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    package = shadow_torch(tmp_path, monkeypatch, NO_TORCH)
    agent.join_service()
    assert "fault" in registrations(agent)[0]

    wait_until(lambda: agent._check_health() or agent.launcher._launches > 1, 60, "a check")
    wait_until(lambda: agent.launcher.spare_failure(), 60, "the check's launcher exited")
    agent._check_health()  # the check failed: no registration
    assert agent.launcher._spare is None and not agent.health.due()
    assert len(registrations(agent)) == 1 and agent.health.fault is not None

    shutil.rmtree(package)  # torch is back; the next check comes 2 s later
    wait_until(lambda: agent._check_health() or len(registrations(agent)) > 1, 240, "healthy")
    assert "fault" not in registrations(agent)[1] and agent.health.fault is None
    assert agent.launcher.spare_ready()


@pytest.mark.timeout(120)
def test_a_shutdown_during_the_warm_up_registers_nothing(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow_torch(tmp_path, monkeypatch, SLOW_TORCH)
    agent.shutdown.set()  # the preemption signal came while the spare imports torch
    agent.join_service()

    assert service_of(agent).requests == []
    assert agent.agent_id is None
