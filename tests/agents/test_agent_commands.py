"""The agent's handling of commands, against a fake service (httpx.MockTransport).

Bad commands are acknowledged with ``ok: false`` and the error, and the agent keeps going;
a 404 makes it register again. The last tests launch real (failing) launchers: an unknown
model and an unreachable rendezvous end in an error ack, not in a crash.
"""

import json
import os
import threading
import time
from pathlib import Path

import httpx
import pytest
import typer
from interstice.agents.agent import Agent, AgentConfig
from interstice.agents.cli import _read_token
from interstice.agents.client import ServiceClient
from interstice.agents.launch_config import is_host
from interstice.agents.protocol import BadCommand, parse_command
from polling import wait_until

from interstice.ports import free_ports


class FakeService:
    """Records every request; answers registrations, acks and heartbeats."""

    def __init__(self, protocol_version: int | None = None) -> None:
        self.requests: list[tuple[str, str, dict]] = []
        self.forget_agent = False
        self.registered = {"agent_id": "a-1", "heartbeat_interval_s": 1.0}
        if protocol_version is not None:
            self.registered["protocol_version"] = protocol_version

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        self.requests.append((request.method, request.url.path, body))
        if request.url.path == "/v1/agents":
            return httpx.Response(201, json=self.registered)
        if self.forget_agent:
            self.forget_agent = False
            return httpx.Response(404, json={"detail": "unknown agent a-1"})
        if request.url.path.endswith(("/poll", "/commands")):
            return httpx.Response(200, json={"data": [], "count": 0})
        return httpx.Response(200, json={})

    def acks(self) -> list[tuple[str, dict]]:
        return [(path, body) for method, path, body in self.requests if path.endswith("/ack")]


@pytest.mark.parametrize(("version", "paths"), [(3, {"poll"}), (None, {"commands", "heartbeat"})])
def test_the_heartbeat_rides_on_the_poll_when_the_service_speaks_version_3(
    tmp_path: Path, version: int | None, paths: set[str]
) -> None:
    service = FakeService(protocol_version=version)
    agent = make_agent(tmp_path, service)
    threads = [threading.Thread(target=loop) for loop in (agent._poll_loop, agent._heartbeat_loop)]
    for thread in threads:
        thread.start()
    began = time.monotonic()

    def seen() -> set[str]:
        return {path.rsplit("/", 1)[1] for _, path, _ in service.requests[1:]}

    try:  # 1.5 heartbeat intervals (of 1 s), and every expected kind of request
        wait_until(lambda: time.monotonic() - began > 1.5 and seen() >= paths, what=str(paths))
    finally:
        agent.shutdown.set()
        for thread in threads:
            thread.join()
    assert seen() == paths
    if version == 3:
        assert all(body == agent.heartbeat_body() for _, _, body in service.requests[1:])


def make_agent(
    tmp_path: Path,
    service: FakeService,
    join_timeout_s: float = 60.0,
    token: str = "tok",
    node: str = "n0",
) -> Agent:
    config = AgentConfig(
        server="http://service",
        token=token,
        node=node,
        host="127.0.0.1",
        ports=free_ports(2),
        workdir=tmp_path,
        join_timeout_s=join_timeout_s,
    )
    client = ServiceClient(config.server, config.token, transport=httpx.MockTransport(service))
    agent = Agent(config, client=client)
    agent._register()
    return agent


def command(**changes: object) -> dict:
    payload = {
        "command_id": 7,
        "kind": "start",
        "job_id": "j-1",
        "world_size": 2,
        "rendezvous_endpoint": "127.0.0.1:29400",
        "rendezvous_id": "j-1-g1",
        "spb_depth": 0,
        "job": {
            "model": "tinycnn",
            "parallelism": "dp",
            "batch_size": 8,
            "total_samples": 1000.0,
            "min_nodes": 2,
            "max_nodes": 4,
            "entrypoint": "interstice.agents.worker",
            "command": None,
            "checkpoint_dir": "/tmp/unused",
        },
    }
    return {**payload, **changes}


def test_a_version_1_job_gets_a_global_batch_and_its_checkpoint_dir_as_job_dir() -> None:
    job = parse_command(command(world_size=3)).job
    assert job is not None
    assert job.global_batch_size == 8 * 3  # v1's batch_size is per worker
    assert job.job_dir == job.checkpoint_dir == "/tmp/unused"
    assert job.runs_builtin_worker and job.total_samples == 1000


def test_a_bad_job_field_fails_the_job_and_a_bad_world_size_does_not() -> None:
    with pytest.raises(BadCommand, match="total_samples") as raised:
        parse_command(command(job={**command()["job"], "total_samples": 1000.5}))
    assert raised.value.job_failed
    with pytest.raises(BadCommand) as raised:
        parse_command(command(world_size=9))
    assert not raised.value.job_failed


def test_a_world_size_below_the_jobs_minimum_is_a_bad_command() -> None:
    with pytest.raises(BadCommand, match="world_size 1 is outside the job's"):
        parse_command(command(world_size=1))


def test_a_start_without_rendezvous_or_with_a_bad_endpoint_is_a_bad_command() -> None:
    with pytest.raises(BadCommand, match="needs rendezvous_endpoint"):
        parse_command(command(rendezvous_endpoint=None))
    with pytest.raises(BadCommand, match="is not host:port"):
        parse_command(command(rendezvous_endpoint="node-3"))
    with pytest.raises(BadCommand, match="kind"):
        parse_command(command(kind="explode"))


def test_only_the_node_whose_host_and_port_the_endpoint_names_hosts_the_store() -> None:
    ports = [29400, 29401]
    assert is_host("10.0.0.5:29401", "10.0.0.5", ports)
    assert not is_host("10.0.0.5:29500", "10.0.0.5", ports)  # another agent on the same host
    assert not is_host("10.0.0.6:29400", "10.0.0.5", ports)


def test_bad_commands_are_acked_with_their_error_and_the_agent_keeps_going(
    tmp_path: Path,
) -> None:
    service = FakeService()
    agent = make_agent(tmp_path, service)
    agent._execute(command(command_id=1, world_size=1))
    agent._execute(command(command_id=2, kind="stop", job_id="j-404"))
    acks = service.acks()
    assert [path for path, _ in acks] == [
        "/v1/agents/a-1/commands/1/ack",
        "/v1/agents/a-1/commands/2/ack",
    ]
    assert acks[0][1]["ok"] is False and "world_size 1 is outside" in acks[0][1]["error"]
    assert acks[1][1]["ok"] is False and "unknown job 'j-404'" in acks[1][1]["error"]
    assert agent.generation is None


def test_the_agent_reads_its_token_then_drops_it_from_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERSTICE_AGENT_TOKEN", "from-env")
    assert _read_token("from-env", None) == "from-env"
    assert "INTERSTICE_AGENT_TOKEN" not in os.environ  # nothing the agent starts inherits it
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    assert _read_token(None, token_file) == "from-file"
    with pytest.raises(typer.Exit):
        _read_token(None, tmp_path / "missing")


def test_an_agent_the_service_forgot_registers_again(tmp_path: Path) -> None:
    service = FakeService()
    agent = make_agent(tmp_path, service)
    service.forget_agent = True
    agent._guarded(agent.client.heartbeat, agent.heartbeat_body())
    registrations = [r for r in service.requests if r[:2] == ("POST", "/v1/agents")]
    assert len(registrations) == 2
    assert registrations[-1][2]["node"] == "n0"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"job": {**command()["job"], "model": "no-such-net"}}, "unknown model 'no-such-net'"),
        # Nobody listens there and this node does not host it: the rendezvous fails.
        ({"rendezvous_endpoint": f"127.0.0.1:{free_ports(1)[0]}"}, "launch failed"),
    ],
    ids=["unknown-model", "unreachable-rendezvous"],
)
def test_a_launch_that_fails_is_acked_with_its_error(
    tmp_path: Path, changes: dict, error: str
) -> None:
    pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")
    service = FakeService()
    agent = make_agent(tmp_path, service, join_timeout_s=3.0)
    try:
        # As a real agent, which registers once warm (the watchdog's 33 s are the join's).
        agent.launcher.warm()
        assert agent.launcher.wait_ready(240.0)
        agent._execute(command(**changes))
        deadline = time.monotonic() + 90
        while not service.acks() and time.monotonic() < deadline:
            agent._check_pending_ack()
            time.sleep(0.1)
    finally:
        agent.launcher.close_spare()
        if agent.generation is not None:
            agent.generation.process.kill()
    ((path, body),) = service.acks()
    assert path == "/v1/agents/a-1/commands/7/ack"
    assert body["ok"] is False
    assert error in body["error"]


class RestartingService(FakeService):
    """A :class:`FakeService` that refuses connections until ``down_until``."""

    down_until = 0.0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if time.monotonic() < self.down_until:
            raise httpx.ConnectError("connection refused", request=request)
        return super().__call__(request)


def test_after_an_outage_the_agent_is_back_within_a_heartbeat_interval(tmp_path: Path) -> None:
    """The service restarts and counts an agent lost after ``missed_heartbeats_lost``
    intervals from its start: the agent's retries of a silent service must come at least once
    per interval (1 s here), not at the client's 5 s backoff."""
    service = RestartingService(protocol_version=3)
    agent = make_agent(tmp_path, service)
    service.down_until = time.monotonic() + 4.0  # backoffs 0.2, 0.4, 0.8, 1.6, 3.2 s: 6.2 s
    poller = threading.Thread(target=agent._poll_loop)
    poller.start()
    try:
        wait_until(lambda: len(service.requests) > 1, 15, "a poll after the outage")
        back_after_s = time.monotonic() - service.down_until
    finally:
        agent.shutdown.set()
        poller.join()
    assert back_after_s < agent.heartbeat_interval_s + 0.5
