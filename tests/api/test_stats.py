"""The admin's measures (``GET /v1/stats``, the lifetime gauges of ``/metrics``), checked on
a history written by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from api_helpers import SCALABILITY_CSV
from interstice.api.services.stats import compute_stats
from interstice.api.store.tables import IdleInterval, Job, JobMetric, JobRate, Node, Rescale
from interstice.optimizer import ScalabilityTable

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _job(owner: int, **fields) -> Job:  # type: ignore[no-untyped-def]
    return Job(
        owner_token_id=owner,
        min_nodes=1,
        max_nodes=4,
        priority=1.0,
        parallelism="dp",
        global_batch_size=32,
        rescale_up_s=1.0,
        rescale_down_s=1.0,
        job_dir="/nowhere",
        **fields,
    )


def _history(session) -> None:  # type: ignore[no-untyped-def]
    """Window [T0, T0 + 1000 s]; tinycnn's best per-node rate is 100 samples/s (1 node).

    Idle: n1 from 0 to 1000 (an ended interval), n2 idle since 500: 1500 node-s.
    Job 1 (tinycnn): submitted 0, [n1] at 100, [n1, n2] at 600, finished at 900:
        held 500 x 1 + 300 x 2 = 1100 node-s; 50,000 samples = 500 node-s of work
        (30,000 of them reported by 650); JCT 900 s, wait 100 s.
    Job 2 (no model, no rate): queued; left out of the harvest.
    Job 3 ("mine", learned 400 samples/s on 2 nodes = 200 per node): submitted 200, [n3] at
        950: held 50 node-s; 20,000 samples = 100 node-s of work; wait 750 s.
    """
    session.add_all(
        [
            IdleInterval(node="n1", started_at=_at(0), length_s=1000.0),
            Node(name="n2", state="idle", since=_at(500)),
        ]
    )
    one = _job(1, state="finished", model="tinycnn", total_samples=50_000)
    one.samples_done, one.submitted_at, one.finished_at = 50_000.0, _at(0), _at(900)
    two = _job(1, state="queued", model=None, total_samples=10)
    two.samples_done, two.submitted_at = 0.0, _at(0)
    three = _job(1, state="running", model="mine", total_samples=10**6)
    three.samples_done, three.submitted_at = 20_000.0, _at(200)
    session.add_all([one, two, three])
    session.flush()
    for job, at, to in (
        (one, 100, ["n1"]),
        (one, 600, ["n1", "n2"]),
        (one, 900, []),
        (three, 950, ["n3"]),
    ):
        session.add(
            Rescale(
                job_id=job.id,
                at=_at(at),
                from_nodes=[],
                to_nodes=to,
                from_spb_depth=0,
                to_spb_depth=0,
                reason="allocation",
            )
        )
    session.add(JobRate(job_id=three.id, nodes=2, spb_depth=0, samples_per_s=400.0, reports=3))
    session.add(
        JobMetric(job_id=one.id, at=_at(650), step=9, samples=30_000.0, metrics={}),
    )


@pytest.fixture
def history(api):  # type: ignore[no-untyped-def]
    with api.app.state.service.db.write() as session:
        _history(session)
    return api


def test_lifetime_measures_by_hand(history) -> None:
    table = ScalabilityTable.from_csv(SCALABILITY_CSV)
    with history.app.state.service.db.read() as session:
        stats = compute_stats(session, table, None, _at(1000))
    assert stats.model_dump() == {
        "since": None,
        "until": _at(1000),
        "idle_node_hours": pytest.approx(1500 / 3600),
        "harvested_node_hours": pytest.approx(1150 / 3600),
        "utilization": pytest.approx(1150 / 1500),
        "harvest": pytest.approx((500 + 100) / 1500),
        "jobs_finished": 1,
        "jct_mean_s": 900.0,
        "jct_p50_s": 900.0,
        "jct_p95_s": 900.0,
        "wait_mean_s": (100 + 750) / 2,
    }


def test_a_window_counts_only_what_happened_in_it(history) -> None:
    """From 700: idle 300 (n1) + 300 (n2); held 200 x 2 (job 1) + 50 (job 3); work
    (50,000 - 30,000) / 100 + 20,000 / 200 = 300 node-s; job 3's first node at 950."""
    table = ScalabilityTable.from_csv(SCALABILITY_CSV)
    with history.app.state.service.db.read() as session:
        stats = compute_stats(session, table, _at(700), _at(1000))
    assert (stats.idle_node_hours, stats.harvested_node_hours) == (
        pytest.approx(600 / 3600),
        pytest.approx(450 / 3600),
    )
    assert stats.harvest == pytest.approx(300 / 600)
    assert (stats.jobs_finished, stats.wait_mean_s) == (1, 750.0)
    with history.app.state.service.db.read() as session:
        later = compute_stats(session, table, _at(950), _at(1000))
    assert (later.jobs_finished, later.jct_mean_s) == (0, None)


def test_stats_are_for_admins_and_on_metrics(history) -> None:
    assert history.call("GET", "/v1/stats", "user").status_code == 403
    r = history.call("GET", "/v1/stats", "admin", params={"since": "2026-01-01T00:11:40Z"})
    assert r.status_code == 200
    assert (r.json()["since"], r.json()["jobs_finished"]) == ("2026-01-01T00:11:40Z", 1)
    bad = history.call("GET", "/v1/stats", "admin", params={"since": "yesterday"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "since"]
    text = history.client.get("/metrics").text
    assert "interstice_jobs_finished 1.0" in text
    assert "interstice_harvest " in text and "interstice_utilization " in text
