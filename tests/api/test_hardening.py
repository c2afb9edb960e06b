"""What an outside test of the running service found, each kept as a test: body
limits (413), non-finite and boolean numbers (422), node events ordered by ``at``,
``Idempotency-Key`` on job submission, short 422 quotes, allocatable nodes counted apart,
a clean shutdown with long-polls open, rules shown in the OpenAPI schema, ``Allow`` on 405.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from api_helpers import Api, free_port, gauge, interstice_executable
from interstice.api import limits
from interstice.api.main import create_app
from interstice.api.services import idempotency
from interstice.api.settings import Settings
from typer.testing import CliRunner

from interstice.cli import app

SCHEMA = create_app(Settings(db_url="sqlite://")).openapi()
JOB = {"min_nodes": 1, "max_nodes": 1, "total_samples": 9}


def _raw(api: Api, method: str, path: str, role: str, text: str) -> httpx.Response:
    return api.call(method, path, role, content=text, headers={"Content-Type": "application/json"})


# --- body limits ---------------------------------------------------------------------


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("method", "path", "role", "limit"),
    [
        ("POST", "/v1/nodes/events", "scheduler", 8 << 20),
        ("PUT", "/v1/scalability", "admin", 1 << 20),
        ("POST", "/v1/jobs", "user", 1 << 20),
        ("POST", "/v1/agents", "agent", 1 << 20),
    ],
)
def test_a_body_over_the_route_s_limit_is_413(
    api: Api, method: str, path: str, role: str, limit: int
) -> None:
    assert limits.body_limit(path) == limit
    over = _raw(api, method, path, role, " " * (limit + 1))
    assert (over.status_code, over.json()) == (
        413,
        {"detail": f"request body larger than {limit} bytes, the limit of this route"},
    )
    assert "413" in SCHEMA["paths"][path][method.lower()]["responses"]


@pytest.mark.sqlite_only
def test_a_chunked_body_over_the_limit_is_413(api: Api) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(3):
            yield b" " * (1 << 20)

    r = api.call("PUT", "/v1/scalability", "admin", content=chunks())
    assert r.status_code == 413


def test_a_chunked_body_under_the_limit_is_read(api: Api) -> None:
    body = json.dumps({"node": "n1", "host": "h"}).encode()
    r = api.call(
        "POST",
        "/v1/agents",
        "agent",
        content=iter([body[:5], body[5:]]),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 201, r.text


# --- numbers -------------------------------------------------------------------------

EVENT = '{"events": [{"event_id": "e", "node": "n", "state": "busy", "at": "2026-01-01T00:00:00Z", "grace_s": %s}]}'  # noqa: E501


@pytest.mark.sqlite_only
@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e309"])
@pytest.mark.parametrize(
    ("method", "path", "role", "template", "field"),
    [
        ("POST", "/v1/nodes/events", "scheduler", EVENT, "grace_s"),
        (
            "POST",
            "/v1/jobs",
            "user",
            '{"min_nodes": 1, "max_nodes": 1, "total_samples": %s}',
            "total_samples",
        ),  # noqa: E501
        (
            "POST",
            "/v1/jobs",
            "user",
            '{"min_nodes": 1, "max_nodes": 1, "total_samples": 9, "priority": %s}',
            "priority",
        ),  # noqa: E501
        (
            "POST",
            "/v1/jobs",
            "user",
            '{"min_nodes": %s, "max_nodes": 1, "total_samples": 9}',
            "min_nodes",
        ),  # noqa: E501
        ("PUT", "/v1/objective", "admin", '{"throughput": %s}', "throughput"),
        ("PUT", "/v1/objective", "admin", '{"horizon_s": %s}', "horizon_s"),
        ("POST", "/v1/agents", "agent", '{"node": "n", "host": "h", "ports": [%s]}', "ports"),
        (
            "POST",
            "/v1/tokens",
            "admin",
            '{"name": "n", "role": "user", "expires_in_s": %s}',
            "expires_in_s",
        ),  # noqa: E501
    ],
)
def test_non_finite_numbers_are_422_naming_the_field(
    api: Api, method: str, path: str, role: str, template: str, field: str, number: str
) -> None:
    r = _raw(api, method, path, role, template % number)
    assert r.status_code == 422, r.text
    assert field in [str(part) for error in r.json()["detail"] for part in error["loc"]]


@pytest.mark.sqlite_only
def test_non_finite_numbers_in_a_heartbeat_are_422(api: Api) -> None:
    agent = api.register("n1")
    for raw in ('{"samples_per_s": 1e309}', '{"loss": NaN}', '{"metrics": {"acc": Infinity}}'):
        r = _raw(api, "POST", f"/v1/agents/{agent}/heartbeat", "agent", raw)
        assert r.status_code == 422, raw


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("method", "path", "role", "body", "field"),
    [
        (
            "POST",
            "/v1/nodes/events",
            "scheduler",
            {
                "events": [
                    {
                        "event_id": "e",
                        "node": "n",
                        "state": "busy",
                        "at": "2026-01-01T00:00:00Z",
                        "grace_s": False,
                    }
                ]
            },  # noqa: E501
            "grace_s",
        ),
        ("POST", "/v1/jobs", "user", JOB | {"priority": True}, "priority"),
        ("POST", "/v1/jobs", "user", JOB | {"rescale_up_s": False}, "rescale_up_s"),
        ("PUT", "/v1/objective", "admin", {"churn": True}, "churn"),
        ("PUT", "/v1/objective", "admin", {"horizon_s": True}, "horizon_s"),
        ("POST", "/v1/agents", "agent", {"node": "n", "host": "h", "ports": [True]}, "ports"),
    ],
)
def test_booleans_are_not_numbers(
    api: Api, method: str, path: str, role: str, body: dict, field: str
) -> None:
    r = api.call(method, path, role, json=body)
    assert r.status_code == 422, r.text
    assert field in [str(part) for error in r.json()["detail"] for part in error["loc"]]


def test_booleans_are_still_booleans(api: Api) -> None:
    r = api.call(
        "POST", "/v1/agents", "agent", json={"node": "n", "host": "h", "report_idle": True}
    )
    assert r.status_code == 201, r.text
    assert api.call("PUT", "/v1/objective", "admin", json={"speedup": True}).status_code == 200


@pytest.mark.sqlite_only
def test_a_tiny_fractional_sample_budget_is_422(api: Api) -> None:
    r = _raw(
        api, "POST", "/v1/jobs", "user", '{"min_nodes": 1, "max_nodes": 1, "total_samples": 5e-324}'
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "total_samples"]


# --- node events by time -------------------------------------------------------------


def _node_state(api: Api, name: str) -> str:
    nodes = api.nodes()
    return next(n["state"] for n in nodes if n["name"] == name)


def test_an_older_event_is_recorded_but_changes_nothing(api: Api) -> None:
    assert api.node_events(("late", "n1", "busy", 0), at="2026-01-01T00:00:10Z").status_code == 200
    older = api.node_events(("early", "n1", "idle", 0), at="2026-01-01T00:00:05Z")
    assert older.status_code == 200 and older.json()["data"][0]["state"] == "idle"
    assert _node_state(api, "n1") == "busy"
    # recorded: a retry answers the same, a reuse of its id for another event is a 409
    assert api.node_events(("early", "n1", "idle", 0), at="2026-01-01T00:00:05Z").json() == (
        older.json()
    )
    assert api.node_events(("early", "n1", "busy", 0), at="2026-01-01T00:00:05Z").status_code == 409
    newer = api.node_events(("later", "n1", "idle", 0), at="2026-01-01T00:00:20Z")
    assert newer.status_code == 200 and _node_state(api, "n1") == "idle"


def test_an_older_event_in_the_same_batch_changes_nothing(api: Api) -> None:
    body = {
        "events": [
            {"event_id": "b", "node": "n2", "state": "busy", "at": "2026-01-01T00:01:00Z"},
            {"event_id": "i", "node": "n2", "state": "idle", "at": "2026-01-01T00:00:00Z"},
        ]
    }
    assert api.call("POST", "/v1/nodes/events", "scheduler", json=body).status_code == 200
    assert _node_state(api, "n2") == "busy"


def test_a_repeated_state_moves_the_newest_time(api: Api) -> None:
    api.node_events(("i1", "n3", "idle", 0), at="2026-01-01T00:00:01Z")
    api.node_events(("i3", "n3", "idle", 0), at="2026-01-01T00:00:03Z")
    api.node_events(("b2", "n3", "busy", 0), at="2026-01-01T00:00:02Z")  # older than i3
    assert _node_state(api, "n3") == "idle"


# --- Idempotency-Key -----------------------------------------------------------------


def test_a_retry_with_the_same_key_answers_the_first_job(api: Api) -> None:
    key = {"Idempotency-Key": "3f2b8c1e-4a5d-4e6f-9a0b-1c2d3e4f5a6b"}
    first = api.call("POST", "/v1/jobs", "user", json=JOB, headers=key)
    retry = api.call("POST", "/v1/jobs", "user", json=JOB, headers=key)
    assert (first.status_code, retry.status_code) == (201, 201)
    assert "idempotent-replayed" not in first.headers
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json()["job_id"] == first.json()["job_id"]
    assert api.call("GET", "/v1/jobs", "user").json()["count"] == 1
    # per token: another user's same key is another job
    other = api.call("POST", "/v1/jobs", "other", json=JOB, headers=key)
    assert other.status_code == 201 and other.json()["job_id"] != first.json()["job_id"]
    # no key: a new job each time
    assert (
        api.call("POST", "/v1/jobs", "user", json=JOB).json()["job_id"] != (first.json()["job_id"])
    )


def test_a_key_reused_with_another_body_is_422(api: Api) -> None:
    key = {"Idempotency-Key": "k-1"}
    assert api.call("POST", "/v1/jobs", "user", json=JOB, headers=key).status_code == 201
    r = api.call("POST", "/v1/jobs", "user", json=JOB | {"total_samples": 10}, headers=key)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    assert "already used with a different request body" in r.json()["detail"][0]["msg"]


def test_keys_outlive_the_process(make_api) -> None:  # type: ignore[no-untyped-def]
    key = {"Idempotency-Key": "survives-restart"}
    with make_api() as api:
        first = api.call("POST", "/v1/jobs", "user", json=JOB, headers=key).json()
        user = api.tokens["user"]
    with make_api() as api:
        api.tokens["user"] = user
        again = api.call("POST", "/v1/jobs", "user", json=JOB, headers=key)
    assert again.status_code == 201 and again.json()["job_id"] == first["job_id"]


def test_a_key_stored_by_another_replica_meanwhile_answers_its_job(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race of two replicas: this one looked the key up before the other stored it."""
    key = {"Idempotency-Key": "raced"}
    first = api.call("POST", "/v1/jobs", "user", json=JOB, headers=key).json()
    real, missed = idempotency.earlier_job, []

    def stale_lookup(*args: object) -> object:
        if not missed:
            missed.append(True)
            return None
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(idempotency, "earlier_job", stale_lookup)
    retry = api.call("POST", "/v1/jobs", "user", json=JOB, headers=key)
    assert missed and retry.status_code == 201, retry.text
    assert retry.json()["job_id"] == first["job_id"]
    assert retry.headers["idempotent-replayed"] == "true"
    assert api.call("GET", "/v1/jobs", "user").json()["count"] == 1
    assert [p.name for p in Path(first["job_dir"]).parent.iterdir()] == [first["job_id"]]


@pytest.mark.sqlite_only
@pytest.mark.parametrize("bad", ["", "x" * 201, "has space", "ünicode"])
def test_a_malformed_key_is_422(api: Api, bad: str) -> None:
    r = api.call(
        "POST",
        "/v1/jobs",
        "user",
        json=JOB,
        headers={"Idempotency-Key": bad.encode()},
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]


# --- what a 422 quotes ---------------------------------------------------------------


@pytest.mark.sqlite_only
def test_a_422_quotes_only_a_prefix_of_the_input(api: Api) -> None:
    huge = "x" * 900_000
    for body in (JOB | {"model": huge}, JOB | {"env": {"A": huge, "1bad": "v"}}, [huge] * 1):
        r = api.call("POST", "/v1/jobs", "user", json=body)
        assert r.status_code == 422
        assert len(r.content) < 2000, len(r.content)
        for error in r.json()["detail"]:
            assert len(str(error.get("input"))) <= limits.QUOTE_MAX_CHARS + 1


# --- allocatable nodes ---------------------------------------------------------------


def test_a_node_no_agent_serves_is_idle_but_not_allocatable(api: Api) -> None:
    api.node_events(("e1", "ghost", "idle", 0))
    metrics = api.client.get("/metrics").text
    assert gauge(metrics, "interstice_idle_nodes") == 1
    assert gauge(metrics, "interstice_allocatable_nodes") == 0
    api.register("ghost")
    assert gauge(api.client.get("/metrics").text, "interstice_allocatable_nodes") == 1


# --- 405 -----------------------------------------------------------------------------


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v1/jobs/j-1", "DELETE, GET"),
        ("PATCH", "/v1/jobs", "GET, POST"),
        ("DELETE", "/v1/nodes/events", "POST"),
        ("POST", "/v1/objective", "GET, PUT"),
        ("PUT", "/v1/tokens", "GET, POST"),
    ],
)
def test_405_names_every_method_of_the_path(api: Api, method: str, path: str, allow: str) -> None:
    r = api.call(method, path, "admin")
    assert (r.status_code, r.headers["allow"]) == (405, allow)


# --- rules in the OpenAPI schema -----------------------------------------------------


def test_rules_beyond_types_are_in_the_schema() -> None:
    parts = SCHEMA["components"]["schemas"]
    ports = parts["AgentCreate"]["properties"]["ports"]["items"]
    assert (ports["minimum"], ports["maximum"]) == (1, 65535)
    horizon = parts["ObjectiveUpdate"]["properties"]["horizon_s"]["anyOf"][0]
    assert (horizon["exclusiveMinimum"], horizon["maximum"]) == (0, 1e7)
    at = parts["NodeEventCreate"]["properties"]["at"]
    assert at["pattern"] == "^(20[0-9][0-9]|2100)-" and "2000..2100" in at["description"]
    assert "``min_nodes`` ≤ ``max_nodes``" in parts["JobCreate"]["description"]
    assert "both ``true`` in one request is a 422" in parts["ObjectiveUpdate"]["description"]
    node = parts["NodeEventCreate"]["properties"]["node"]
    assert (node["maxLength"], node["pattern"]) == (200, "^[A-Za-z0-9_.:\\-]+$")
    (header,) = [
        p for p in SCHEMA["paths"]["/v1/jobs"]["post"]["parameters"] if p["in"] == "header"
    ]
    assert header["name"] == "Idempotency-Key"
    created = SCHEMA["paths"]["/v1/jobs"]["post"]["responses"]["201"]
    assert "Idempotent-Replayed" in created["headers"]


# --- shutdown ------------------------------------------------------------------------


def test_stopping_serve_with_long_polls_open_prints_no_traceback(tmp_path: Path) -> None:
    exe, db, port = interstice_executable(), f"sqlite:///{tmp_path / 's.db'}", free_port()
    created = CliRunner().invoke(app, ["token", "create", "--role", "agent", "--db", db])
    assert created.exit_code == 0, created.output
    token = created.stdout.strip()
    server = subprocess.Popen(
        [exe, "serve", "--db", db, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"INTERSTICE_LOG_LEVEL": "trace"},  # logs each request's start
    )
    seen: list[str] = []

    def read_until(predicate: Callable[[list[str]], bool]) -> None:
        for line in server.stdout:  # type: ignore[union-attr]
            seen.append(line)
            if predicate(seen):
                return
        raise AssertionError("serve ended early:\n" + "".join(seen))

    url, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}
    answers: list[int] = []

    def poll(agent: str) -> None:
        answers.append(
            httpx.get(
                f"{url}/v1/agents/{agent}/commands",
                params={"wait": 60},
                headers=auth,
                timeout=90,
            ).status_code
        )

    try:
        read_until(lambda lines: "Application startup complete" in lines[-1])
        agents = [
            httpx.post(f"{url}/v1/agents", headers=auth, json={"node": f"n{i}", "host": "h"})
            for i in range(3)
        ]
        polls = [threading.Thread(target=poll, args=(a.json()["agent_id"],)) for a in agents]
        for thread in polls:
            thread.start()
        read_until(
            lambda lines: sum("Started scope=" in x and "/commands" in x for x in lines) == 3
        )
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=60)
        for thread in polls:
            thread.join(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    out = "".join(seen) + out
    assert server.returncode == 0, out
    assert "Traceback" not in out and "CancelledError" not in out, out
    assert answers == [200, 200, 200]
