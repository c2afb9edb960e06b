"""Job submission, visibility per user, and the exact errors a user sees."""

from __future__ import annotations

import pytest
from interstice.api.control import leases
from interstice.api.store.tables import Agent


def _detail(response):  # type: ignore[no-untyped-def]
    """(loc, msg) of every validation error."""
    return [(tuple(e["loc"]), e["msg"]) for e in response.json()["detail"]]


def test_a_submitted_job_is_queued_with_defaults(api) -> None:
    job = api.submit(model="tinycnn", min_nodes=1, max_nodes=4, total_samples=5000)
    assert job["job_id"] == "j-1"
    job_dir = api.settings.checkpoint_root.resolve() / "j-1"
    expected = {
        "state": "queued",
        "model": "tinycnn",
        "min_nodes": 1,
        "max_nodes": 4,
        "total_samples": 5000,
        "samples_done": 0,
        "last_loss": None,
        "priority": 1.0,
        "parallelism": "dp",
        "global_batch_size": 256,
        "rescale_up_s": 18.0,
        "rescale_down_s": 12.0,
        "entrypoint": "interstice.agents.worker",
        "command": None,
        "workdir": None,
        "env": {},
        "nproc_per_node": "auto",
        "job_dir": str(job_dir),
        "checkpoint_dir": str(job_dir / "checkpoints"),
        "nodes": [],
        "world_size": 0,
        "spb_depth": 0,
        "generation": 0,
        "finished_at": None,
        "error": None,
        "rescales": [],
        "errors": [],
        "owner": None,  # single-user mode
        "user": "user-1",  # the submitting token's name
    }
    assert {k: job[k] for k in expected} == expected
    assert set(job) == set(expected) | {"job_id", "submitted_at"}


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"min_nodes": 0}, [(("body", "min_nodes"), "Input should be greater than or equal to 1")]),
        ({"min_nodes": 3, "max_nodes": 2}, [(("body",), "Value error, min_nodes 3 > max_nodes 2")]),
        (
            {"total_samples": -1},
            [(("body", "total_samples"), "Input should be greater than or equal to 1")],
        ),
        (
            {"parallelism": "pp"},
            [(("body", "parallelism"), "Input should be 'dp', 'spb' or 'splitbrain'")],
        ),
        ({"colour": "red"}, [(("body", "colour"), "Extra inputs are not permitted")]),
        (
            {"entrypoint": "m", "command": ["python", "x.py"]},
            [(("body",), "Value error, give entrypoint or command, not both")],
        ),
    ],
)
def test_bad_bodies_name_the_field(api, body, errors) -> None:  # type: ignore[no-untyped-def]
    full = {"model": "tinycnn", "min_nodes": 1, "max_nodes": 2, "total_samples": 10} | body
    r = api.call("POST", "/v1/jobs", "user", json=full)
    assert r.status_code == 422
    assert _detail(r) == errors


def test_min_nodes_above_a_table_model_s_largest_count_is_a_conflict(api) -> None:
    r = api.call(
        "POST",
        "/v1/jobs",
        "user",
        json={"model": "tinycnn", "min_nodes": 5, "max_nodes": 9, "total_samples": 10},
    )
    assert r.status_code == 409
    assert r.json() == {
        "detail": "min_nodes 5 is above the largest measured node count 4 of model 'tinycnn'"
    }


def test_users_see_and_cancel_only_their_own_jobs(api) -> None:
    mine = api.submit("user")
    theirs = api.submit("other")
    assert [j["job_id"] for j in api.call("GET", "/v1/jobs", "user").json()["data"]] == [
        mine["job_id"]
    ]
    everyone = api.call("GET", "/v1/jobs", "admin").json()
    assert (everyone["count"], [j["job_id"] for j in everyone["data"]]) == (
        2,
        [theirs["job_id"], mine["job_id"]],
    )
    hidden = api.call("GET", f"/v1/jobs/{theirs['job_id']}", "user")
    assert (hidden.status_code, hidden.json()) == (
        404,
        {"detail": f"job {theirs['job_id']} not found"},
    )
    refused = api.call("DELETE", f"/v1/jobs/{theirs['job_id']}", "user")
    assert refused.status_code == 404
    assert (
        api.call("DELETE", f"/v1/jobs/{theirs['job_id']}", "admin").json()["state"] == "cancelled"
    )
    queued = api.call("GET", "/v1/jobs", "admin", params={"state": "queued"}).json()
    assert [j["job_id"] for j in queued["data"]] == [mine["job_id"]]


def test_unknown_ids_are_404(api) -> None:
    for job_id in ("j-77", "x", "j-", "j-1-2"):
        r = api.call("GET", f"/v1/jobs/{job_id}", "admin")
        assert (r.status_code, r.json()) == (404, {"detail": f"job {job_id} not found"})
    r = api.call("POST", "/v1/agents/a-5/heartbeat", "agent", json={})
    assert (r.status_code, r.json()) == (404, {"detail": "agent a-5 not found; register again"})
    agent = api.register("n1")
    r = api.call("POST", f"/v1/agents/{agent}/commands/12/ack", "agent", json={"ok": True})
    assert (r.status_code, r.json()) == (404, {"detail": f"command 12 of agent {agent} not found"})


def test_registration_is_idempotent_per_node(api) -> None:
    first = api.call("POST", "/v1/agents", "agent", json={"node": "n1", "host": "h", "ports": [1]})
    again = api.call("POST", "/v1/agents", "agent", json={"node": "n1", "host": "h2", "ports": [2]})
    assert (first.status_code, again.status_code) == (201, 200)
    assert (
        first.json()
        == again.json()
        == {
            "agent_id": "a-1",
            "node": "n1",
            "state": "alive",
            "heartbeat_interval_s": 10.0,
            "protocol_version": 4,
        }
    )
    listed = api.call("GET", "/v1/agents", "admin").json()["data"]
    assert [(a["host"], a["ports"]) for a in listed] == [("h2", [2])]


def test_report_idle_makes_the_node_allocatable(api) -> None:
    agent = api.register("n1", report_idle=True)
    job = api.submit(min_nodes=1, max_nodes=1)
    assert [c["kind"] for c in api.poll(agent)] == ["start"]
    assert api.job(job["job_id"])["nodes"] == ["n1"]


def test_heartbeats_are_kept_in_memory_and_flushed_by_the_sweep(api) -> None:
    agent = api.register("n1")
    beat = {
        "job_id": None,
        "world_size": 0,
        "step": None,
        "samples_per_s": None,
        "samples_done": None,
    }
    r = api.call("POST", f"/v1/agents/{agent}/heartbeat", "agent", json=beat | {"world_size": 3})
    assert r.json() == {"agent_id": agent, "state": "alive"}
    service = api.app.state.service
    with service.db.read() as session:
        assert session.get(Agent, 1).report is None  # not written yet
    leases.sweep(service)
    with service.db.read() as session:
        stored = session.get(Agent, 1)
        assert stored.report == beat | {"world_size": 3}  # what the agent sent
        assert stored.state == "alive"
