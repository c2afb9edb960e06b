"""Node events' ``until``: when the scheduler expects to need an idle node back.

Refused (422 naming ``until``) when not after ``at`` or on a ``busy`` event; kept per node
from its newest applied event, so a later event revises it and one without it withdraws it;
a superseded event or a retry changes nothing; a retry with another ``until`` is a conflict;
``GET /v1/nodes`` shows it, and the control loop hands the optimizer the seconds left and
the forecast coverage of the ended idle intervals.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from api_helpers import Api, gauge
from interstice.api.control import loop
from interstice.api.services import state

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _event(event_id: str, node: str, at_s: float, until_s: float | None, **fields: Any) -> dict:
    """An idle event of ``node`` at ``T0 + at_s``, with ``until`` at ``T0 + until_s`` (None:
    no ``until``)."""
    event = {
        "event_id": event_id,
        "node": node,
        "state": "idle",
        "at": _iso(T0 + timedelta(0, at_s)),
    }
    if until_s is not None:
        event["until"] = _iso(T0 + timedelta(seconds=until_s))
    return event | fields


def _post(api: Api, *events: dict):  # type: ignore[no-untyped-def]
    return api.call("POST", "/v1/nodes/events", "scheduler", json={"events": list(events)})


def _untils(api: Api) -> dict[str, str | None]:
    return {n["name"]: n["until"] for n in api.nodes()}


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("until_s", "fields"),
    [(0, {}), (-60, {}), (600, {"state": "busy"})],
    ids=["equal to at", "before at", "on a busy event"],
)
def test_an_until_that_is_no_forecast_is_422_naming_it(
    api: Api, until_s: float, fields: dict
) -> None:
    r = _post(api, _event("e1", "n1", 0, until_s, **fields))
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "events", 0, "until"]
    assert _untils(api) == {}


def test_until_is_shown_revised_and_withdrawn(api: Api) -> None:
    first = _post(api, _event("e1", "n1", 0, 600), _event("e2", "n2", 0, None))
    assert first.status_code == 200, first.text
    assert _untils(api) == {"n1": "2026-01-01T00:10:00Z", "n2": None}
    revised = _post(api, _event("e3", "n1", 60, 900))
    assert [d["applied"] for d in revised.json()["data"]] == [True]
    assert _untils(api)["n1"] == "2026-01-01T00:15:00Z"
    # older than the revision: recorded, changes nothing
    late = _post(api, _event("e4", "n1", 30, 300)).json()["data"][0]
    assert (late["applied"], late["reason"]) == (
        False,
        "superseded by a newer event at 2026-01-01T00:01:00Z",
    )
    # a retry of the first event answers its first record and changes nothing
    assert _post(api, _event("e1", "n1", 0, 600)).json()["data"] == first.json()["data"][:1]
    assert _untils(api)["n1"] == "2026-01-01T00:15:00Z"
    withdrawn = _post(api, _event("e5", "n1", 120, None))
    assert withdrawn.json()["data"][0]["applied"] is True
    assert _untils(api)["n1"] is None
    since = {n["name"]: n["since"] for n in api.nodes()}
    assert since["n1"] == "2026-01-01T00:00:00Z"  # idle events for an idle node: still idle
    # a busy event takes the node back and leaves no forecast
    _post(api, _event("e6", "n2", 10, 700))
    busy = {"event_id": "e7", "node": "n2", "state": "busy", "at": _iso(T0 + timedelta(0, 20))}
    assert _post(api, busy).status_code == 200
    assert {n["name"]: (n["state"], n["until"]) for n in api.nodes()}["n2"] == ("busy", None)


def test_a_retry_with_another_until_is_a_conflict(api: Api) -> None:
    assert _post(api, _event("e1", "n1", 0, 600)).status_code == 200
    r = _post(api, _event("e1", "n1", 0, 900))
    assert r.status_code == 409, r.text
    assert r.json()["detail"] == "event_id 'e1' was already used for a different event"
    assert _untils(api)["n1"] == "2026-01-01T00:10:00Z"


def test_the_seconds_left_reach_the_problem(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    for node in ("n1", "n2", "n3", "n4"):
        api.register(node)
    r = _post(
        api,
        _event("e1", "n1", -60, 600),  # 600 s left at T0
        _event("e2", "n2", -60, 1200),
        _event("e3", "n3", -120, -30),  # its end has passed: stale, unknown as if not given
        _event("e4", "n4", -60, None),  # unknown: not in the forecasts
    )
    assert r.status_code == 200, r.text
    api.submit(min_nodes=1, max_nodes=3)
    monkeypatch.setattr(loop, "utcnow", lambda: T0)
    built = loop.build_problem(api.app.state.service)
    assert built is not None
    problem, _ = built
    assert problem.idle_nodes == ("n1", "n2", "n3", "n4")
    assert problem.idle_forecast_s == {"n1": 600.0, "n2": 1200.0}
    # no idle interval has ended: the pool's share with a forecast stands for the coverage
    assert problem.forecast_coverage == pytest.approx(2 / 4)
    assert not problem.forecasts_used  # below the default 0.9


def test_no_forecast_gives_none(api: Api) -> None:
    api.register("n1")
    assert _post(api, _event("e1", "n1", 0, None)).status_code == 200
    api.submit(min_nodes=1, max_nodes=1)
    built = loop.build_problem(api.app.state.service)
    assert built is not None
    assert built[0].idle_forecast_s is None


def test_idle_forecast_s_leaves_a_passed_end_out() -> None:
    untils = {"a": T0 + timedelta(seconds=90.5), "b": T0 - timedelta(seconds=5), "c": T0}
    assert loop.idle_forecast_s(untils, T0) == {"a": 90.5}


@pytest.mark.parametrize("stale", [12, 6])
def test_passed_untils_leave_a_running_job_its_nodes(api: Api, stale: int) -> None:
    """12 idle nodes hold a running job; then the scheduler's ``until`` of ``stale`` of them
    lies an hour in the past (the others' a day ahead). A passed ``until`` is an unknown end,
    shown as stale and counted by a gauge: the job keeps its 12 nodes (read as 0 s left, the
    stale nodes would leave every allocation)."""
    now = datetime.now(UTC).replace(microsecond=0)
    nodes = [f"n{i:02d}" for i in range(1, 13)]
    agents = {node: api.register(node) for node in nodes}
    started = now - timedelta(hours=3)
    r = api.node_events(*((f"i-{n}", n, "idle", 0) for n in nodes), at=_iso(started))
    assert r.status_code == 200, r.text
    job = api.submit(model="custom", min_nodes=1, max_nodes=12)
    api.wait_for(lambda: api.job(job["job_id"])["nodes"] == nodes)
    for agent in agents.values():
        api.ack_all(agent, api.poll(agent, wait=0))
    control = api.app.state.control
    solves = control.solves
    revised = started + timedelta(minutes=1)
    untils = {
        n: now - timedelta(hours=1) if i < stale else now + timedelta(days=1)
        for i, n in enumerate(nodes)
    }
    events = [
        {
            "event_id": f"u-{n}",
            "node": n,
            "state": "idle",
            "at": _iso(revised),
            "until": _iso(until),
        }
        for n, until in untils.items()
    ]
    assert _post(api, *events).status_code == 200
    problem, backend = loop.build_problem(api.app.state.service)
    (share,) = loop.optimizer_solver(problem, backend).jobs
    assert share.node_names == tuple(nodes)
    assert set(problem.idle_forecast_s or {}) == set(nodes[stale:])
    # the control loop's own solve after the revision leaves the job where it is
    api.wait_for(lambda: control.solves > solves)
    assert api.job(job["job_id"])["nodes"] == nodes
    shown = {n["name"]: n["until_stale"] for n in api.nodes()}
    assert shown == {n: i < stale for i, n in enumerate(nodes)}
    assert _metric(api, "interstice_stale_forecasts") == stale


def _metric(api: Api, name: str) -> float:
    return gauge(api.call("GET", "/metrics", "admin").text, name)


def test_the_forecast_coverage_decides_whether_the_solves_use_the_forecasts(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "utcnow", lambda: T0 + timedelta(seconds=30))  # n1's until ahead
    # 60 idle intervals end; the nodes of 30 of them had an until at their busy event.
    events = []
    for i in range(1, 61):
        node = f"h{i:02d}"
        events.append(_event(f"i{i}", node, 0, 600 if i <= 30 else None))
        busy_at = _iso(T0 + timedelta(0, 10))
        events.append({"event_id": f"b{i}", "node": node, "state": "busy", "at": busy_at})
    assert _post(api, *events).status_code == 200
    with api.app.state.service.db.read() as session:
        assert state.forecast_coverage(session) == 0.5
    api.register("n1")
    assert _post(api, _event("n1", "n1", 20, 3600)).status_code == 200
    api.submit(min_nodes=1, max_nodes=1)
    problem, _ = loop.build_problem(api.app.state.service)
    assert (problem.forecast_coverage, problem.forecast_min_coverage) == (0.5, 0.9)
    assert problem.idle_forecast_s is not None and not problem.forecasts_used
    api.wait_for(lambda: _metric(api, "interstice_forecast_coverage") == 0.5)
    assert _metric(api, "interstice_forecasts_used") == 0.0
    change = {"forecast_min_coverage": 0.5}
    assert api.call("PUT", "/v1/objective", "admin", json=change).status_code == 200
    assert loop.build_problem(api.app.state.service)[0].forecasts_used
    api.wait_for(lambda: _metric(api, "interstice_forecasts_used") == 1.0)


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    "until",
    ["2100-12-31T23:00-05:00", "2101-01-01T04:00Z", "2101-01-01T00:00Z"],
    ids=["2101 in UTC, written with an offset", "2101 in UTC", "the first instant of 2101"],
)
def test_the_year_range_is_compared_in_utc(api: Api, until: str) -> None:
    event = _event("e1", "n1", 0, None) | {"until": until}
    r = _post(api, event)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "events", 0, "until"]
    assert "outside the years 2000..2100 in UTC" in error["msg"]
    assert _untils(api) == {}


@pytest.mark.sqlite_only
def test_the_last_instants_of_2100_are_accepted_whatever_the_offset(api: Api) -> None:
    events = [
        _event("e1", "n1", 0, None) | {"until": "2100-12-31T23:59:59Z"},
        _event("e2", "n2", 0, None) | {"until": "2100-12-31T18:00-05:00"},
    ]
    assert _post(api, *events).status_code == 200
    assert _untils(api) == {"n1": "2100-12-31T23:59:59Z", "n2": "2100-12-31T23:00:00Z"}


@pytest.mark.sqlite_only
@pytest.mark.parametrize("until", [4102444800, 4102444800.5, "4102444800", " 1e9 "])
def test_a_number_is_no_until(api: Api, until: object) -> None:
    """The schema says an ISO 8601 string: a number (epoch seconds, or a string of one) is
    refused naming ``until``, never read as a time."""
    r = _post(api, _event("e1", "n1", 0, None) | {"until": until})
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "events", 0, "until"]
    assert "not a number" in error["msg"]
    assert _untils(api) == {}
    schema = api.client.get("/openapi.json").json()["components"]["schemas"]
    described = schema["NodeEventCreate"]["properties"]["until"]["anyOf"][0]["description"]
    assert "a number is refused" in described
