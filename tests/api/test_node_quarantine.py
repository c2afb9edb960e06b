"""A node whose launch fails for a reason of its own is quarantined: it shows so in
``/v1/nodes`` and ``interstice_nodes_quarantined``, no job is placed on it, and the job goes
to another node within ``max_command_failures``. A fault of the job leaves the node alone. The
quarantine ends when the node's agent registers without a fault, or when an admin releases
it (``POST /v1/nodes/{name}/release``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from api_helpers import Api, gauge

NO_TORCH = "launch failed (exit 1); last lines of its log:\nModuleNotFoundError: No module named"


def idle_agents(api: Api, *nodes: str, fault: str | None = None) -> dict[str, str]:
    """Register an agent on each of ``nodes`` (with ``fault``, if any) and make it idle."""
    agents = {}
    for node in nodes:
        body: dict[str, Any] = {"node": node, "host": f"h-{node}", "ports": [29500]}
        if fault is not None:
            body["fault"] = fault
        r = api.call("POST", "/v1/agents", "agent", json=body)
        assert r.status_code in (200, 201), r.text
        agents[node] = r.json()["agent_id"]
    api.node_events(*((f"e-{n}", n, "idle", 0) for n in nodes))
    return agents


def ack(api: Api, agent: str, command: dict[str, Any], **body: Any) -> None:
    path = f"/v1/agents/{agent}/commands/{command['command_id']}/ack"
    r = api.call("POST", path, "agent", json=body)
    assert r.status_code == 200, r.text


def start_on(api: Api, agents: dict[str, str], job_id: str) -> tuple[str, dict[str, Any]]:
    """The node whose agent got the job's start, and that start."""
    api.wait_for(lambda: api.job(job_id)["nodes"])
    (node,) = api.job(job_id)["nodes"]
    (start,) = [c for c in api.poll(agents[node], wait=0) if c["kind"] == "start"]
    return node, start


def nodes(api: Api) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in api.nodes("admin")}


def test_a_node_fault_quarantines_the_node_and_the_job_starts_on_another(api: Api) -> None:
    agents = idle_agents(api, "n1", "n2")
    job = api.submit(min_nodes=1, max_nodes=1)["job_id"]
    broken, start = start_on(api, agents, job)
    healthy = ({"n1", "n2"} - {broken}).pop()
    ack(api, agents[broken], start, ok=False, error=NO_TORCH, node_fault=True)

    api.wait_for(lambda: api.job(job)["nodes"] == [healthy])
    shown = api.job(job)
    assert (shown["state"], shown["error"]) == ("running", None)
    listed = nodes(api)
    assert listed[broken]["quarantined_at"] is not None
    assert listed[broken]["quarantine_reason"] == f"start of {job} failed: {NO_TORCH}"
    assert listed[broken]["allocatable"] is False
    assert listed[healthy]["quarantined_at"] is None and listed[healthy]["allocatable"] is True
    metrics = api.client.get("/metrics").text
    assert gauge(metrics, "interstice_nodes_quarantined") == 1
    assert gauge(metrics, "interstice_allocatable_nodes") == 1  # the healthy one

    # The job ends: its node is free again, the quarantined one is still left out.
    second = api.submit(min_nodes=1, max_nodes=2)["job_id"]
    api.call("DELETE", f"/v1/jobs/{job}", "user")
    api.wait_for(lambda: api.job(second)["nodes"] == [healthy])


def test_a_fault_of_the_job_or_of_a_rendezvous_leaves_the_node_alone(api: Api) -> None:
    agents = idle_agents(api, "n1")
    failed = api.submit(min_nodes=1, max_nodes=1, model=None, command=["missing.py"])["job_id"]
    _, start = start_on(api, agents, failed)
    ack(api, agents["n1"], start, ok=False, error="no script 'missing.py'", job_failed=True)
    assert api.job(failed)["state"] == "failed"

    retried = api.submit(min_nodes=1, max_nodes=1)["job_id"]
    _, start = start_on(api, agents, retried)
    ack(api, agents["n1"], start, ok=False, error=f"rendezvous {retried}-g1 not complete")
    api.wait_for(lambda: api.job(retried)["generation"] == 3)  # released, started again
    assert api.job(retried)["nodes"] == ["n1"]
    assert nodes(api)["n1"]["quarantined_at"] is None


def test_node_faults_fail_the_job_at_the_retry_budget(make_api: Callable[..., Any]) -> None:
    with make_api(max_command_failures=2) as api:
        agents = idle_agents(api, "n1", "n2", "n3")
        job = api.submit(min_nodes=1, max_nodes=1)["job_id"]
        for _ in range(2):
            node, start = start_on(api, agents, job)
            ack(api, agents[node], start, ok=False, error="disk full", node_fault=True)
            api.wait_for(lambda n=node: n not in api.job(job)["nodes"])
        shown = api.job(job)
        assert shown["state"] == "failed" and shown["error"].startswith("2 failures; the last")
        assert sum(n["quarantined_at"] is not None for n in nodes(api).values()) == 2


def test_an_agent_registered_with_a_fault_gets_no_job_until_it_registers_without(
    api: Api,
) -> None:
    agents = idle_agents(api, "n1", fault="its launcher exited warming up (exit 1)")
    job = api.submit(min_nodes=1, max_nodes=1)["job_id"]
    listed = nodes(api)["n1"]
    assert listed["quarantine_reason"] == "its launcher exited warming up (exit 1)"
    assert listed["allocatable"] is False
    assert api.poll(agents["n1"], wait=0.2) == [] and api.job(job)["nodes"] == []

    idle_agents(api, "n1")  # its health check passed: registered again, no fault
    api.wait_for(lambda: api.job(job)["nodes"] == ["n1"])
    assert nodes(api)["n1"]["quarantined_at"] is None


def test_an_admin_releases_a_quarantined_node(api: Api) -> None:
    idle_agents(api, "n1", fault="its launcher is not warm after 60 s")
    job = api.submit(min_nodes=1, max_nodes=1)["job_id"]
    assert api.call("POST", "/v1/nodes/n1/release", "scheduler").status_code == 403
    missing = api.call("POST", "/v1/nodes/n9/release", "admin")
    assert missing.status_code == 404 and "n9" in missing.json()["detail"]

    released = api.call("POST", "/v1/nodes/n1/release", "admin")
    assert released.status_code == 200, released.text
    answer = released.json()
    assert (answer["quarantined_at"], answer["quarantine_reason"]) == (None, None)
    assert answer["allocatable"] is True
    api.wait_for(lambda: api.job(job)["nodes"] == ["n1"])
    again = api.call("POST", "/v1/nodes/n1/release", "admin")  # idempotent
    assert again.status_code == 200 and again.json()["holder"] == job
    assert gauge(api.client.get("/metrics").text, "interstice_nodes_quarantined") == 0
