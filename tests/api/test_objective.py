"""Admin settings: the objective, the scalability table, and the audit log of both."""

from __future__ import annotations

import statistics
from datetime import datetime, timedelta

import pytest
from api_helpers import SCALABILITY_CSV
from interstice.api.control.loop import build_problem, horizon_s
from interstice.api.services import state
from interstice.api.services.objective import stored as stored_objective
from interstice.api.store.tables import Config, IdleInterval, Node, utcnow
from interstice.optimizer import Weights
from sqlalchemy import func, select


def test_objective_defaults_changes_and_audit(api) -> None:
    before = api.call("GET", "/v1/objective", "admin").json()
    assert before == {
        "throughput": 1.0,
        "speedup": False,
        "node_seconds": True,
        "fairness": 0.0,
        "priority": 1.0,
        "churn": 0.0,
        "early_finish": 0.9,
        "completion_s": 100_000.0,
        "reclaim_loss_s": 0.0,
        "forecast_classes": 1,
        "forecast_min_coverage": 0.9,
        "horizon_s": "auto",
        "backend": "cpsat",
        "time_limit_s": 0.2,
        "relative_gap": 1e-3,
    }
    change = {"horizon_s": 600, "backend": "cbc", "relative_gap": 0}
    r = api.call("PUT", "/v1/objective", "admin", json=change)
    assert r.status_code == 200
    after = before | {"horizon_s": 600.0, "backend": "cbc", "relative_gap": 0.0}
    assert r.json() == after == api.call("GET", "/v1/objective", "admin").json()
    (entry,) = _audit(api, "objective.update")
    assert (entry["actor"], entry["action"], entry["old"], entry["new"]) == (
        "admin-1",
        "objective.update",
        before,
        after,
    )


@pytest.mark.sqlite_only
def test_bad_objective_values_name_the_field(api) -> None:
    r = api.call("PUT", "/v1/objective", "admin", json={"horizon_s": -5})
    assert r.status_code == 422
    assert [e["msg"] for e in r.json()["detail"]] == [
        "Value error, horizon_s must be in (0, 1e7] or 'auto', got -5.0"
    ]
    r = api.call("PUT", "/v1/objective", "admin", json={"backend": "gurobi"})
    assert [(e["loc"], e["msg"]) for e in r.json()["detail"]] == [
        (["body", "backend"], "Input should be 'cbc' or 'cpsat'")
    ]
    r = api.call("PUT", "/v1/objective", "admin", json={"early_finish": 1.5})
    assert [(e["loc"], e["msg"]) for e in r.json()["detail"]] == [
        (["body", "early_finish"], "Input should be less than or equal to 1")
    ]
    r = api.call("PUT", "/v1/objective", "admin", json={"completion_s": -60})
    assert [(e["loc"], e["msg"]) for e in r.json()["detail"]] == [
        (["body", "completion_s"], "Input should be greater than or equal to 0")
    ]
    r = api.call("PUT", "/v1/objective", "admin", json={"relative_gap": 1})
    assert [(e["loc"], e["msg"]) for e in r.json()["detail"]] == [
        (["body", "relative_gap"], "Input should be less than 1")
    ]
    for classes, message in ((0, "greater than or equal to 1"), (17, "less than or equal to 16")):
        r = api.call("PUT", "/v1/objective", "admin", json={"forecast_classes": classes})
        assert [(e["loc"], e["msg"]) for e in r.json()["detail"]] == [
            (["body", "forecast_classes"], f"Input should be {message}")
        ]
    r = api.call("PUT", "/v1/objective", "admin", json={"forecast_min_coverage": 1.5})
    assert [(e["loc"], e["msg"]) for e in r.json()["detail"]] == [
        (["body", "forecast_min_coverage"], "Input should be less than or equal to 1")
    ]
    assert _audit(api, "objective.update") == []


def test_an_objective_stored_before_a_setting_existed_loads_its_default(api) -> None:
    stored = api.call("GET", "/v1/objective", "admin").json() | {"churn": 0.25}
    del stored["early_finish"], stored["forecast_classes"]
    with api.app.state.service.db.write() as session:
        session.add(Config(key="objective", value=stored))
    defaults = {"early_finish": 0.9, "forecast_classes": 1}
    assert api.call("GET", "/v1/objective", "admin").json() == stored | defaults


def test_speedup_and_node_seconds_turn_each_other_off(api) -> None:
    r = api.call("PUT", "/v1/objective", "admin", json={"speedup": True})
    assert (r.json()["speedup"], r.json()["node_seconds"]) == (True, False)
    r = api.call("PUT", "/v1/objective", "admin", json={"node_seconds": True})
    assert (r.json()["speedup"], r.json()["node_seconds"]) == (False, True)
    r = api.call("PUT", "/v1/objective", "admin", json={"node_seconds": False})
    assert (r.json()["speedup"], r.json()["node_seconds"]) == (False, False)  # raw samples
    r = api.call("PUT", "/v1/objective", "admin", json={"speedup": True, "node_seconds": True})
    assert r.status_code == 422
    assert [e["msg"] for e in r.json()["detail"]] == [
        "Value error, speedup and node_seconds may not both be true"
    ]


def test_an_objective_stored_with_speedup_before_node_seconds_keeps_speedup(api) -> None:
    stored = api.call("GET", "/v1/objective", "admin").json() | {"speedup": True}
    del stored["node_seconds"]
    with api.app.state.service.db.write() as session:
        session.add(Config(key="objective", value=stored))
    shown = api.call("GET", "/v1/objective", "admin").json()
    assert (shown["speedup"], shown["node_seconds"]) == (True, False)


def test_the_solver_uses_the_changed_backend(api) -> None:
    control = api.app.state.control
    asked: list[str] = []
    solve = control.solver

    def spy(problem, backend):
        asked.append(backend)
        return solve(problem, backend)

    control.solver = spy
    for backend in ("cbc", "cpsat"):
        api.call("PUT", "/v1/objective", "admin", json={"backend": backend, "horizon_s": 100})
        agent = api.register(f"n-{backend}", report_idle=True)
        api.submit(min_nodes=1, max_nodes=1)
        assert [c["kind"] for c in api.poll(agent)] == ["start"]
        assert asked and asked[-1] == backend


def test_the_problem_carries_every_changed_weight(api) -> None:
    weights = {
        "throughput": 0.5,
        "speedup": True,
        "node_seconds": False,
        "fairness": 0.2,
        "priority": 0.0,
        "churn": 0.1,
        "early_finish": 0.0,
        "completion_s": 7200.0,
    }
    limits = {
        "time_limit_s": 3.0,
        "relative_gap": 0.01,
        "reclaim_loss_s": 45.0,
        "forecast_classes": 6,
        "forecast_min_coverage": 0.5,
    }
    assert api.call("PUT", "/v1/objective", "admin", json=weights | limits).status_code == 200
    api.register("n1", report_idle=True)
    api.register("n2", report_idle=True)
    first, second = api.submit(min_nodes=1, max_nodes=1), api.submit(min_nodes=1, max_nodes=1)
    problem, _ = build_problem(api.app.state.service)
    assert problem.weights == Weights(**weights)
    # Term (i) reads each job's submission time, seconds since the epoch.
    by_id = {job.job_id: job for job in problem.jobs}
    for body in (first, second):
        submitted = datetime.fromisoformat(body["submitted_at"]).timestamp()
        assert by_id[body["job_id"]].submitted_s == pytest.approx(submitted, abs=1e-3)
        assert by_id[body["job_id"]].reclaim_loss_s == 45.0
    assert (problem.time_limit_s, problem.relative_gap) == (3.0, 0.01)
    assert (problem.forecast_classes, problem.forecast_min_coverage) == (6, 0.5)


def test_scalability_upload_replaces_the_table(api) -> None:
    assert api.call("GET", "/v1/scalability", "user").json()["models"] == ["bignet", "tinycnn"]
    csv = "model,nodes,samples_per_s\nresnet18,1,10\nresnet18,2,19\n"
    r = api.call(
        "PUT",
        "/v1/scalability",
        "admin",
        content=csv,
        headers=api.auth("admin") | {"content-type": "text/csv"},
    )
    assert r.status_code == 200
    assert r.json() == {
        "models": ["resnet18"],
        "rows": 2,
        "source": "PUT /v1/scalability by admin-1",
    }
    (entry,) = _audit(api, "scalability.update")
    assert entry["old"]["models"] == ["bignet", "tinycnn"]
    assert entry["new"] == {"models": ["resnet18"], "rows": 2, "source": r.json()["source"]}


def test_a_bad_table_names_the_line_and_an_active_model_may_not_vanish(api) -> None:
    bad = "model,nodes,samples_per_s\nresnet18,1,10\nresnet18,two,19\n"
    r = api.call("PUT", "/v1/scalability", "admin", content=bad)
    assert r.status_code == 422
    assert r.json()["detail"][0]["msg"].startswith("scalability table line 3:")
    r = api.call("PUT", "/v1/scalability", "admin", content="nodes\n1\n")
    assert r.json()["detail"][0]["msg"] == (
        "scalability table: missing column(s) model, samples_per_s"
    )
    api.submit(model="bignet", min_nodes=2, max_nodes=2)
    api.submit(model="my-own", min_nodes=1, max_nodes=1)  # never in the table: not in the way
    r = api.call(
        "PUT", "/v1/scalability", "admin", content=SCALABILITY_CSV.replace("bignet", "smallnet")
    )
    assert (r.status_code, r.json()) == (
        409,
        {"detail": "models bignet of active jobs are missing from the new table"},
    )


def _audit(api, action: str) -> list[dict]:  # type: ignore[no-untyped-def]
    """The audit entries of ``action`` (the fixture's token creations are audited too)."""
    return [
        e for e in api.call("GET", "/v1/audit", "admin").json()["data"] if e["action"] == action
    ]


def test_the_auto_horizon_reads_the_idle_ages_of_the_allocatable_nodes_only(api) -> None:
    """Mean residual life at the pool's median idle age (optimizer/horizon.py): 40 intervals
    of 1,000 s and 40 of 20,000 s; n1 and n2 (agents alive) idle for 100 s, n8 and n9 (no
    agent) for 10,000 s. Over the pool the median age is 100 s: 10,500 - 100 = 10,400 s;
    counting n8 and n9 it would be 5,050 s: 20,000 - 5,050 = 14,950 s."""
    for node in ("n1", "n2"):
        api.register(node, report_idle=True)
    api.node_events(("e8", "n8", "idle", 0), ("e9", "n9", "idle", 0))
    now = utcnow()
    service = api.app.state.service
    with service.db.write() as session:
        for node in session.scalars(select(Node)):
            node.since = now - timedelta(seconds=100 if node.name in ("n1", "n2") else 10_000)
        session.add_all(
            IdleInterval(node="n0", started_at=now, length_s=length)
            for length in [1_000.0] * 40 + [20_000.0] * 40
        )
    with service.db.read() as session:
        assert session.scalar(select(func.count()).select_from(Node)) == 4
        assert horizon_s(session, stored_objective(session), 2) == pytest.approx(10_400, abs=1)


def test_the_pools_median_idle_since_is_picked_by_the_database(api) -> None:
    """The one or two middle times of the allocatable nodes (odd or even pool) have the
    median of all of them; a node without an agent is not in the pool."""
    api.node_events(("e0", "n0", "idle", 0))  # no agent: not allocatable, the oldest
    now = utcnow()
    service = api.app.state.service
    for size in range(1, 6):
        api.register(f"n{size}", report_idle=True)
        with service.db.write() as session:
            for node in session.scalars(select(Node)):
                node.since = now - timedelta(seconds=10 * int(node.name[1:]) ** 2 + 1)
        with service.db.read() as session:
            pool = [n for n in session.scalars(select(Node)) if n.name != "n0"]
            middle = state.median_idle_since(session, size)
        assert len(middle) == 2 - size % 2
        ages = [(now - since).total_seconds() for since in middle]
        expected = statistics.median((now - n.since).total_seconds() for n in pool)
        assert statistics.median(ages) == pytest.approx(expected)
