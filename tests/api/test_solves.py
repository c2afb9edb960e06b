"""The dashboard's API: ``GET /v1/solves`` (the applied solves), ``GET /v1/nodes/history``
(the nodes over time, checked on a history written by hand and on a live one) and the
page ``GET /ui`` with its static files."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api_helpers import start_job
from interstice.api.services.history import AgentCounts, node_history
from interstice.api.store.tables import IdleInterval, Job, Node, NodeEvent, Rescale

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _write_history(session) -> None:  # type: ignore[no-untyped-def]
    """Nodes n1..n3 known from 0; n1 idle 0..600 then busy (reclaimed from job 1), n2 idle
    since 100, n3 busy throughout. Job 1 holds [n1] from 200, [n1, n2] from 300, [n2] from
    600 (the reclaim)."""
    session.add_all(
        [
            IdleInterval(node="n1", started_at=_at(0), length_s=600.0),
            Node(name="n1", state="busy", since=_at(600)),
            Node(name="n2", state="idle", since=_at(100)),
            Node(name="n3", state="busy", since=_at(0)),
        ]
    )
    for event_id, node, state, at, reclaimed in (
        ("e1", "n1", "idle", 0, None),
        ("e2", "n2", "busy", 0, None),
        ("e3", "n3", "busy", 0, None),
        ("e4", "n2", "idle", 100, None),
        ("e5", "n1", "busy", 600, 1),
    ):
        session.add(
            NodeEvent(
                event_id=event_id,
                node=node,
                state=state,
                at=_at(at),
                grace_s=0.0,
                reclaimed_job_id=reclaimed,
            )
        )
    job = Job(
        owner_token_id=1,
        state="running",
        model="tinycnn",
        min_nodes=1,
        max_nodes=2,
        total_samples=10,
        priority=1.0,
        parallelism="dp",
        global_batch_size=2,
        rescale_up_s=1.0,
        rescale_down_s=1.0,
        job_dir="/nowhere",
        submitted_at=_at(0),
    )
    session.add(job)
    session.flush()
    for at, to, reason in ((200, ["n1"], "allocation"), (300, ["n1", "n2"], "allocation")):
        session.add(_rescale(job.id, at, to, reason))
    session.add(_rescale(job.id, 600, ["n2"], "reclaim"))


def _rescale(job_id: int, at: float, to: list[str], reason: str) -> Rescale:
    return Rescale(
        job_id=job_id,
        at=_at(at),
        from_nodes=[],
        to_nodes=to,
        from_spb_depth=0,
        to_spb_depth=0,
        reason=reason,
    )


def test_node_history_by_hand(api) -> None:  # type: ignore[no-untyped-def]
    with api.app.state.service.db.write() as session:
        _write_history(session)
    agents = AgentCounts(_at(0))
    agents.record(_at(50), 2)
    agents.record(_at(60), 2)  # unchanged: not a new point
    agents.record(_at(700), 3)
    with api.app.state.service.db.read() as session:
        history = node_history(session, agents, _at(0), _at(1000))
    points = [(p.at, p.idle, p.busy, p.allocated, p.agents_alive) for p in history.data]
    assert points == [
        (_at(0), 1, 2, {}, None),
        (_at(50), 1, 2, {}, 2),
        (_at(100), 2, 1, {}, 2),
        (_at(200), 2, 1, {"j-1": 1}, 2),
        (_at(300), 2, 1, {"j-1": 2}, 2),
        (_at(600), 1, 2, {"j-1": 1}, 2),
        (_at(700), 1, 2, {"j-1": 1}, 3),
        (_at(1000), 1, 2, {"j-1": 1}, 3),
    ]
    assert [(r.at, r.node, r.job_id) for r in history.reclaims] == [(_at(600), "n1", "j-1")]
    # a window after the changes starts from the state then: the rescale before it counts
    with api.app.state.service.db.read() as session:
        late = node_history(session, agents, _at(800), _at(1000))
    assert [(p.idle, p.busy, p.allocated) for p in late.data] == [(1, 2, {"j-1": 1})] * 2
    assert late.reclaims == []


def test_solves_and_live_node_history(api) -> None:  # type: ignore[no-untyped-def]
    agents, job, _ = start_job(api, ["n1", "n2"])
    r = api.call("GET", "/v1/solves", "admin")
    assert r.status_code == 200, r.text
    # the solve that started the job (a submission committed while it began solving makes
    # one more solve follow it, which changes nothing)
    newest = next(s for s in r.json()["data"] if s["rescales"])
    assert r.json()["count"] >= 1
    assert newest["status"] in ("optimal", "feasible", "fallback")
    assert newest["solve_time_s"] >= 0 and newest["rescales"] == 1
    assert [(j["job_id"], j["node_count"], j["rescaled"]) for j in newest["jobs"]] == [
        (job["job_id"], 2, True)
    ]
    assert api.call("GET", "/v1/solves", "user").status_code == 403

    api.node_events(("r1", "n1", "busy", 5.0))
    api.wait_for(lambda: api.job(job["job_id"])["nodes"] == ["n2"])
    r = api.call("GET", "/v1/nodes/history", "admin")
    assert r.status_code == 200, r.text
    history = r.json()
    last = history["data"][-1]
    assert (last["idle"], last["busy"], last["allocated"]) == (1, 1, {job["job_id"]: 1})
    assert [(x["node"], x["job_id"]) for x in history["reclaims"]] == [("n1", job["job_id"])]
    assert max(p["allocated"].get(job["job_id"], 0) for p in history["data"]) == 2
    assert api.call("GET", "/v1/nodes/history", "user").status_code == 403
    bad = api.call("GET", "/v1/nodes/history", "admin", params={"since": "last week"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "since"]


def test_the_dashboard_page_and_its_files_are_served(api) -> None:  # type: ignore[no-untyped-def]
    page = api.client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for path in ("/ui/static/app.js", "/ui/static/vendor/uPlot.iife.min.js"):
        assert f'src="{path}"' in page.text
        assert api.client.get(path).status_code == 200
    assert api.client.get("/ui/static/views/jobs.js").status_code == 200
    assert "/ui" not in api.client.get("/openapi.json").json()["paths"]
