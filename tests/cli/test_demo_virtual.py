"""The demo's simulated agents against a real service: thousands of them start registering at
once (none waits for all the others to be queued), and when they fail the demo's message
counts the failures and quotes the first distinct ones with their HTTP status."""

import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import typer
from interstice.agents.local_cluster import LocalCluster
from polling import wait_until
from rich.console import Console

from interstice.demo.cli import demo
from interstice.demo.session import Demo, DemoOptions, create_tokens, start_service
from interstice.demo.virtual import (
    LOST_AFTER,
    Failures,
    SimulatedAgentsFailed,
    VirtualAgents,
    service_env,
    simulated_heartbeat_s,
)
from interstice.ports import free_ports

MANY = 3000
"""Agents at once: queued all together in httpx's pool, not one of them was sent within
minutes."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The demo's service, without real agents."""
    cluster = LocalCluster(tmp_path_factory.mktemp("virtual"), [], heartbeat_s=10.0)
    start_service(cluster, create_tokens(cluster), 0)
    try:
        yield cluster
    finally:
        cluster.close()


def names(count: int, prefix: str) -> list[str]:
    return [f"{prefix}{i:04d}" for i in range(count)]


def test_thousands_of_agents_start_registering_at_once(cluster: LocalCluster) -> None:
    agents = VirtualAgents(cluster.url, cluster.tokens["agent"], names(MANY, "many"))
    try:
        agents.start()
        wait_until(lambda: agents.registered >= 100, 90, "100 registrations", interval_s=0.2)
        assert agents.failures.count == 0, agents.failures.line()
    finally:
        agents.stop(timeout_s=60)
    listed = cluster.request("admin", "GET", "/v1/agents")["data"]
    assert sum(1 for a in listed if a["node"].startswith("many")) >= 100


def test_a_wrong_token_fails_at_once_with_the_status_and_body(cluster: LocalCluster) -> None:
    agents = VirtualAgents(cluster.url, "not-a-token", names(500, "bad"))
    try:
        agents.start()
        with pytest.raises(SimulatedAgentsFailed) as failed:
            agents.wait_registered(stall_s=60)
    finally:
        agents.stop()
    message = str(failed.value)
    assert message.startswith("0 of 500 simulated agents registered: ")
    assert " x register: HTTP 401 {" in message and "\n" not in message
    assert agents.failures.count <= 50  # registration stopped at the first failures


def test_a_stopped_service_names_the_transport_error() -> None:
    agents = VirtualAgents(f"http://127.0.0.1:{free_ports(1)[0]}", "token", names(3, "off"))
    try:
        agents.start()
        with pytest.raises(SimulatedAgentsFailed, match=r"^0 of 3 simulated agents registered: "):
            agents.wait_registered(stall_s=60)
    finally:
        agents.stop()
    assert "x register: ConnectError" in agents.failures.line()


def test_failures_line_counts_each_kind_in_the_order_first_seen() -> None:
    failures = Failures()
    request = httpx.Request("POST", "http://service/v1/agents")
    for _ in range(3):
        failures.add("register", httpx.Response(429, text='{"detail": "slow\n down"}'))
    failures.add("heartbeat", httpx.ConnectError("refused", request=request))
    failures.add("register", httpx.Response(500, text="x" * 1000))
    failures.add("ack", httpx.ReadTimeout("", request=request))
    line = failures.line()
    assert line.startswith('6 requests failed: 3 x register: HTTP 429 {"detail": "slow down"}; ')
    assert "1 x heartbeat: ConnectError refused; 1 x register: HTTP 500 xxx" in line
    assert line.endswith("…; and 1 other kinds") and len(line) < 400
    assert Failures().line() == ""


def test_simulated_agents_heartbeat_slower_and_are_lost_as_late() -> None:
    assert simulated_heartbeat_s(100, 4.0) == 4.0  # few: the service's interval
    assert simulated_heartbeat_s(4734, 10.0) > 10.0
    for nodes in (100, 4734):
        env = service_env(nodes, 10.0)
        lost_after_s = int(env["INTERSTICE_MISSED_HEARTBEATS_LOST"]) * 10.0
        assert lost_after_s >= LOST_AFTER * simulated_heartbeat_s(nodes, 10.0)
    assert service_env(100, 10.0)["INTERSTICE_MISSED_HEARTBEATS_LOST"] == str(LOST_AFTER)


@pytest.mark.parametrize(
    ("count", "message"), [("4734", "is absent"), ("5001", "--virtual-nodes must be in 0..5000")]
)
def test_the_demo_takes_summits_size(
    count: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """4,734 simulated agents pass the flags' checks (the run then stops at the absent
    trace); more than the maximum do not."""
    with pytest.raises(typer.Exit) as exited:
        demo(virtual_nodes=count, trace=Path("/nonexistent/trace.csv.gz"))
    assert exited.value.exit_code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_the_demo_prints_one_line_saying_why_its_simulated_agents_failed(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    demo_run = Demo(
        DemoOptions(1, 60, 60, 2, (), 0, 0, 15, str(tmp_path / "trace.csv.gz")),
        Console(file=out, width=80),
    )
    shutil.rmtree(demo_run.root)
    demo_run.cluster = LocalCluster(tmp_path, [], heartbeat_s=2.0)
    demo_run.cluster.url = f"http://127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    demo_run.cluster.tokens["agent"] = "token"
    try:
        with pytest.raises(SimulatedAgentsFailed):
            demo_run.start_virtual(["n1", "n2"])
    finally:
        demo_run.shutdown()
    (line,) = out.getvalue().splitlines()
    assert line.startswith("Simulated agents failed: 0 of 2 simulated agents registered: ")
    assert "x register: ConnectError" in line
