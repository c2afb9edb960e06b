"""Agent protocol version 3: the heartbeat carried by the long-poll
(``POST /v1/agents/{id}/poll``), and version 2 agents (heartbeat and poll apart) served as
before."""

from __future__ import annotations

import anyio
from api_helpers import Api, silence, start_job
from interstice.api.control import leases
from interstice.api.services.agents import commands as read_commands
from interstice.api.store.tables import Agent


def _poll(api: Api, agent: str, body: dict, wait: float = 0) -> list[dict]:
    r = api.call("POST", f"/v1/agents/{agent}/poll", "agent", json=body, params={"wait": wait})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def _count_worker_thread_hops(monkeypatch) -> list[object]:
    """From now on, the function of every ``anyio.to_thread.run_sync`` call, in order."""
    hops: list[object] = []
    run_sync = anyio.to_thread.run_sync

    async def counted(func, *args, **kwargs):
        hops.append(func)
        return await run_sync(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    return hops


def _states(api: Api) -> dict[str, str]:
    return {a["node"]: a["state"] for a in api.call("GET", "/v1/agents", "admin").json()["data"]}


def test_registration_says_the_protocol_version(api: Api) -> None:
    body = {"node": "n1", "host": "h1"}
    assert api.call("POST", "/v1/agents", "agent", json=body).json()["protocol_version"] == 4


def test_a_poll_with_a_heartbeat_renews_the_lease_and_keeps_the_report(api: Api) -> None:
    polling, silent = api.register("n1"), api.register("n2")
    service = api.app.state.service
    silence(service, polling, silent)
    report = {"job_id": None, "world_size": 3}
    assert _poll(api, polling, report) == []
    leases.sweep(service)
    assert _states(api) == {"n1": "alive", "n2": "lost"}
    with service.db.read() as session:
        assert session.get(Agent, 1).report == report
    assert _poll(api, silent, {}) == []  # a lost agent's heartbeat revives it
    leases.sweep(service)
    assert _states(api) == {"n1": "alive", "n2": "alive"}


def test_a_poll_with_a_heartbeat_records_progress_and_answers_the_jobs_end(api: Api) -> None:
    agents, job, _ = start_job(api, ["n1"])
    generation = f"{job['job_id']}-g1"
    beat = {"job_id": job["job_id"], "rendezvous_id": generation, "step": 5}
    assert _poll(api, agents["n1"], beat | {"samples_done": 1000.0}) == []
    assert api.job(job["job_id"])["samples_done"] == 1000
    ended = _poll(api, agents["n1"], beat | {"step": 6, "job_state": "finished"}, wait=5)
    assert [c["kind"] for c in ended] == ["stop"]
    assert api.job(job["job_id"])["state"] == "finished"


def test_a_poll_of_an_unknown_agent_is_a_404(api: Api) -> None:
    r = api.call("POST", "/v1/agents/a-99/poll", "agent", json={}, params={"wait": 0})
    assert r.status_code == 404


def test_a_version_2_agent_heartbeats_and_polls_apart(api: Api) -> None:
    agents, job, _ = start_job(api, ["n1"])
    service = api.app.state.service
    silence(service, agents["n1"])
    beat = {"job_id": job["job_id"], "samples_done": 500.0}
    r = api.call("POST", f"/v1/agents/{agents['n1']}/heartbeat", "agent", json=beat)
    assert r.json() == {"agent_id": agents["n1"], "state": "alive"}
    leases.sweep(service)
    assert _states(api) == {"n1": "alive"}
    assert api.job(job["job_id"])["samples_done"] == 500
    assert api.poll(agents["n1"], wait=0) == []


def test_a_quiet_agents_requests_use_no_worker_thread(api: Api, monkeypatch) -> None:
    """An alive agent with no pending command is answered on the event loop: its beat,
    poll and heartbeat touch no worker thread (dependencies included: FastAPI runs a plain
    ``def`` dependency in its thread pool, which the database reads share, so 5,000 agents'
    requests queued behind them). On PostgreSQL each poll reads its commands (a wake-up
    from another replica may be lost), and nothing else."""
    agent = api.register("n1")
    assert _poll(api, agent, {}) == []  # this first read finds none: the agent is clear
    hops = _count_worker_thread_hops(monkeypatch)
    assert _poll(api, agent, {"world_size": 1}) == []
    assert api.poll(agent, wait=0) == []
    r = api.call("POST", f"/v1/agents/{agent}/heartbeat", "agent", json={})
    assert r.status_code == 200
    reads = [] if api.app.state.service.notifier.wakes_complete else [read_commands] * 2
    assert hops == reads
    assert api.call("GET", "/v1/agents", "admin").status_code == 200  # a sync route does hop
    assert hops


def test_an_agent_that_acked_its_commands_polls_without_a_read(api: Api, monkeypatch) -> None:
    """Once every command an agent was given is acknowledged and none was written since,
    its next poll answers from memory (SQLite: every command written wakes its agent here);
    the next command written is read and answered."""
    agents, job, _ = start_job(api, ["n1"])  # the start is polled, then acknowledged
    agent = agents["n1"]
    hops = _count_worker_thread_hops(monkeypatch)
    assert _poll(api, agent, {"job_id": job["job_id"]}) == []
    one_process = api.app.state.service.notifier.wakes_complete
    assert hops == ([] if one_process else [read_commands])
    r = api.call("DELETE", f"/v1/jobs/{job['job_id']}", "user")
    assert r.status_code == 200, r.text
    assert [c["kind"] for c in _poll(api, agent, {}, wait=5)] == ["stop"]
    assert read_commands in hops
