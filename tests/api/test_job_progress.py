"""What heartbeats (protocol v2) and acks tell the service of a job: progress, the metrics
series, its end (finished or failed with the reason), and the logs on the shared filesystem."""

from __future__ import annotations

import pytest
from api_helpers import beat, start_job
from interstice.api.services import state


def test_heartbeats_show_progress_and_build_the_series(api) -> None:
    agents, job, _ = start_job(api, ["n1", "n2"])
    j = job["job_id"]
    common = {"job_id": j, "rendezvous_id": f"{j}-g1", "world_size": 2, "samples_per_s": 50.0}
    beat(api, agents["n1"], **common, step=1, samples_done=100, loss=2.0, metrics={"acc": 0.5})
    beat(api, agents["n2"], **common, step=1, samples_done=100, loss=2.0, metrics={"acc": 0.5})
    beat(api, agents["n2"], **common, step=2, samples_done=200, loss=1.5)
    beat(api, agents["n1"], **common, step=1, samples_done=100, loss=9.9)  # late: kept max
    shown = api.job(j)
    assert (shown["samples_done"], shown["last_loss"], shown["world_size"]) == (200, 1.5, 2)
    series = api.call("GET", f"/v1/jobs/{j}/metrics", "user").json()
    assert series["count"] == 2
    assert [
        {k: m[k] for k in ("step", "samples", "loss", "samples_per_s", "world_size", "metrics")}
        for m in series["data"]
    ] == [
        {
            "step": 1,
            "samples": 100.0,
            "loss": 2.0,
            "samples_per_s": 50.0,
            "world_size": 2,
            "metrics": {"acc": 0.5},
        },
        {
            "step": 2,
            "samples": 200.0,
            "loss": 1.5,
            "samples_per_s": 50.0,
            "world_size": 2,
            "metrics": {},
        },
    ]
    newest = api.call("GET", f"/v1/jobs/{j}/metrics", "user", params={"limit": 1}).json()
    assert [m["step"] for m in newest["data"]] == [2]


def test_samples_done_never_shows_above_total_samples(api) -> None:
    agents, job, _ = start_job(api, ["n1"], total_samples=1000)
    beat(api, agents["n1"], job_id=job["job_id"], step=9, samples_done=1536)
    shown = api.job(job["job_id"])
    assert (shown["state"], shown["samples_done"], shown["nodes"]) == ("finished", 1000, [])


def test_the_series_keeps_the_newest_reports(api, monkeypatch) -> None:
    monkeypatch.setattr(state, "METRICS_KEPT", 3)
    agents, job, _ = start_job(api, ["n1"])
    for step in range(1, 6):
        beat(api, agents["n1"], job_id=job["job_id"], step=step, samples_done=step)
    series = api.call("GET", f"/v1/jobs/{job['job_id']}/metrics", "admin").json()
    assert [m["step"] for m in series["data"]] == [3, 4, 5]


def test_job_state_finished_ends_the_job_and_stops_every_node(api) -> None:
    agents, job, _ = start_job(api, ["n1", "n2"])
    j = job["job_id"]
    beat(api, agents["n1"], job_id=j, rendezvous_id=f"{j}-g1", job_state="finished")
    shown = api.job(j)
    assert (shown["state"], shown["nodes"], shown["error"]) == ("finished", [], None)
    for agent in agents.values():
        assert [c["kind"] for c in api.poll(agent, wait=0)] == ["stop"]


def test_job_state_failed_fails_the_job_with_its_error_and_frees_the_nodes(api) -> None:
    agents, job, _ = start_job(api, ["n1", "n2"])
    j = job["job_id"]
    api.node_events(("b2", "n2", "busy", 30))  # generation 2 on n1 alone
    api.ack_all(agents["n1"], api.poll(agents["n1"], wait=0))
    error = "rank 1 exited 1:\nTraceback (most recent call last):\nZeroDivisionError"
    # a failure of the older generation (its workers were stopped for the rescale) ends nothing
    beat(api, agents["n2"], job_id=j, rendezvous_id=f"{j}-g1", job_state="failed", error="x")
    assert api.job(j)["state"] == "running"
    beat(api, agents["n1"], job_id=j, rendezvous_id=f"{j}-g2", job_state="failed", error=error)
    shown = api.job(j)
    assert (shown["state"], shown["nodes"]) == ("failed", [])
    assert shown["error"] == f"on n1: {error}"
    assert shown["rescales"][-1]["reason"] == "failed"
    nodes = {n["name"]: n for n in api.nodes("admin")}
    assert nodes["n1"]["holder"] is None and nodes["n1"]["allocatable"] is True
    assert [c["kind"] for c in api.poll(agents["n1"], wait=0)] == ["stop"]


def test_an_ack_with_job_failed_fails_the_job_at_once(api) -> None:
    agents = {n: api.register(n) for n in ("n1", "n2")}
    api.node_events(("e1", "n1", "idle", 0), ("e2", "n2", "idle", 0))
    job = api.submit(min_nodes=1, max_nodes=2, model=None, command=["missing.py"])
    (start,) = api.poll(agents["n1"])
    r = api.call(
        "POST",
        f"/v1/agents/{agents['n1']}/commands/{start['command_id']}/ack",
        "agent",
        json={"ok": False, "error": "missing.py: no such file", "job_failed": True},
    )
    assert r.status_code == 200 and r.json()["ok"] is False
    shown = api.job(job["job_id"])  # max_command_failures is 3: one such ack is enough
    assert (shown["state"], shown["nodes"]) == ("failed", [])
    assert shown["error"] == "start on n1 failed: missing.py: no such file"
    assert [e["error"] for e in shown["errors"]] == ["missing.py: no such file"]


def test_a_node_side_failure_restarts_the_generation(api) -> None:
    # Generation 3 cannot form (its rendezvous failed on n1): the job is released from its
    # nodes at once (generation 4, no node) and the next solve starts generation 5; the
    # failure is counted (max_command_failures is 3), not fatal.
    agents, job, _ = start_job(api, ["n1"])
    j = job["job_id"]
    api.node_events(("b1", "n1", "busy", 0), ("i1", "n1", "idle", 0))
    api.wait_for(lambda: api.job(j)["generation"] == 3)
    (start,) = [c for c in api.poll(agents["n1"], wait=0) if c["kind"] == "start"]
    assert start["rendezvous_id"] == f"{j}-g3"
    r = api.call(
        "POST",
        f"/v1/agents/{agents['n1']}/commands/{start['command_id']}/ack",
        "agent",
        json={"ok": False, "error": f"rendezvous {j}-g3 not complete in 90 s"},
    )
    assert r.status_code == 200
    api.wait_for(lambda: api.job(j)["generation"] == 5)
    shown = api.job(j)
    assert (shown["state"], shown["error"], shown["nodes"]) == ("running", None, ["n1"])
    reasons = [(e["generation"], e["reason"], e["to_nodes"]) for e in shown["rescales"][-2:]]
    assert reasons == [(4, "command_failed", []), (5, "allocation", ["n1"])]
    kinds = [(c["kind"], c["rendezvous_id"]) for c in api.poll(agents["n1"], wait=0)]
    assert kinds == [("stop", f"{j}-g2"), ("stop", f"{j}-g4"), ("start", f"{j}-g5")]  # g2: b1


def test_a_failure_of_an_older_generation_changes_nothing(api) -> None:
    # The rescale to generation 2 supersedes n1's start of generation 1; the agent's late
    # failed ack of that start is the service's record (ok: superseded) and moves nothing.
    agents = {n: api.register(n) for n in ("n1", "n2")}
    api.node_events(("e1", "n1", "idle", 0))
    job = api.submit(min_nodes=1, max_nodes=2)
    j = job["job_id"]
    api.wait_for(lambda: api.job(j)["nodes"] == ["n1"])
    (first,) = api.poll(agents["n1"], wait=0)
    api.node_events(("e2", "n2", "idle", 0))
    api.wait_for(lambda: api.job(j)["generation"] == 2)
    r = api.call(
        "POST",
        f"/v1/agents/{agents['n1']}/commands/{first['command_id']}/ack",
        "agent",
        json={"ok": False, "error": f"rendezvous {j}-g1 not complete in 90 s"},
    )
    assert r.status_code == 200 and r.json()["ok"] is True
    shown = api.job(j)
    assert (shown["state"], shown["generation"], shown["nodes"]) == ("running", 2, ["n1", "n2"])


def _write_logs(job_dir: str, texts: dict[str, str], rank: int = 0) -> None:
    from pathlib import Path

    for rendezvous_id, text in texts.items():
        folder = Path(job_dir) / "logs" / rendezvous_id
        folder.mkdir(parents=True)
        (folder / f"rank-{rank}.log").write_text(text)


def test_logs_read_a_rank_over_its_generations(api) -> None:
    job = api.submit()
    j = job["job_id"]
    r = api.call("GET", f"/v1/jobs/{j}/logs", "user")
    assert (r.status_code, r.json()) == (404, {"detail": f"job {j} has no log of rank 0 yet"})
    # g10 after g2: generations in numeric order
    _write_logs(job["job_dir"], {f"{j}-g10": "c1\nc2\n", f"{j}-g2": "a1\na2\n", f"{j}-g3": "b1\n"})
    whole = "a1\na2\nb1\nc1\nc2\n"
    r = api.call("GET", f"/v1/jobs/{j}/logs", "user", params={"tail": 2})
    assert r.json() == {
        "job_id": j,
        "rank": 0,
        "text": "c1\nc2\n",
        "offset": len(whole) - 6,
        "next_offset": len(whole),
    }
    r = api.call("GET", f"/v1/jobs/{j}/logs", "user", params={"offset": 3})
    assert (r.json()["text"], r.json()["next_offset"]) == (whole[3:], len(whole))
    r = api.call("GET", f"/v1/jobs/{j}/logs", "user", params={"offset": 99})
    assert (r.json()["text"], r.json()["offset"]) == ("", len(whole))
    r = api.call("GET", f"/v1/jobs/{j}/logs", "user", params={"rank": 1})
    assert r.json() == {"detail": f"job {j} has no log of rank 1 yet"}


@pytest.mark.parametrize("path", ["metrics", "logs"])
def test_metrics_and_logs_are_the_owner_s_and_admins(api, path) -> None:  # type: ignore[no-untyped-def]
    job = api.submit()
    _write_logs(job["job_dir"], {f"{job['job_id']}-g1": "hello\n"})
    url = f"/v1/jobs/{job['job_id']}/{path}"
    assert api.call("GET", url, "user").status_code == 200
    assert api.call("GET", url, "admin").status_code == 200
    hidden = api.call("GET", url, "other")
    assert hidden.status_code == 404
    assert hidden.json() == {"detail": f"job {job['job_id']} not found"}
    assert api.call("GET", url, "agent").status_code == 403
