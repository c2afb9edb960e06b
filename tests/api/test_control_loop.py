"""The control loop end to end: events → solve → commands; reclaims; progress; cancel."""

from __future__ import annotations

import threading
import time

from interstice.api.control.loop import optimizer_solver
from interstice.api.services.state import parse_id


def _start_two_node_job(api):  # type: ignore[no-untyped-def]
    agents = {n: api.register(n) for n in ("n1", "n2")}
    assert api.node_events(("e1", "n1", "idle", 0), ("e2", "n2", "idle", 0)).status_code == 200
    job = api.submit(min_nodes=1, max_nodes=2)
    starts = {n: api.poll(a) for n, a in agents.items()}
    return agents, job, starts


def test_a_job_starts_on_every_idle_node_with_one_rendezvous(api) -> None:
    agents, job, starts = _start_two_node_job(api)
    for node, commands in starts.items():
        assert [c["kind"] for c in commands] == ["start"], node
        (c,) = commands
        assert c["job_id"] == job["job_id"]
        assert c["world_size"] == 2
        assert c["rendezvous_id"] == f"{job['job_id']}-g1"
        # endpoint: host of the agent on min(S) = n1, its ports [29500, 29501] by generation 1
        assert c["rendezvous_endpoint"] == "h-n1:29501"
        assert c["spb_depth"] == 0
        job_dir = str(api.settings.checkpoint_root.resolve() / job["job_id"])
        assert c["job"] == {
            "model": "tinycnn",
            "parallelism": "dp",
            "global_batch_size": 256,
            "total_samples": 1_000_000,
            "min_nodes": 1,
            "max_nodes": 2,
            "entrypoint": "interstice.agents.worker",
            "command": None,
            "workdir": None,
            "env": {},
            "nproc_per_node": "auto",
            "job_dir": job_dir,
            "checkpoint_dir": f"{job_dir}/checkpoints",
            "owner": None,  # single-user mode: the agent runs it under its own account
        }
    shown = api.job(job["job_id"])
    assert (shown["state"], shown["nodes"], shown["world_size"]) == ("running", ["n1", "n2"], 2)
    assert shown["rescales"][0]["from_nodes"] == []
    assert shown["rescales"][0]["to_nodes"] == ["n1", "n2"]
    nodes = api.nodes()
    assert [(n["name"], n["holder"], n["agent"]["state"]) for n in nodes] == [
        ("n1", job["job_id"], "alive"),
        ("n2", job["job_id"], "alive"),
    ]


def test_commands_are_delivered_until_acknowledged(api) -> None:
    agents, _, starts = _start_two_node_job(api)
    again = api.poll(agents["n1"], wait=0)
    assert [c["command_id"] for c in again] == [c["command_id"] for c in starts["n1"]]
    api.ack_all(agents["n1"], again)
    api.ack_all(agents["n1"], again)  # idempotent
    assert api.poll(agents["n1"], wait=0) == []


def test_a_long_poll_wakes_when_a_command_is_written(api) -> None:
    agent = api.register("n1")
    api.node_events(("e1", "n1", "idle", 0))
    got: list = []
    poller = threading.Thread(target=lambda: got.extend(api.poll(agent, wait=60)))
    poller.start()
    notifier = api.app.state.service.notifier
    api.wait_for(lambda: parse_id(agent, "a") in notifier._events)  # the poll is waiting
    api.submit(min_nodes=1, max_nodes=1)
    poller.join(timeout=30)  # well before its 60 s wait ends: woken by the command
    assert not poller.is_alive()
    assert [c["kind"] for c in got] == ["start"]


def test_a_reclaim_rescales_the_others_and_stops_the_node_with_its_grace(api) -> None:
    agents, job, starts = _start_two_node_job(api)
    for node, agent in agents.items():
        api.ack_all(agent, starts[node])
    r = api.node_events(("e3", "n2", "busy", 30))
    assert r.json()["data"][0]["reclaimed_job_id"] == job["job_id"]
    (stop,) = api.poll(agents["n2"], wait=0)
    (rescale,) = api.poll(agents["n1"], wait=0)
    assert (stop["kind"], rescale["kind"]) == ("stop", "rescale")
    assert rescale["world_size"] == 1
    assert rescale["rendezvous_id"] == f"{job['job_id']}-g2"
    assert rescale["rendezvous_endpoint"] == "h-n1:29500"
    event_at = r.json()["data"][0]
    assert stop["deadline"] == rescale["deadline"]
    shown = api.job(job["job_id"])
    assert shown["nodes"] == ["n1"]
    assert shown["rescales"][-1]["reason"] == "reclaim"
    assert event_at["state"] == "busy"


def test_a_reclaim_below_min_nodes_stops_the_whole_job(api) -> None:
    agents = {n: api.register(n) for n in ("n1", "n2")}
    api.node_events(("e1", "n1", "idle", 0), ("e2", "n2", "idle", 0))
    job = api.submit(min_nodes=2, max_nodes=2)
    for agent in agents.values():
        api.ack_all(agent, api.poll(agent))
    api.node_events(("e3", "n1", "busy", 5))
    assert [c["kind"] for c in api.poll(agents["n1"], wait=0)] == ["stop"]
    assert [c["kind"] for c in api.poll(agents["n2"], wait=0)] == ["stop"]
    shown = api.job(job["job_id"])
    assert (shown["state"], shown["nodes"]) == ("queued", [])


def test_a_reclaim_issues_commands_while_the_solver_is_slow(make_api) -> None:
    armed, solving, release = threading.Event(), threading.Event(), threading.Event()

    def slow_solver(problem, backend):  # type: ignore[no-untyped-def]
        if armed.is_set():  # the solve after the second job's submission: held until released
            solving.set()
            assert release.wait(30)
        return optimizer_solver(problem, backend)

    with make_api(solver=slow_solver) as api:
        try:
            agents, job, starts = _start_two_node_job(api)
            for node, agent in agents.items():
                api.ack_all(agent, starts[node])
            armed.set()
            api.submit(min_nodes=1, max_nodes=1)
            assert solving.wait(10)
            solves = api.app.state.control.solves
            api.node_events(("e3", "n2", "busy", 30))
            assert [c["kind"] for c in api.poll(agents["n2"], wait=5)] == ["stop"]
            assert [c["kind"] for c in api.poll(agents["n1"], wait=5)] == ["rescale"]
            assert api.app.state.control.solves == solves  # the solve is still held
        finally:
            release.set()


def test_event_retries_are_idempotent(api) -> None:
    agents, job, starts = _start_two_node_job(api)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # a retry repeats the event
    first = api.node_events(("e3", "n2", "busy", 30), at=at)
    pending = api.poll(agents["n1"], wait=0)
    again = api.node_events(("e3", "n2", "busy", 30), at=at)
    assert again.status_code == 200
    assert again.json() == first.json()
    assert api.poll(agents["n1"], wait=0) == pending
    assert len(api.job(job["job_id"])["rescales"]) == 2
    reused = api.node_events(("e3", "n1", "busy", 30))
    assert reused.status_code == 409
    assert reused.json() == {"detail": "event_id 'e3' was already used for a different event"}


def test_progress_finishes_the_job_and_frees_its_nodes(api) -> None:
    agents, job, starts = _start_two_node_job(api)
    for node, agent in agents.items():
        api.ack_all(agent, starts[node])
    beat = {"job_id": job["job_id"], "world_size": 2, "step": 3, "samples_per_s": 9.0}
    r = api.call(
        "POST",
        f"/v1/agents/{agents['n1']}/heartbeat",
        "agent",
        json=beat | {"samples_done": 600_000},
    )
    assert r.status_code == 200
    api.call(
        "POST",
        f"/v1/agents/{agents['n2']}/heartbeat",
        "agent",
        json=beat | {"samples_done": 500_000},
    )  # lower: the maximum is kept
    assert api.job(job["job_id"])["samples_done"] == 600_000
    api.call(
        "POST",
        f"/v1/agents/{agents['n2']}/heartbeat",
        "agent",
        json=beat | {"samples_done": 1_000_000},
    )
    shown = api.job(job["job_id"])
    assert (shown["state"], shown["nodes"]) == ("finished", [])
    assert shown["finished_at"] is not None
    assert [c["kind"] for c in api.poll(agents["n1"], wait=0)] == ["stop"]


def test_cancel_frees_nodes_for_the_next_job(api) -> None:
    agents, job, starts = _start_two_node_job(api)
    for node, agent in agents.items():
        api.ack_all(agent, starts[node])
    second = api.submit(min_nodes=2, max_nodes=2)
    r = api.call("DELETE", f"/v1/jobs/{job['job_id']}", "user")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    commands = api.poll(agents["n1"])
    assert commands[0]["kind"] == "stop" and commands[0]["job_id"] == job["job_id"]
    api.wait_for(lambda: api.job(second["job_id"])["state"] == "running")
    again = api.call("DELETE", f"/v1/jobs/{job['job_id']}", "user")
    assert again.status_code == 409
    assert again.json() == {
        "detail": f"job {job['job_id']} is cancelled; only a queued or running job can be cancelled"
    }


def test_a_lost_agent_leaves_the_pool_and_its_job_shrinks(make_api) -> None:
    with make_api(heartbeat_interval_s=0.5) as api:  # lost after 3 x 0.5 s of silence
        agents = {n: api.register(n) for n in ("n1", "n2")}
        api.node_events(("e1", "n1", "idle", 0), ("e2", "n2", "idle", 0))
        job = api.submit(min_nodes=1, max_nodes=2)
        done = threading.Event()

        def beat_n1_only() -> None:
            while not done.is_set():
                api.call("POST", f"/v1/agents/{agents['n1']}/heartbeat", "agent", json={})
                time.sleep(0.05)

        beating = threading.Thread(target=beat_n1_only)
        beating.start()
        try:
            api.wait_for(lambda: api.job(job["job_id"])["nodes"] == ["n1"], timeout_s=20)
        finally:
            done.set()
            beating.join()
        nodes = {n["name"]: n for n in api.nodes("admin")}
        assert nodes["n2"]["agent"]["state"] == "lost"
        assert nodes["n2"]["allocatable"] is False
        assert nodes["n1"]["agent"]["state"] == "alive"
        assert api.job(job["job_id"])["rescales"][-1]["reason"] == "agent_lost"
        metrics = api.call("GET", "/metrics", "admin").text
        assert "interstice_agents_lost_total 1.0" in metrics.splitlines()


def test_agent_leave_releases_its_node_at_once(api) -> None:
    agents, job, starts = _start_two_node_job(api)
    r = api.call("DELETE", f"/v1/agents/{agents['n2']}", "agent")
    assert r.status_code == 204
    assert api.call("DELETE", f"/v1/agents/{agents['n2']}", "agent").status_code == 204
    shown = api.job(job["job_id"])
    assert shown["nodes"] == ["n1"] and shown["rescales"][-1]["reason"] == "agent_left"


def test_failed_acks_are_recorded_and_fail_the_job(make_api) -> None:
    # Each failed start of the current generation releases the job and the next solve
    # starts another generation; the second failure (max_command_failures) fails the job.
    with make_api(max_command_failures=2) as api:
        agents, job, starts = _start_two_node_job(api)
        j = job["job_id"]
        for failure, node in enumerate(("n1", "n2")):
            generation = 1 + 2 * failure  # 1, then 3 (2 released the job's nodes)
            api.wait_for(lambda g=generation: api.job(j)["generation"] == g)
            (c,) = [
                c
                for c in api.poll(agents[node], wait=0)
                if c["kind"] == "start" and c["rendezvous_id"] == f"{j}-g{generation}"
            ]
            r = api.call(
                "POST",
                f"/v1/agents/{agents[node]}/commands/{c['command_id']}/ack",
                "agent",
                json={"ok": False, "error": f"no module on {node}"},
            )
            assert r.status_code == 200
        shown = api.job(j)
        assert [e["error"] for e in shown["errors"]] == ["no module on n1", "no module on n2"]
        assert (shown["state"], shown["nodes"]) == ("failed", [])
        assert [e["reason"] for e in shown["rescales"]] == [
            "allocation",
            "command_failed",
            "allocation",
            "failed",
        ]


def test_a_failed_stop_is_recorded_but_does_not_fail_the_job(make_api) -> None:
    # A stop the agent cannot carry out (it runs no workers of the job, e.g. because the start
    # it undoes was superseded before the agent ran it) costs the job nothing.
    with make_api(max_command_failures=1) as api:
        agents, job, _ = _start_two_node_job(api)
        assert api.node_events(("e3", "n2", "busy", 5)).status_code == 200
        stops = [c for c in api.poll(agents["n2"]) if c["kind"] == "stop"]
        assert [c["job_id"] for c in stops] == [job["job_id"]]
        r = api.call(
            "POST",
            f"/v1/agents/{agents['n2']}/commands/{stops[0]['command_id']}/ack",
            "agent",
            json={"ok": False, "error": "runs no workers of it"},
        )
        assert r.status_code == 200 and r.json()["ok"] is False
        shown = api.job(job["job_id"])
        assert [e["error"] for e in shown["errors"]] == ["runs no workers of it"]
        assert (shown["state"], shown["nodes"]) == ("running", ["n1"])


def test_spb_jobs_may_run_deeper_and_dp_jobs_stay_at_depth_zero(api) -> None:
    agents = {n: api.register(n) for n in ("n1", "n2")}
    api.node_events(("e1", "n1", "idle", 0), ("e2", "n2", "idle", 0))
    job = api.submit(min_nodes=2, max_nodes=2, parallelism="spb")
    (start,) = api.poll(agents["n1"])
    # depth 1 trains 290 samples/s x 0.6 = 174 < 190 at depth 0: the optimizer keeps 0
    assert start["spb_depth"] == api.job(job["job_id"])["spb_depth"] == 0
