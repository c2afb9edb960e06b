"""The agent's service client: retries with backoff while the service is down, 4xx final."""

import httpx
import pytest
from interstice.agents.client import ServiceClient, ServiceRejected, ServiceUnavailable


def client_over(handler) -> ServiceClient:
    client = ServiceClient("http://service", "tok", transport=httpx.MockTransport(handler))
    client.max_backoff_s = 0.01
    return client


def test_retries_a_service_that_answers_503_then_succeeds() -> None:
    tries = []

    def handler(request: httpx.Request) -> httpx.Response:
        tries.append(request)
        if len(tries) < 3:
            return httpx.Response(503, text="restarting")
        return httpx.Response(201, json={"agent_id": "a-1", "heartbeat_interval_s": 2.0})

    answer = client_over(handler).register({"node": "n0"})
    assert answer["agent_id"] == "a-1"
    assert len(tries) == 3
    assert tries[-1].url.path == "/v1/agents"
    assert tries[-1].headers["Authorization"] == "Bearer tok"


def test_retries_connection_errors_until_the_time_allowed_runs_out() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(ServiceUnavailable, match="ConnectError"):
        client_over(handler).heartbeat("a-1", {}, give_up_after_s=0.1)


def test_a_404_is_final_and_carries_its_status() -> None:
    tries = []

    def handler(request: httpx.Request) -> httpx.Response:
        tries.append(request)
        return httpx.Response(404, json={"detail": "unknown agent a-9"})

    with pytest.raises(ServiceRejected, match="unknown agent a-9") as raised:
        client_over(handler).heartbeat("a-9", {})
    assert raised.value.status_code == 404
    assert len(tries) == 1


def test_long_poll_passes_wait_and_returns_the_commands() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params["wait"] == "7.0"
        return httpx.Response(200, json={"data": [{"command_id": 1}], "count": 1})

    assert client_over(handler).poll_commands("a-1", 7.0) == [{"command_id": 1}]


def test_fails_over_to_the_next_replica_and_stays_there() -> None:
    hosts = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        if request.url.host == "replica-a":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"data": [], "count": 0})

    client = ServiceClient(
        ["http://replica-a:8000", "http://replica-b:8000/"],
        "tok",
        transport=httpx.MockTransport(handler),
    )
    client.max_backoff_s = 0.01
    assert client.poll_commands("a-1", 0) == []
    assert client.poll_commands("a-1", 0) == []
    assert hosts == ["replica-a", "replica-b", "replica-b"]
