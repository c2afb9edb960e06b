"""The quiet agent's fast path (:mod:`interstice.api.agent_fast_path`): a poll, long-poll or
heartbeat of an alive agent with a valid cached token is answered without FastAPI's routing
and dependency solving, with the very bytes the routes give; every other request is the
app's, with the app's own errors."""

from __future__ import annotations

from typing import Any

import fastapi.routing
import pytest
from api_helpers import Api, start_job
from interstice.api.agent_fast_path import AgentFastPath
from interstice.api.limits import BodyLimit
from interstice.api.metrics import RequestLatency
from interstice.api.security_headers import SecurityHeaders


@pytest.fixture
def solves(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths of the requests FastAPI solved dependencies for (its routing was reached)."""
    seen: list[str] = []
    solve = fastapi.routing.solve_dependencies

    async def counted(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["request"].url.path)
        return await solve(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    return seen


def _request(api: Api, kind: str, agent: str, scheme: str = "Bearer", **kwargs: Any) -> Any:
    """One agent request; ``scheme="bearer"`` (accepted by FastAPI's HTTPBearer, not by the
    fast path) sends it through FastAPI with the same token."""
    headers = {"Authorization": f"{scheme} {api.tokens['agent']}"}
    path = f"/v1/agents/{agent}/{kind}"
    if kind == "commands":
        return api.client.get(path, params={"wait": 0}, headers=headers)
    params = {"wait": 0} if kind == "poll" else {}
    return api.client.post(path, params=params, json=kwargs, headers=headers)


def test_the_documented_middleware_and_no_dependency_solving(api: Api, solves) -> None:
    """The stack is SecurityHeaders, BodyLimit, RequestLatency, AgentFastPath (outermost
    first: the fast answers carry the same headers, and are limited and measured as the
    routes' are), and a quiet agent's three
    requests reach no route: no dependency is solved for them."""
    assert [m.cls for m in api.app.user_middleware] == [
        SecurityHeaders,
        BodyLimit,
        RequestLatency,
        AgentFastPath,
    ]
    agent = api.register("n1")
    solves.clear()
    for kind in ("poll", "commands", "heartbeat"):
        r = _request(api, kind, agent)
        assert r.status_code == 200, r.text
    assert solves == []
    assert _request(api, "poll", agent, scheme="bearer").status_code == 200
    assert solves == [f"/v1/agents/{agent}/poll"]  # the counter does see FastAPI's routing


def test_fast_answers_are_the_routes_bytes(api: Api, solves) -> None:
    """With a start command pending (answered again until acknowledged), each request's
    fast answer equals FastAPI's answer to the same request, byte for byte, headers too."""
    agents, job, _ = start_job(api, ["n1", "n2"])
    agent = agents["n1"]
    api.node_events(("e-back", "n2", "busy", 30))  # n1 gets a rescale command to hold
    api.wait_for(lambda: _request(api, "commands", agent).json()["count"])
    report = {"job_id": job["job_id"], "world_size": 2}
    for kind in ("poll", "commands", "heartbeat"):
        solves.clear()
        fast = _request(api, kind, agent, **report)
        assert solves == []
        full = _request(api, kind, agent, scheme="bearer", **report)
        assert solves == [f"/v1/agents/{agent}/{kind}"]
        assert (fast.status_code, fast.content) == (full.status_code, full.content)
        assert fast.headers["content-type"] == full.headers["content-type"]
        assert fast.headers["content-length"] == full.headers["content-length"]
    assert _request(api, "poll", agent).json()["count"] >= 1


@pytest.mark.parametrize(
    ("case", "status", "detail"),
    [
        ("unknown agent", 404, "register again"),
        ("no token", 401, "missing bearer token"),
        ("scheduler token", 403, "role scheduler may not call this endpoint"),
        ("bad body", 422, "world_size"),
        ("not JSON", 422, "JSON decode error"),
        ("unknown query", 422, "unknown query parameter"),
        ("wait too long", 422, "wait"),
    ],
)
def test_everything_else_is_the_apps_answer(api: Api, case: str, status: int, detail: str):
    """Requests the fast path declines get the app's own errors."""
    agent = api.register("n1")
    path = f"/v1/agents/{agent}/poll"
    agent_auth = api.auth("agent")
    requests = {
        "unknown agent": ("/v1/agents/a-999/poll", agent_auth, b"{}", {}),
        "no token": (path, {}, b"{}", {}),
        "scheduler token": (path, api.auth("scheduler"), b"{}", {}),
        "bad body": (path, agent_auth, b'{"world_size": -1}', {}),
        "not JSON": (path, agent_auth, b"{", {}),
        "unknown query": (path, agent_auth, b"{}", {"limt": "5"}),
        "wait too long": (path, agent_auth, b"{}", {"wait": "61"}),
    }
    url, headers, body, params = requests[case]
    headers = headers | {"Content-Type": "application/json"}
    r = api.client.post(url, content=body, headers=headers, params=params)
    assert r.status_code == status, r.text
    assert detail in r.text


def test_a_fast_answer_is_measured_under_its_route(api: Api) -> None:
    agent = api.register("n1")
    assert _request(api, "poll", agent).status_code == 200
    metrics = api.client.get("/metrics").text
    series = (
        'interstice_request_seconds_count{method="POST",'
        'route="/v1/agents/{agent_id}/poll",status="200"}'
    )
    assert series in metrics


def test_a_heartbeat_with_news_is_written_by_the_route(api: Api, solves) -> None:
    """A report the service has not recorded (more samples) is the route's: written to the
    database, where the job's progress shows it."""
    agents, job, _ = start_job(api, ["n1"])
    solves.clear()
    report = {"job_id": job["job_id"], "samples_done": 1234.0}
    assert _request(api, "heartbeat", agents["n1"], **report).status_code == 200
    assert solves == [f"/v1/agents/{agents['n1']}/heartbeat"]
    assert api.job(job["job_id"])["samples_done"] == 1234
