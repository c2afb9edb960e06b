"""Two ``interstice serve`` replicas on one PostgreSQL database; ``kill -9`` of the leader
while node events and job submissions stream in.

The follower takes over within :data:`TAKEOVER_BOUND_S`; every request answered 2xx is still
there; a reclaim posted during the failover reaches its node's agent within its grace; the
new leader's solves keep commands flowing; the agents (over :class:`ServiceClient` given both
URLs) fail over and none is marked lost; a restarted replica follows, and leads when the
leader stops cleanly. The figures are printed
(``pytest -s``) for the README.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_helpers import ROLES, SCALABILITY_CSV, PostgresServer, free_port
from interstice.agents.client import ServiceClient, ServiceUnavailable
from interstice.api.auth.tokens import create_token
from interstice.api.control.notify import PAYLOAD_MAX_BYTES, Notifier, PostgresRelay
from interstice.api.store.db import Database
from interstice.api.store.tables import NodeEvent
from polling import wait_until
from sqlalchemy import select
from test_restart import Server

TAKEOVER_BOUND_S = 5.0
"""Most seconds from the leader's ``kill -9`` to the follower answering ``leader: true``."""
GRACE_S = 10.0
"""The reclaim's grace: its ``stop`` must reach the agent within it."""
AGENT_NODES = ("n1", "n2", "n3", "n4")
LOST_AFTER_S = 5.0
"""The service's lease limit: 5 heartbeat intervals of 1 s (10 of the agents' heartbeats)."""
HEARTBEAT_S = 0.5
"""The simulated agents' heartbeat period, seconds (the service's interval: 1 s)."""
LONG_POLL_S = 50.0
"""The wait of the long-poll that only a relayed wake-up answers early."""
WAIT_S = 90.0
"""Longest wait for any awaited condition (a loaded 2-core machine)."""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _wait_for(condition: Any, what: str, timeout_s: float = WAIT_S) -> Any:
    return wait_until(condition, timeout_s, what)


def _is_leader(server: Server) -> bool | None:
    """``leader`` of the replica's ``/readyz``; None when it does not answer."""
    try:
        return httpx.get(f"{server.url}/readyz", timeout=2).json()["leader"]
    except httpx.HTTPError:
        return None


def _sleep_until(moment: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``moment`` (a lease limit to outlast)."""
    time.sleep(max(0.0, moment - time.monotonic()))


def _agent_states(server: Server, h: dict[str, dict[str, str]]) -> dict[str, str]:
    listed = httpx.get(f"{server.url}/v1/agents", headers=h["admin"], timeout=30).json()
    return {x["node"]: x["state"] for x in listed["data"]}


class SimAgent(threading.Thread):
    """A node agent that acknowledges every command at once and heartbeats every
    :data:`HEARTBEAT_S` from a thread of its own, over the production client given the
    replicas' URLs."""

    def __init__(
        self,
        urls: list[str],
        token: str,
        node: str,
        done: threading.Event,
        poll_wait_s: float = 2.0,
    ) -> None:
        super().__init__(name=f"agent-{node}", daemon=True)
        self.client = ServiceClient(urls, token, max_backoff_s=0.5)
        self.node, self.done, self.poll_wait_s = node, done, poll_wait_s
        self.agent_id: str | None = None
        self.received: list[tuple[float, dict[str, Any]]] = []
        """(monotonic time first received, command), in order."""

    def run(self) -> None:
        stop = self.done.is_set
        try:
            registered = self.client.register(
                {"node": self.node, "host": f"h-{self.node}", "ports": [29500]},
                should_stop=stop,
            )
            self.agent_id = registered["agent_id"]
            beating = threading.Thread(target=self._beat, args=(self.agent_id,), daemon=True)
            beating.start()
            seen: set[int] = set()
            while not stop():
                polled = self.client.poll_commands(
                    self.agent_id, self.poll_wait_s, should_stop=stop
                )
                for command in polled:
                    if command["command_id"] not in seen:
                        seen.add(command["command_id"])
                        self.received.append((time.monotonic(), command))
                    self.client.ack(self.agent_id, command["command_id"], True, None)
            beating.join()
        except ServiceUnavailable:
            assert stop(), "an agent gave up while the test ran"
        finally:
            self.client.close()

    def _beat(self, agent_id: str) -> None:
        try:
            while not self.done.wait(HEARTBEAT_S):
                self.client.heartbeat(agent_id, {}, should_stop=self.done.is_set)
        except ServiceUnavailable:
            assert self.done.is_set(), "an agent gave up while the test ran"

    def commands_after(self, command_id: int) -> list[dict[str, Any]]:
        return [c for _, c in self.received if c["command_id"] > command_id]


class Streamer(threading.Thread):
    """Posts one request after another to whichever replica answers (the first URL first,
    then in turn on a connection error) and keeps what was answered 2xx."""

    def __init__(self, urls: list[str], headers: dict[str, str], make: Any) -> None:
        super().__init__(daemon=True)
        self.urls, self.headers, self.make = urls, headers, make
        self.done = threading.Event()
        self.answered: list[dict[str, Any]] = []
        self.failed_tries = 0

    def run(self) -> None:
        turn = itertools.cycle(self.urls)
        url = next(turn)
        with httpx.Client(timeout=30) as http:
            for i in itertools.count():
                if self.done.is_set():
                    return
                path, body = self.make(i)
                while not self.done.is_set():
                    try:
                        r = http.post(url + path, json=body, headers=self.headers)
                    except httpx.TransportError:
                        self.failed_tries += 1
                        url = next(turn)
                        continue
                    assert r.is_success, (r.status_code, r.text)
                    self.answered.append(r.json())
                    break
                time.sleep(0.1)


@pytest.fixture
def replicas(postgres_server: PostgresServer, tmp_path: Path) -> Iterator[list[Server]]:
    (tmp_path / "table.csv").write_text(SCALABILITY_CSV)
    db_url = postgres_server.new_database()
    servers = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "table.csv").write_text(SCALABILITY_CSV)
        servers.append(Server(db_url, tmp_path / name))
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.mark.slow
def test_kill9_of_the_leader_loses_nothing_and_the_follower_takes_over(
    replicas: list[Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERSTICE_HEARTBEAT_INTERVAL_S", "1")
    monkeypatch.setenv("INTERSTICE_MISSED_HEARTBEATS_LOST", str(int(LOST_AFTER_S)))
    a, b = replicas
    a.start()  # migrates the database, and leads
    database = Database(a.db_url)
    tokens = {role: create_token(database, role, role) for role in ROLES}
    h = {role: {"Authorization": f"Bearer {t}"} for role, t in tokens.items()}
    b.start()
    assert _is_leader(a) is True
    assert _is_leader(b) is False
    assert "interstice_leader 1.0" in httpx.get(f"{a.url}/metrics").text
    assert "interstice_leader 0.0" in httpx.get(f"{b.url}/metrics").text
    ab, ba = [a.url, b.url], [b.url, a.url]
    http = httpx.Client(timeout=30)
    http.put(f"{a.url}/v1/objective", headers=h["admin"], json={"horizon_s": 900})

    done = threading.Event()
    agents = {
        node: SimAgent(ab if i % 2 == 0 else ba, tokens["agent"], node, done)
        for i, node in enumerate(AGENT_NODES)
    }
    # long-polls the follower only: the leader's commands reach it by a relayed wake-up
    agents["n5"] = SimAgent([b.url], tokens["agent"], "n5", done, poll_wait_s=LONG_POLL_S)
    streams: list[Streamer] = []
    try:
        for agent in agents.values():
            agent.start()
        _wait_for(lambda: all(x.agent_id for x in agents.values()), "agents registered")
        registered = time.monotonic()
        events = [
            {"event_id": f"idle-{n}", "node": n, "state": "idle", "at": _now()} for n in AGENT_NODES
        ]
        # on the follower: the leader's control loop hears of it through NOTIFY
        assert http.post(
            f"{b.url}/v1/nodes/events", headers=h["scheduler"], json={"events": events}
        ).is_success
        job = http.post(
            f"{b.url}/v1/jobs",
            headers=h["user"],
            json={"model": "tinycnn", "min_nodes": 1, "max_nodes": 4, "total_samples": 1e9},
        ).json()["job_id"]
        _wait_for(lambda: all(agents[n].received for n in AGENT_NODES), "every agent got a command")
        # n5 idle and a second job, on the leader: n5's long-poll on the follower wakes
        n5_idle = {"event_id": "idle-n5", "node": "n5", "state": "idle", "at": _now()}
        asked = time.monotonic()
        assert http.post(
            f"{a.url}/v1/nodes/events", headers=h["scheduler"], json={"events": [n5_idle]}
        ).is_success
        assert http.post(
            f"{a.url}/v1/jobs",
            headers=h["user"],
            json={"model": "tinycnn", "min_nodes": 1, "max_nodes": 1, "total_samples": 1e9},
        ).is_success
        woken_at = _wait_for(lambda: agents["n5"].received and agents["n5"].received[0][0], "n5")
        relayed_s = woken_at - asked
        assert relayed_s < LONG_POLL_S / 2, "answered by the poll's timeout, not a wake-up"

        # node events (on nodes without agents) and job submissions stream in
        streams = [
            Streamer(
                ab,
                h["scheduler"],
                lambda i: (
                    "/v1/nodes/events",
                    {
                        "events": [
                            {
                                "event_id": f"x-{i}",
                                "node": f"x{i % 8}",
                                "state": ("idle", "busy")[i // 8 % 2],
                                "at": _now(),
                            }
                        ]
                    },
                ),
            ),
            Streamer(
                ba,
                h["user"],
                lambda i: (
                    "/v1/jobs",
                    {"model": "tinycnn", "min_nodes": 1, "max_nodes": 1, "total_samples": 1e6},
                ),
            ),
        ]
        for stream in streams:
            stream.start()
        _wait_for(lambda: all(len(s.answered) >= 3 for s in streams), "streams under way")

        # the leases renewed on the follower reach the leader: after the limit, none lost
        _sleep_until(registered + 1.5 * LOST_AFTER_S)
        assert _agent_states(b, h) == dict.fromkeys([*AGENT_NODES, "n5"], "alive")
        nodes = http.get(f"{b.url}/v1/nodes", headers=h["admin"]).json()["data"]
        reclaimed = next(n["name"] for n in nodes if n["holder"] == job)
        agent = agents[reclaimed]
        last_id = max(c["command_id"] for x in agents.values() for _, c in x.received)

        a.kill9()
        killed = time.monotonic()
        reclaim = {
            "event_id": "reclaim",
            "node": reclaimed,
            "state": "busy",
            "at": _now(),
            "grace_s": GRACE_S,
        }
        assert http.post(
            f"{b.url}/v1/nodes/events", headers=h["scheduler"], json={"events": [reclaim]}
        ).is_success
        posted = time.monotonic()
        _wait_for(lambda: _is_leader(b), "the follower leads", TAKEOVER_BOUND_S * 4)
        leads = time.monotonic()
        takeover_s = leads - killed
        stopped_at = _wait_for(
            lambda: next(
                (t for t, c in agent.received if c["command_id"] > last_id and c["kind"] == "stop"),
                None,
            ),
            "the reclaim's stop reached the agent",
        )
        reclaim_s = stopped_at - posted
        print(
            f"\nfailover: takeover_s={takeover_s:.2f} reclaim_stop_s={reclaim_s:.2f} "
            f"relayed_command_s={relayed_s:.2f}"
        )
        assert takeover_s <= TAKEOVER_BOUND_S
        assert reclaim_s <= GRACE_S

        # the new leader solves: the node back idle goes to a job, commands flow
        flowing = max(c["command_id"] for x in agents.values() for _, c in x.received)
        back = {"event_id": "back", "node": reclaimed, "state": "idle", "at": _now()}
        assert http.post(
            f"{b.url}/v1/nodes/events", headers=h["scheduler"], json={"events": [back]}
        ).is_success
        _wait_for(
            lambda: any(x.commands_after(flowing) for x in agents.values()),
            "a command from the new leader",
        )
        _wait_for(lambda: all(len(s.answered) >= 20 for s in streams), "streams go on")
        # no agent was lost in the failover, though those of the killed replica were silent
        # (the new leader counts an agent it holds no lease of from when it began to lead)
        _sleep_until(leads + 1.5 * LOST_AFTER_S)
        assert _agent_states(b, h) == dict.fromkeys([*AGENT_NODES, "n5"], "alive")
    finally:
        for stream in streams:
            stream.done.set()
        for stream in streams:
            stream.join(timeout=60)
        done.set()
        for node in AGENT_NODES:  # (n5's long-poll may wait on: a daemon thread)
            agents[node].join(timeout=60)

    # every answered request is still there
    jobs = http.get(f"{b.url}/v1/jobs", headers=h["admin"], params={"limit": 1000}).json()
    assert {j["job_id"] for j in streams[1].answered} <= {j["job_id"] for j in jobs["data"]}
    # and no agent was ever taken for lost (its job would have been rescaled without it)
    reasons = {r["reason"] for j in jobs["data"] for r in j["rescales"]}
    assert "agent_lost" not in reasons, reasons
    with database.read() as session:
        stored = set(session.scalars(select(NodeEvent.event_id)))
    posted_ids = {e["event_id"] for answer in streams[0].answered for e in answer["data"]}
    assert posted_ids and posted_ids <= stored
    assert {"reclaim", "back"} <= stored
    # a restarted replica follows (on a new port: the old one may be taken meanwhile)
    a.port = free_port()
    a.url = f"http://127.0.0.1:{a.port}"
    a.start()
    assert _is_leader(a) is False
    assert _is_leader(b) is True
    # a leader stopped cleanly (SIGTERM) hands over, without a traceback
    assert b.process is not None
    b.process.terminate()
    # (uvicorn re-raises the signal it stopped on once it has shut down)
    assert b.process.wait(timeout=60) in (0, -signal.SIGTERM)
    _wait_for(lambda: _is_leader(a), "the restarted replica leads")
    assert "Traceback" not in (b.folder / "serve.log").read_text()
    database.dispose()
    print(
        f"failover: {sum(s.failed_tries for s in streams)} tries refused by the killed "
        f"replica, {len(streams[0].answered)} event batches and {len(streams[1].answered)} "
        "jobs answered"
    )


def test_a_wake_up_of_many_agents_is_split_into_notify_payloads_postgresql_accepts() -> None:
    relay = PostgresRelay("postgresql+psycopg://u@h/db", Notifier(), lambda: None)
    sent: list[str] = []
    relay._send = sent.append  # type: ignore[method-assign]
    ids = list(range(1, 5001))
    relay.send_wake(ids)
    assert len(sent) > 1
    assert all(len(m) <= PAYLOAD_MAX_BYTES + len("wake ") for m in sent)
    assert [int(x) for m in sent for x in m.removeprefix("wake ").split(",")] == ids
