"""Under load the service sends each node only its job's newest generation: superseded
commands leave the long-poll, one sweep's lost agents (and one batch's reclaims) rescale a
job once, and a long-poll renews the agent's lease."""

from __future__ import annotations

from api_helpers import silence
from interstice.api.control import leases
from interstice.api.store.tables import Agent, Command


def _start_job_on(api, nodes: list[str]):  # type: ignore[no-untyped-def]
    """Register ``nodes`` idle and run one job on all of them; returns agents, job, starts."""
    agents = {n: api.register(n) for n in nodes}
    api.node_events(*((f"e-{n}", n, "idle", 0) for n in nodes))
    job = api.submit(min_nodes=1, max_nodes=len(nodes))
    api.wait_for(lambda: api.job(job["job_id"])["nodes"] == nodes)
    starts = {n: api.poll(a, wait=0) for n, a in agents.items()}
    return agents, job, starts


def _kinds(commands: list[dict]) -> list[tuple[str, str]]:
    return [(c["kind"], c["rendezvous_id"]) for c in commands]


def test_superseded_commands_are_not_delivered_and_a_stop_never_is(api) -> None:
    agents, job, starts = _start_job_on(api, ["n1", "n2"])
    j = job["job_id"]
    assert _kinds(starts["n1"]) == _kinds(starts["n2"]) == [("start", f"{j}-g1")]
    api.node_events(("b2", "n2", "busy", 30))  # nobody acked the starts
    (rescale,) = api.poll(agents["n1"], wait=0)
    assert _kinds([rescale]) == [("rescale", f"{j}-g2")]
    (stop,) = api.poll(agents["n2"], wait=0)
    assert _kinds([stop]) == [("stop", f"{j}-g2")]

    api.node_events(("i2", "n2", "idle", 0))  # the solver gives n2 back to the job
    api.wait_for(lambda: api.job(j)["nodes"] == ["n1", "n2"])
    assert _kinds(api.poll(agents["n1"], wait=0)) == [("rescale", f"{j}-g3")]
    # the unacknowledged stop stays, before the newer start
    assert _kinds(api.poll(agents["n2"], wait=0)) == [("stop", f"{j}-g2"), ("start", f"{j}-g3")]

    # the agent's own late ack of a superseded command returns the service's record
    first = starts["n1"][0]["command_id"]
    r = api.call(
        "POST",
        f"/v1/agents/{agents['n1']}/commands/{first}/ack",
        "agent",
        json={"ok": False, "error": "too late"},
    )
    assert r.status_code == 200 and r.json()["ok"] is True
    with api.app.state.service.db.read() as session:
        assert session.get(Command, first).error == f"superseded by command {rescale['command_id']}"
    shown = api.job(j)
    assert (shown["state"], shown["errors"]) == ("running", [])


def test_agents_lost_in_one_sweep_rescale_their_job_once(api) -> None:
    nodes = ["n1", "n2", "n3", "n4"]
    agents, job, starts = _start_job_on(api, nodes)
    for node, agent in agents.items():
        api.ack_all(agent, starts[node])
    service = api.app.state.service
    silence(service, *(agents[n] for n in ("n2", "n3", "n4")))
    leases.sweep(service)

    rescales = api.job(job["job_id"])["rescales"]
    assert [(r["reason"], r["from_nodes"], r["to_nodes"]) for r in rescales[1:]] == [
        ("agent_lost", nodes, ["n1"])
    ]
    j = job["job_id"]
    assert [(c["kind"], c["world_size"]) for c in api.poll(agents["n1"], wait=0)] == [
        ("rescale", 1)
    ]
    for node in ("n2", "n3", "n4"):
        assert _kinds(api.poll(agents[node], wait=0)) == [("stop", f"{j}-g2")], node
    states = {a["node"]: a["state"] for a in api.call("GET", "/v1/agents", "admin").json()["data"]}
    assert states == {"n1": "alive", "n2": "lost", "n3": "lost", "n4": "lost"}


def test_reclaims_in_one_batch_rescale_their_job_once(api) -> None:
    nodes = ["n1", "n2", "n3", "n4"]
    agents, job, starts = _start_job_on(api, nodes)
    for node, agent in agents.items():
        api.ack_all(agent, starts[node])
    r = api.node_events(("b3", "n3", "busy", 30), ("b4", "n4", "busy", 30))
    assert [e["reclaimed_job_id"] for e in r.json()["data"]] == [job["job_id"]] * 2
    j = job["job_id"]
    for node in ("n1", "n2"):
        assert _kinds(api.poll(agents[node], wait=0)) == [("rescale", f"{j}-g2")], node
    for node in ("n3", "n4"):
        assert _kinds(api.poll(agents[node], wait=0)) == [("stop", f"{j}-g2")], node
    rescales = api.job(j)["rescales"]
    assert [(r["reason"], r["to_nodes"]) for r in rescales[1:]] == [("reclaim", ["n1", "n2"])]


def test_a_long_poll_renews_the_lease(api) -> None:
    polling, silent = api.register("n1"), api.register("n2")
    beat = {"job_id": None, "world_size": 3, "step": None}
    api.call("POST", f"/v1/agents/{polling}/heartbeat", "agent", json=beat)
    service = api.app.state.service
    silence(service, polling, silent)
    assert api.poll(polling, wait=0) == []  # renews n1's lease; n2 stays silent
    leases.sweep(service)
    states = {a["node"]: a["state"] for a in api.call("GET", "/v1/agents", "admin").json()["data"]}
    assert states == {"n1": "alive", "n2": "lost"}
    api.poll(silent, wait=0)  # a lost agent's poll does not revive it
    leases.sweep(service)
    with service.db.read() as session:
        lost, alive = session.get(Agent, 2), session.get(Agent, 1)
        assert lost.state == "lost"
        # the sweep wrote the polls' lease renewals, keeping the heartbeat's report
        assert alive.last_heartbeat_at > lost.last_heartbeat_at
        assert alive.report == beat


def test_a_heartbeat_revives_a_lost_agent_and_its_node(api) -> None:
    agent = api.register("n1", report_idle=True)
    service = api.app.state.service

    def n1() -> dict:
        return api.nodes("admin")[0]

    silence(service, agent)
    leases.sweep(service)
    assert (n1()["agent"]["state"], n1()["allocatable"]) == ("lost", False)
    r = api.call("POST", f"/v1/agents/{agent}/heartbeat", "agent", json={})
    assert r.json() == {"agent_id": agent, "state": "alive"}
    leases.sweep(service)  # writes the revival kept in memory
    assert (n1()["agent"]["state"], n1()["allocatable"]) == ("alive", True)
    job = api.submit(min_nodes=1, max_nodes=1)
    api.wait_for(lambda: api.job(job["job_id"])["nodes"] == ["n1"], timeout_s=10)
