"""Factories and constants of the service tests (imported by conftest and the tests)."""

from __future__ import annotations

import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient
from interstice.api.services.state import parse_id
from interstice.api.settings import Settings
from interstice.api.store.tables import Agent
from polling import wait_until
from postgres_server import PostgresServer  # noqa: F401 (the tests import it from here)
from sqlalchemy import select

from interstice.wire import all_pages

SCALABILITY_CSV = """model,nodes,samples_per_s,spb_depth,progress_per_sample
tinycnn,1,100,0,1
tinycnn,2,190,0,1
tinycnn,4,360,0,1
tinycnn,1,150,1,0.6
tinycnn,2,290,1,0.6
tinycnn,4,560,1,0.6
bignet,2,50,0,1
bignet,8,180,0,1
"""
ROLES = ("scheduler", "agent", "user", "admin")


def interstice_executable() -> str:
    """The ``interstice`` console script of this Python (beside it, else on PATH)."""
    found = shutil.which("interstice", path=str(Path(sys.executable).parent)) or shutil.which(
        "interstice"
    )
    assert found, "the interstice console script is not installed (pip install -e .)"
    return found


def gauge(metrics: str, name: str) -> float:
    """The value of the unlabelled metric ``name`` in a ``/metrics`` page."""
    (line,) = [x for x in metrics.splitlines() if x.startswith(name + " ")]
    return float(line.split()[1])


def free_port() -> int:
    """An unused TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Api:
    """A running app with one token per role (``tokens``) and a second user (``other``)."""

    client: TestClient
    tokens: dict[str, str]
    settings: Settings

    def auth(self, role: str) -> dict[str, str]:
        """Authorization header of ``role``'s token (or of ``other``, the second user)."""
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def call(self, method: str, path: str, role: str, **kwargs: Any) -> httpx.Response:
        headers = self.auth(role) | kwargs.pop("headers", {})
        return self.client.request(method, path, headers=headers, **kwargs)

    @property
    def app(self) -> Any:
        return self.client.app

    def nodes(self, role: str = "scheduler") -> list[dict[str, Any]]:
        """Every node (``GET /v1/nodes``, all its pages) as ``role``."""

        def page(cursor: str | None) -> dict[str, Any]:
            params = {} if cursor is None else {"cursor": cursor}
            r = self.call("GET", "/v1/nodes", role, params=params)
            assert r.status_code == 200, r.text
            return r.json()

        return all_pages(page)

    def register(self, node: str, port: int = 29500, report_idle: bool = False) -> str:
        """Register an agent on ``node`` (host ``h-<node>``); returns its id."""
        r = self.call(
            "POST",
            "/v1/agents",
            "agent",
            json={
                "node": node,
                "host": f"h-{node}",
                "ports": [port, port + 1],
                "report_idle": report_idle,
            },
        )
        assert r.status_code in (200, 201), r.text
        return r.json()["agent_id"]

    def node_events(
        self, *events: tuple[str, str, str, float], at: str | None = None
    ) -> httpx.Response:
        """Post ``(event_id, node, state, grace_s)`` events at ``at`` (default: now)."""
        at = at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "events": [
                {"event_id": e, "node": n, "state": s, "at": at, "grace_s": g}
                for e, n, s, g in events
            ]
        }
        return self.call("POST", "/v1/nodes/events", "scheduler", json=body)

    def submit(self, role: str = "user", **fields: Any) -> dict[str, Any]:
        body = {"model": "tinycnn", "min_nodes": 1, "max_nodes": 2, "total_samples": 10**6}
        body |= fields
        r = self.call("POST", "/v1/jobs", role, json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def poll(self, agent_id: str, wait: float = 5) -> list[dict[str, Any]]:
        r = self.call("GET", f"/v1/agents/{agent_id}/commands", "agent", params={"wait": wait})
        assert r.status_code == 200, r.text
        return r.json()["data"]

    def ack_all(self, agent_id: str, commands: list[dict[str, Any]]) -> None:
        for c in commands:
            r = self.call(
                "POST",
                f"/v1/agents/{agent_id}/commands/{c['command_id']}/ack",
                "agent",
                json={"ok": True},
            )
            assert r.status_code == 200, r.text

    def job(self, job_id: str, role: str = "user") -> dict[str, Any]:
        r = self.call("GET", f"/v1/jobs/{job_id}", role)
        assert r.status_code == 200, r.text
        return r.json()

    def wait_for(self, predicate: Callable[[], Any], timeout_s: float = 10) -> Any:
        """Poll ``predicate`` until it is truthy; fail after ``timeout_s``."""
        return wait_until(predicate, timeout_s, interval_s=0.02)


def start_job(api: Api, nodes: list[str], **fields: Any) -> tuple[dict[str, str], dict, dict]:
    """Register ``nodes`` idle, submit a job that wants all of them, ack its starts.

    Returns:
        The agent id per node, the job as submitted, and each node's start command.
    """
    agents = {n: api.register(n) for n in nodes}
    api.node_events(*((f"e-{n}", n, "idle", 0) for n in nodes))
    job = api.submit(**({"min_nodes": 1, "max_nodes": len(nodes)} | fields))
    api.wait_for(lambda: api.job(job["job_id"])["nodes"] == sorted(nodes))
    starts = {}
    for node, agent in agents.items():
        (starts[node],) = [c for c in api.poll(agent, wait=0) if c["kind"] == "start"]
        api.ack_all(agent, [starts[node]])
    return agents, job, starts


def beat(api: Api, agent: str, **fields: Any) -> httpx.Response:
    """A heartbeat of ``agent`` with ``fields``; asserts it is answered 200."""
    r = api.call("POST", f"/v1/agents/{agent}/heartbeat", "agent", json=fields)
    assert r.status_code == 200, r.text
    return r


def silence(service: Any, *agents: str) -> None:
    """Make ``agents``' last sign of life older than the lease limit (3 x 10 s), in this
    process's memory and in the database (where every replica writes its leases)."""
    numbers = [parse_id(agent, "a") for agent in agents]
    with service.leases._lock:
        for number in numbers:
            service.leases._leases[number] -= 1000
    with service.db.write() as session:
        for agent in session.scalars(select(Agent).where(Agent.id.in_(numbers))):
            agent.last_heartbeat_at -= timedelta(seconds=1000)
