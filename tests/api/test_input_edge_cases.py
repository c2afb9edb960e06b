"""Edge cases of requests to the running service, on SQLite and on PostgreSQL: a NUL
character in any text field is a 422 naming it (PostgreSQL cannot store one), a large
scalability table is parsed in linear time and refused above the models cap, a superseded
node event says it changed nothing, a 404 quotes a prefix of the id, and ``GET /v1/nodes``
pages.
"""

from __future__ import annotations

from typing import Any

import pytest
from api_helpers import Api, start_job
from interstice.api import limits
from interstice.api.schemas.nodes import NODES_PAGE_DEFAULT
from interstice.api.services.scalability import TABLE_MAX_MODELS

AT = "2026-01-01T00:00:00Z"


def _errors(response: Any) -> list[tuple[tuple[Any, ...], str]]:
    """(loc, msg) of every validation error."""
    return [(tuple(e["loc"]), e["msg"]) for e in response.json()["detail"]]


def _nul(where: str) -> str:
    return f"Value error, a NUL character (U+0000) is not allowed ({where})"


# --- NUL characters ------------------------------------------------------------------

JOB = {"min_nodes": 1, "max_nodes": 1, "total_samples": 9}
AGENT = {"node": "n1", "host": "h1"}


@pytest.mark.parametrize(
    ("method", "path", "role", "body", "loc", "where"),
    [
        ("POST", "/v1/jobs", "user", JOB | {"model": "res\x00net"}, ("model",), "position 3"),
        ("POST", "/v1/jobs", "user", JOB | {"workdir": "/w\x00"}, ("workdir",), "position 2"),
        (
            "POST",
            "/v1/jobs",
            "user",
            JOB | {"command": ["train.py", "--x=\x00"]},
            ("command",),
            "item 1, position 4",
        ),
        (
            "POST",
            "/v1/jobs",
            "user",
            JOB | {"env": {"A": "1", "B": "\x00"}},
            ("env",),
            "the value of 'B', position 0",
        ),
        ("POST", "/v1/agents", "agent", AGENT | {"host": "h\x00"}, ("host",), "position 1"),
        (
            "POST",
            "/v1/agents",
            "agent",
            AGENT | {"devices": ["cuda:0", "cuda:\x001"]},
            ("devices",),
            "item 1, position 5",
        ),
        (
            "POST",
            "/v1/nodes/events",
            "scheduler",
            {"events": [{"event_id": "e\x00", "node": "n1", "state": "idle", "at": AT}]},
            ("events", 0, "event_id"),
            "position 1",
        ),
        (
            "POST",
            "/v1/agents/a-1/heartbeat",
            "agent",
            {"error": "boom\x00"},
            ("error",),
            "position 4",
        ),
        (
            "POST",
            "/v1/agents/a-1/heartbeat",
            "agent",
            {"metrics": {"lo\x00ss": 1.0}},
            ("metrics",),
            "a key, position 2",
        ),
        (
            "POST",
            "/v1/agents/a-1/commands/1/ack",
            "agent",
            {"ok": False, "error": "\x00"},
            ("error",),
            "position 0",
        ),
    ],
)
def test_a_nul_in_any_text_field_is_422_naming_it(
    api: Api, method: str, path: str, role: str, body: dict, loc: tuple, where: str
) -> None:
    r = api.call(method, path, role, json=body)
    assert (r.status_code, _errors(r)) == (422, [(("body", *loc), _nul(where))])
    # the connection and the database are fine: the next request is served
    assert api.call("GET", "/v1/nodes", "admin").status_code == 200


def test_a_batch_with_one_nul_event_id_applies_none_of_it(api: Api) -> None:
    events = [
        {"event_id": "ok-1", "node": "n1", "state": "idle", "at": AT},
        {"event_id": "bad\x00", "node": "n2", "state": "idle", "at": AT},
        {"event_id": "ok-3", "node": "n3", "state": "idle", "at": AT},
    ]
    for _ in range(2):  # a retry answers the same
        r = api.call("POST", "/v1/nodes/events", "scheduler", json={"events": events})
        assert (r.status_code, _errors(r)) == (
            422,
            [(("body", "events", 1, "event_id"), _nul("position 3"))],
        )
    assert api.call("GET", "/v1/nodes", "scheduler").json()["count"] == 0
    events[1]["event_id"] = "ok-2"
    r = api.call("POST", "/v1/nodes/events", "scheduler", json={"events": events})
    assert r.status_code == 200, r.text
    assert [(n["name"], n["state"]) for n in api.nodes()] == [(f"n{i}", "idle") for i in (1, 2, 3)]


def test_a_nul_in_a_scalability_table_is_422(api: Api) -> None:
    csv = "model,nodes,samples_per_s\nres\x00net,1,10\n"
    r = api.call("PUT", "/v1/scalability", "admin", content=csv)
    assert (r.status_code, _errors(r)) == (
        422,
        [(("body",), "a NUL character (U+0000) is not allowed (position 29)")],
    )


# --- scalability tables --------------------------------------------------------------


def _table(models: int, rows: int) -> str:
    lines = [f"m{m},{n},{10 * n}" for m in range(models) for n in range(1, rows + 1)]
    return "\n".join(["model,nodes,samples_per_s", *lines]) + "\n"


@pytest.mark.timeout(60)  # the quadratic check took minutes (and answered 409 after 120 s)
def test_a_table_of_5000_models_of_8_rows_is_accepted(api: Api) -> None:
    text = _table(5000, 8)
    assert len(text.encode()) < limits.body_limit("/v1/scalability")
    r = api.call("PUT", "/v1/scalability", "admin", content=text)
    assert r.status_code == 200, r.text
    assert (len(r.json()["models"]), r.json()["rows"]) == (5000, 40000)
    # the node events wait for no table parse: the lock is free again
    assert api.node_events(("e1", "n1", "idle", 0)).status_code == 200


def test_a_table_over_the_models_cap_is_422_naming_it(api: Api) -> None:
    r = api.call("PUT", "/v1/scalability", "admin", content=_table(TABLE_MAX_MODELS + 1, 1))
    assert (r.status_code, _errors(r)) == (
        422,
        [
            (
                ("body",),
                f"scalability table: {TABLE_MAX_MODELS + 1} models, more than "
                f"{TABLE_MAX_MODELS} (the most a table may have)",
            )
        ],
    )
    assert api.call("GET", "/v1/scalability", "admin").json()["rows"] == 8  # unchanged


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("csv", "message"),
    [
        ("", "scalability table: missing column(s) model, nodes, samples_per_s"),
        ('model,nodes,samples_per_s\n"m,1,10\n', "scalability table line 2: too few fields"),
        ("model,nodes,samples_per_s\nm,1\n", "scalability table line 2: too few fields"),
        (
            "model,nodes,samples_per_s\nm,1,10\nm," + "9" * 200_000,
            "scalability table line 3: field larger than field limit (131072)",
        ),
    ],
    ids=["empty", "unclosed-quote", "short-row", "huge-field"],
)
def test_a_malformed_table_is_422_naming_the_line(api: Api, csv: str, message: str) -> None:
    r = api.call("PUT", "/v1/scalability", "admin", content=csv)
    assert (r.status_code, _errors(r)) == (422, [(("body",), message)])


# --- superseded node events ----------------------------------------------------------


def _event(event_id: str, node: str, state: str, at: str) -> dict[str, Any]:
    return {"event_id": event_id, "node": node, "state": state, "at": at, "grace_s": 0.0}


def test_a_superseded_event_says_it_changed_nothing(api: Api) -> None:
    agents, job, _ = start_job(api, ["n1", "n2"])  # their events are at now: these later
    newer = api.node_events(("idle-late", "n1", "idle", 0), at="2099-01-01T00:00:10Z")
    assert newer.json()["data"][0] == {
        "event_id": "idle-late",
        "node": "n1",
        "state": "idle",
        "applied": True,
        "reason": None,
        "reclaimed_job_id": None,
    }
    # the scheduler's clock stepped back: its reclaim is older than what the node took
    older = api.node_events(("busy-early", "n1", "busy", 0), at="2099-01-01T00:00:05Z")
    assert (older.status_code, older.json()["data"]) == (
        200,
        [
            {
                "event_id": "busy-early",
                "node": "n1",
                "state": "busy",
                "applied": False,
                "reason": "superseded by a newer event at 2099-01-01T00:00:10Z",
                "reclaimed_job_id": None,
            }
        ],
    )
    assert api.job(job["job_id"])["nodes"] == ["n1", "n2"]  # nothing was reclaimed
    assert api.poll(agents["n1"], wait=0) == []
    # a retry answers exactly the same, even after newer events
    api.node_events(("idle-later", "n1", "idle", 0), at="2099-01-01T00:00:20Z")
    again = api.node_events(("busy-early", "n1", "busy", 0), at="2099-01-01T00:00:05Z")
    assert again.json() == older.json()


def test_a_superseded_event_in_the_same_batch_says_so(api: Api) -> None:
    body = {
        "events": [
            _event("b", "n2", "busy", "2026-01-01T00:01:00Z"),
            _event("i", "n2", "idle", "2026-01-01T00:00:00.5Z"),
            _event("b2", "n2", "busy", "2026-01-01T00:01:00Z"),  # equal times apply
        ]
    }
    r = api.call("POST", "/v1/nodes/events", "scheduler", json=body)
    assert [(e["applied"], e["reason"]) for e in r.json()["data"]] == [
        (True, None),
        (False, "superseded by a newer event at 2026-01-01T00:01:00Z"),
        (True, None),
    ]
    retry = api.call("POST", "/v1/nodes/events", "scheduler", json=body)
    assert retry.json() == r.json()


# --- what a 404 quotes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "role", "detail"),
    [
        ("GET", "/v1/jobs/{id}", "user", "job {id} not found"),
        ("DELETE", "/v1/jobs/{id}", "admin", "job {id} not found"),
        ("GET", "/v1/jobs/{id}/metrics", "user", "job {id} not found"),
        ("GET", "/v1/agents/{id}/commands", "agent", "agent {id} not found; register again"),
    ],
)
def test_a_404_quotes_only_a_prefix_of_the_id(
    api: Api, method: str, path: str, role: str, detail: str
) -> None:
    long_id = "j-" + "9" * 60_000
    r = api.call(method, path.format(id=long_id), role)
    shown = long_id[: limits.QUOTE_MAX_CHARS] + "…"
    assert (r.status_code, r.json()) == (404, {"detail": detail.format(id=shown)})


# --- paging the nodes ----------------------------------------------------------------


def _post_nodes(api: Api, count: int) -> list[str]:
    names = [f"n{i:05d}" for i in range(count)]
    body = {"events": [_event(f"e-{n}", n, "idle", AT) for n in names]}
    assert api.call("POST", "/v1/nodes/events", "scheduler", json=body).status_code == 200
    return names


def test_nodes_come_in_pages_that_a_cursor_follows(api: Api) -> None:
    names = _post_nodes(api, 7)
    seen, cursor, pages = [], None, 0
    while True:
        params: dict[str, Any] = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        page = api.call("GET", "/v1/nodes", "scheduler", params=params).json()
        assert page["count"] == 7
        seen += [n["name"] for n in page["data"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert (seen, pages) == (names, 3)


def test_a_cluster_under_the_default_is_one_page(api: Api) -> None:
    _post_nodes(api, 3)
    page = api.call("GET", "/v1/nodes", "admin").json()
    assert (len(page["data"]), page["count"], page["next_cursor"]) == (3, 3, None)
    exact = api.call("GET", "/v1/nodes", "admin", params={"limit": 3}).json()
    assert exact["next_cursor"] is None  # a full last page says it is the last
    assert NODES_PAGE_DEFAULT == 1000


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("params", "loc", "message"),
    [
        ({"limit": 0}, "limit", "Input should be greater than or equal to 1"),
        ({"limit": 10001}, "limit", "Input should be less than or equal to 10000"),
        (
            {"limit": "x"},
            "limit",
            "Input should be a valid integer, unable to parse string as an integer",
        ),  # noqa: E501
        ({"cursor": "n1\x00"}, "cursor", "String should match pattern '^[A-Za-z0-9_.:\\-]+$'"),
        ({"cursor": ""}, "cursor", "String should have at least 1 character"),
    ],
)
def test_a_bad_page_parameter_is_422_naming_it(
    api: Api, params: dict, loc: str, message: str
) -> None:
    r = api.call("GET", "/v1/nodes", "admin", params=params)
    assert (r.status_code, _errors(r)) == (422, [(("query", loc), message)])
