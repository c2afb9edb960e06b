"""Harvest per user and day (``GET /v1/usage``, the per-user gauges of ``/metrics``): from a
job driven through the service, and from a history written by hand across a UTC midnight."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from api_helpers import beat, gauge, start_job
from interstice.api.control.loop import build_problem
from interstice.api.services.usage import compute_usage
from interstice.api.store.tables import Job, JobMetric, Rescale, Token
from sqlalchemy import select

T0 = datetime(2026, 1, 1, 23, 50, tzinfo=UTC)  # ten minutes before a UTC midnight


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def ran(api):  # type: ignore[no-untyped-def]
    """user-1's job j ran on n1, n2 and finished: 1,536 samples reported of its 1,000.
    Its records are then moved to known times: [n1, n2] from T0, none from T0 + 1,200 s
    (so 600 s x 2 nodes before midnight, 600 s x 2 after); the report at T0 + 900 s."""
    agents, job, _ = start_job(api, ["n1", "n2"], total_samples=1000)
    beat(api, agents["n1"], job_id=job["job_id"], step=9, samples_done=1536)
    assert api.job(job["job_id"])["state"] == "finished"
    with api.app.state.service.db.write() as session:
        moves = list(session.scalars(select(Rescale).order_by(Rescale.id)))
        assert [len(r.to_nodes) for r in moves] == [2, 0]
        moves[0].at, moves[1].at = _at(0), _at(1200)
        for metric in session.scalars(select(JobMetric)):
            metric.at = _at(900)
    return api


def test_a_job_driven_through_the_service_counts_its_node_seconds_exactly(ran) -> None:
    r = ran.call("GET", "/v1/usage", "user", params={"until": "2026-01-02T01:00:00Z"})
    assert r.status_code == 200, r.text
    assert r.json()["data"] == [
        {"user": "user-1", "day": "2026-01-01", "node_hours": 1200 / 3600, "samples": 0.0,
         "jobs": 1},
        {"user": "user-1", "day": "2026-01-02", "node_hours": 1200 / 3600, "samples": 1000.0,
         "jobs": 1},
    ]  # fmt: skip
    text = ran.client.get("/metrics").text
    assert gauge(text, 'interstice_user_node_seconds{user="user-1"}') == 2400.0
    assert gauge(text, 'interstice_user_samples{user="user-1"}') == 1000.0


def test_the_window_clips_node_time_and_samples(ran) -> None:
    params = {"since": "2026-01-01T23:55:00", "until": "2026-01-02T00:02:00"}
    rows = ran.call("GET", "/v1/usage", "admin", params=params).json()["data"]
    assert [(row["day"], row["node_hours"] * 3600, row["samples"]) for row in rows] == [
        ("2026-01-01", 600.0, 0.0),
        ("2026-01-02", 240.0, 0.0),  # the report at 00:05 is after the window
    ]
    params["until"] = "2026-01-02T00:06:00"
    rows = ran.call("GET", "/v1/usage", "admin", params=params).json()["data"]
    assert rows[1]["node_hours"] * 3600 == pytest.approx(720.0) and rows[1]["samples"] == 1000
    later = {"since": "2026-01-02T00:20:00"}
    assert ran.call("GET", "/v1/usage", "admin", params=later).json()["count"] == 0


def test_users_see_their_own_usage_and_admins_everyones(ran) -> None:
    assert ran.call("GET", "/v1/usage", "other").json() | {"until": None} == {
        "data": [], "count": 0, "since": None, "until": None,
    }  # fmt: skip
    refused = ran.call("GET", "/v1/usage", "other", params={"user": "user-1"})
    assert refused.status_code == 403
    assert refused.json()["detail"] == "user: a user token sees only its own usage (user-2)"
    everyone = ran.call("GET", "/v1/usage", "admin").json()["data"]
    assert {row["user"] for row in everyone} == {"user-1"}
    assert ran.call("GET", "/v1/usage", "admin", params={"user": "user-2"}).json()["count"] == 0
    assert ran.call("GET", "/v1/usage", "scheduler").status_code == 403


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({"since": "yesterday"}, ["query", "since"]),
        ({"until": "2026-13-01"}, ["query", "until"]),
        ({"user": ""}, ["query", "user"]),
    ],
)
def test_bad_windows_are_422_naming_the_field(ran, params, where) -> None:
    r = ran.call("GET", "/v1/usage", "admin", params=params)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == where


def test_a_window_that_ends_before_it_starts_has_no_rows(ran) -> None:
    params = {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}
    r = ran.call("GET", "/v1/usage", "admin", params=params)
    assert (r.status_code, r.json()["count"]) == (200, 0)


def test_a_history_by_hand_sums_per_user_and_day(api) -> None:
    """alice (a Unix owner) and the token user-2 (no owner): alice's job a1 holds 1 node from
    T0 to T0 + 1,800 s, then 3 until T0 + 2,400 s, then none; her a2 holds 2 nodes from
    T0 + 3,000 s to the window's end at T0 + 3,600 s. user-2's b holds 4 nodes from T0 - 600
    to T0 + 300 s. Reports (cumulative): a1 100 at T0 + 60, 400 at T0 + 700 (after midnight),
    b 50 at T0 - 10.
    Day 1 (to T0 + 600): alice 600 node-s, 100 samples, 1 job; user-2 3,600 node-s, 50
    samples. Day 2: alice 1,200 + 600 x 3 + 600 x 2 = 4,200 node-s, 300 samples, 2 jobs."""
    with api.app.state.service.db.write() as session:
        other = session.scalar(select(Token.id).where(Token.name == "user-2"))
        fields = dict(min_nodes=1, max_nodes=4, priority=1.0, parallelism="dp",
                      global_batch_size=32, rescale_up_s=1.0, rescale_down_s=1.0,
                      job_dir="/nowhere", state="finished", model="tinycnn",
                      total_samples=10_000)  # fmt: skip
        a1 = Job(owner_token_id=other, owner_name="alice", owner_uid=1001, **fields)
        a2 = Job(owner_token_id=other, owner_name="alice", owner_uid=1001, **fields)
        b = Job(owner_token_id=other, **fields)
        session.add_all([a1, a2, b])
        session.flush()
        for job, at, nodes in ((b, -600, 4), (a1, 0, 1), (b, 300, 0), (a1, 1800, 3),
                               (a1, 2400, 0), (a2, 3000, 2)):  # fmt: skip
            session.add(Rescale(job_id=job.id, at=_at(at), from_nodes=[],
                                to_nodes=[f"n{i}" for i in range(nodes)], from_spb_depth=0,
                                to_spb_depth=0, reason="allocation"))  # fmt: skip
        for job, at, samples in ((a1, 60, 100.0), (a1, 700, 400.0), (b, -10, 50.0)):
            session.add(JobMetric(job_id=job.id, at=_at(at), step=1, samples=samples,
                                  metrics={}))  # fmt: skip
    with api.app.state.service.db.read() as session:
        rows = compute_usage(session, None, _at(3600))
        alone = compute_usage(session, None, _at(3600), user="alice")
    day1, day2 = T0.date(), T0.date() + timedelta(days=1)
    assert [(r.user, r.day, r.node_hours * 3600, r.samples, r.jobs) for r in rows] == [
        ("alice", day1, pytest.approx(600.0), 100.0, 1),
        ("alice", day2, pytest.approx(4200.0), 300.0, 2),
        ("user-2", day1, pytest.approx(3600.0), 50.0, 1),
    ]
    assert alone == rows[:2]


def test_the_loop_tells_the_optimizer_each_jobs_user_and_admits_fairly(api) -> None:
    """user-1 queues two one-node jobs, then user-2 one, on a pool of two nodes: admission
    takes a job of each user (first come first served would take user-1's two), and the
    optimizer is told whose each job is."""
    for node in ("n1", "n2"):
        api.register(node)
    mine = [api.submit(min_nodes=1, max_nodes=1)["job_id"] for _ in range(2)]
    theirs = api.submit("other", min_nodes=1, max_nodes=1)["job_id"]
    api.node_events(("e1", "n1", "idle", 0), ("e2", "n2", "idle", 0))
    running = {mine[0], theirs}
    api.wait_for(lambda: all(api.job(j, "admin")["state"] == "running" for j in running))
    assert api.job(mine[1])["state"] == "queued"
    problem, _ = build_problem(api.app.state.service)
    assert {(j.job_id, j.user) for j in problem.jobs} == {
        (mine[0], "user-1"), (theirs, "user-2"),
    }  # fmt: skip
