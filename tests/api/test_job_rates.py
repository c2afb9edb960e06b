"""Rates learned online: what heartbeats teach the service of a job, and what the control
loop then tells the optimizer (its rates, rescale costs, and which jobs are admitted)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from api_helpers import SCALABILITY_CSV, beat, start_job
from interstice.api.control.loop import build_problem, optimizer_job
from interstice.api.services import state
from interstice.api.store.tables import Job, JobRate, utcnow
from interstice.optimizer import ScalabilityTable
from interstice.optimizer.learning import RateObservation, default_curve, fit_curve
from sqlalchemy import select

TABLE = ScalabilityTable.from_csv(SCALABILITY_CSV)


def _rates(api) -> list[tuple[int, int, float, int]]:  # type: ignore[no-untyped-def]
    with api.app.state.service.db.read() as session:
        rows = session.scalars(select(JobRate).order_by(JobRate.nodes))
        return [(r.nodes, r.spb_depth, r.samples_per_s, r.reports) for r in rows]


def test_reports_of_the_current_generation_are_observations_after_the_first(api) -> None:
    agents, job, _ = start_job(api, ["n1", "n2"])
    j = job["job_id"]
    g1 = {"job_id": j, "rendezvous_id": f"{j}-g1"}
    beat(api, agents["n1"], **g1, step=5, samples_per_s=999.0)  # first after the start: skipped
    assert _rates(api) == []
    assert api.job(j)["rescales"][0]["cost_s"] is None
    beat(api, agents["n1"], **g1, step=6, samples_per_s=100.0)
    beat(api, agents["n2"], **g1, step=6, samples_per_s=100.0)  # the same step: counted once
    beat(api, agents["n2"], **g1, step=7, samples_per_s=200.0, spb_depth=0)
    beat(api, agents["n1"], job_id=j, rendezvous_id=f"{j}-g0", step=8, samples_per_s=5.0)
    assert _rates(api) == [(2, 0, 150.0, 2)]  # (100 + 200) / 2 on 2 nodes; g0 is not current
    (start,) = api.job(j)["rescales"]
    assert (start["generation"], start["to_nodes"]) == (1, ["n1", "n2"])
    assert start["cost_s"] is not None and start["cost_s"] >= 0

    api.node_events(("b2", "n2", "busy", 30))  # generation 2 on one node
    g2 = {"job_id": j, "rendezvous_id": f"{j}-g2"}
    beat(api, agents["n1"], **g2, step=7, samples_per_s=80.0)  # resumed from a checkpoint
    beat(api, agents["n1"], **g2, step=8, samples_per_s=80.0)  # not beyond step 8: no rate
    beat(api, agents["n1"], **g2, step=9, samples_per_s=90.0)
    assert _rates(api) == [(1, 0, 90.0, 1), (2, 0, 150.0, 2)]
    shrink = api.job(j)["rescales"][-1]
    assert (shrink["generation"], shrink["reason"]) == (2, "reclaim")
    assert shrink["cost_s"] is not None  # ended by the first report beyond step 7


def test_the_optimizer_gets_the_fitted_curve_and_measured_costs() -> None:
    job = Job(
        id=3,
        state="running",
        model="tinycnn",
        min_nodes=1,
        max_nodes=4,
        total_samples=1000,
        samples_done=400.0,
        priority=1.0,
        parallelism="dp",
        rescale_up_s=18.0,
        rescale_down_s=12.0,
        spb_depth=0,
        submitted_at=utcnow(),
    )
    plain = optimizer_job(job, TABLE, [], ([], []), ())
    assert plain is not None
    assert (plain.rates, plain.spb_depths, plain.max_nodes) == (None, (0,), 4)  # the table
    assert (plain.rescale_up_s, plain.rescale_down_s, plain.samples_remaining) == (18, 12, 600)
    seen = [RateObservation(nodes=2, spb_depth=0, samples_per_s=50.0, weight=4)]
    learned = optimizer_job(job, TABLE, seen, ([30.0, 10.0, 20.0], [4.0]), ("n1",))
    assert learned is not None
    prior = tuple(p for p in TABLE.points if p.model == "tinycnn")
    assert learned.rates == fit_curve(prior, seen, 4)
    assert (learned.rescale_up_s, learned.rescale_down_s) == (20.0, 4.0)  # medians


def test_a_job_outside_the_table_runs_on_the_default_curve(api) -> None:
    agents, job, _ = start_job(api, ["n1", "n2"], model=None, parallelism="spb", max_nodes=8)
    with api.app.state.service.db.read() as session:
        row = session.get(Job, 1)
        told = optimizer_job(row, TABLE, [], ([], []), ())
    assert told is not None
    assert (told.model, told.rates, told.spb_depths) == ("j-1", default_curve(8), (0,))
    assert api.job(job["job_id"])["nodes"] == ["n1", "n2"]


def test_a_splitbrain_job_is_only_ever_offered_depth_zero() -> None:
    job = Job(
        id=1,
        state="queued",
        model="tinycnn",
        min_nodes=1,
        max_nodes=4,
        total_samples=10,
        samples_done=0.0,
        priority=1.0,
        parallelism="splitbrain",
        rescale_up_s=1.0,
        rescale_down_s=1.0,
        spb_depth=0,
        submitted_at=utcnow(),
    )
    told = optimizer_job(job, TABLE, [], ([], []), ())
    assert told is not None and told.spb_depths == (0,)


def test_admission_stops_once_the_admitted_jobs_can_use_every_node(api) -> None:
    for node in ("n1", "n2", "n3"):
        api.register(node)
    api.node_events(*((f"e{i}", f"n{i}", "idle", 0) for i in (1, 2, 3)))
    first = api.submit(min_nodes=1, max_nodes=2)
    api.wait_for(lambda: api.job(first["job_id"])["state"] == "running")
    for _ in range(3):
        api.submit(min_nodes=1, max_nodes=2)
    problem, _ = build_problem(api.app.state.service)
    # running j-1 can use 2 of 3 nodes: j-2 is admitted (2 + 2 >= 3), j-3 and j-4 wait
    assert [j.job_id for j in problem.jobs] == ["j-1", "j-2"]


def test_a_job_that_cannot_start_on_the_pool_does_not_hold_admission(api) -> None:
    for node in ("n1", "n2"):
        api.register(node)
    api.node_events(("e1", "n1", "idle", 0), ("e2", "n2", "idle", 0))
    api.submit(min_nodes=3, max_nodes=3, model=None)  # all or nothing: 3 of 2 nodes
    api.submit(min_nodes=1, max_nodes=2, model=None)
    problem, _ = build_problem(api.app.state.service)
    assert [j.job_id for j in problem.jobs] == ["j-1", "j-2"]


def test_max_active_jobs_caps_admission(make_api) -> None:
    with make_api(max_active_jobs=1) as api:
        for node in ("n1", "n2", "n3"):
            api.register(node)
        api.node_events(*((f"e{i}", f"n{i}", "idle", 0) for i in (1, 2, 3)))
        api.submit(min_nodes=1, max_nodes=1, model=None)
        api.submit(min_nodes=1, max_nodes=1, model=None)
        problem, _ = build_problem(api.app.state.service)
        assert [j.job_id for j in problem.jobs] == ["j-1"]


@pytest.mark.parametrize(("efficiency", "admitted"), [(0.95, ["j-1", "j-2"]), (0.0, ["j-1"])])
def test_admission_counts_each_job_at_its_efficient_size(make_api, efficiency, admitted) -> None:
    # tinycnn keeps 0.95 of its best per-node rate on 2 nodes (190/s) and falls to 0.92 on
    # 3 (275/s interpolated): at admission_efficiency 0.95 a 4-node job counts 2 usable
    # nodes, so on 4 idle nodes j-1 (0 < 4) and j-2 (2 < 4) are admitted and j-3 waits
    # (4 >= 4); at 0 each counts its max_nodes 4 and j-1 alone fills the pool.
    with make_api(admission_efficiency=efficiency) as api:
        for node in ("n1", "n2", "n3", "n4"):
            api.register(node)
        api.node_events(*((f"e{i}", f"n{i}", "idle", 0) for i in (1, 2, 3, 4)))
        for _ in range(3):
            api.submit(min_nodes=1, max_nodes=4)
        problem, _ = build_problem(api.app.state.service)
        assert [j.job_id for j in problem.jobs] == admitted


def test_a_job_whose_start_the_horizon_cannot_pay_does_not_hold_admission(api) -> None:
    # With a 60 s horizon a job whose rescale_up_s is 120 s earns nothing from a start, so
    # it counts 0 usable nodes and j-2 is admitted behind it; counted at its 2 nodes, j-1
    # alone would fill the 2-node pool and j-2 would wait with both nodes idle.
    r = api.call("PUT", "/v1/objective", "admin", json={"horizon_s": 60})
    assert r.status_code == 200, r.text
    for node in ("n1", "n2"):
        api.register(node)
    api.node_events(("e1", "n1", "idle", 0), ("e2", "n2", "idle", 0))
    api.submit(min_nodes=1, max_nodes=2, rescale_up_s=120)
    api.submit(min_nodes=1, max_nodes=2)
    problem, _ = build_problem(api.app.state.service)
    assert [j.job_id for j in problem.jobs] == ["j-1", "j-2"]


def test_a_forecast_read_after_the_pool_counts_only_the_pools_nodes(api, monkeypatch) -> None:
    # The pool and the untils are two reads: a node whose idle event lands between them has
    # an until but is not in the problem's pool; counted, it gave a coverage above 1 (a
    # Problem the optimizer refuses, so no solve ran until the next event).
    api.register("n1")
    api.node_events(("e1", "n1", "idle", 0))
    api.submit(min_nodes=1, max_nodes=1, model=None)
    later = utcnow() + timedelta(hours=1)
    monkeypatch.setattr(state, "allocatable_untils", lambda *_: {"n1": later, "n-between": later})
    problem, _ = build_problem(api.app.state.service)
    assert problem.idle_nodes == ("n1",)
    assert set(problem.idle_forecast_s) == {"n1"}
    assert problem.forecast_coverage == 1.0
