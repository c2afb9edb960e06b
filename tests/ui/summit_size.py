"""A running service at Summit's size for the dashboard's browser test and its bench
(bench/dashboard.py): 4,734 nodes named as Summit's (``a01n01`` .. , 18 a cabinet), an agent
on all but a few, the scheduler's states with forecast ends, and 2,000 jobs of three users,
some cancelled, some holding nodes. Everything goes through the public API, as the
scheduler, agents and users would send it, many requests at once.

The agents register and do not heartbeat: the service's heartbeat interval is an hour, so
they stay alive for the test without 4,734 clients loading the machine the browser is
measured on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from interstice.api.store import db as database
from interstice.api.store.tables import Agent, Node, utcnow
from polling import wait_until
from simulated import Served, serve, stop

NODES = 4734
"""Summit's nodes."""
JOBS = 2000
PER_CABINET = 18
"""Nodes a cabinet (Summit's ``a01n01`` .. ``a01n18``)."""
USERS = ("user", "other", "admin")
"""Who submits job ``i``: ``USERS[i % 3]`` (the tokens of :func:`simulated.serve`)."""
SETTINGS = {
    "INTERSTICE_HEARTBEAT_INTERVAL_S": "3600",  # registered agents stay alive: see above
    "INTERSTICE_DEBOUNCE_S": "1",  # 2,000 submissions, a few solves
    "INTERSTICE_MAX_ACTIVE_JOBS": "60",  # solves of seconds, not minutes, on a loaded machine
}
CONCURRENT = 4
"""Requests in flight while populating: more only queue for the service's database."""


def node_names(count: int = NODES) -> list[str]:
    """``count`` host names as Summit's: row letter, cabinet number, node in the cabinet."""
    names = [
        f"{row}{cabinet:02d}n{node:02d}"
        for row in "abcdefgh"
        for cabinet in range(1, 51)
        for node in range(1, PER_CABINET + 1)
    ]
    return names[:count]


@dataclass(frozen=True)
class Population:
    """What :func:`populate` made.

    Attributes:
        nodes: every node's name, in order.
        idle: nodes the scheduler reported idle.
        no_agent: idle nodes without an agent.
        left: nodes whose agent left (stale).
        passed: idle nodes whose forecast end has passed (stale).
        jobs: every job's id, oldest first.
        users: each job's user.
        cancelled: the cancelled jobs.
        scripts: the jobs that run a command (``train_resnet.py``), not a model.
    """

    nodes: list[str]
    idle: list[str]
    no_agent: list[str]
    left: list[str]
    passed: list[str]
    jobs: list[str]
    users: dict[str, str]
    cancelled: list[str]
    scripts: list[str]

    def stale(self) -> set[str]:
        return set(self.left) | set(self.passed)


async def _all(served: Served, calls: list[tuple[str, str, str, Any]]) -> list[Any]:
    """Run ``(who, method, path, json)`` requests, :data:`CONCURRENT` at a time; their
    answers in order."""
    gate = asyncio.Semaphore(CONCURRENT)
    async with httpx.AsyncClient(base_url=served.url, timeout=120) as client:

        async def one(who: str, method: str, path: str, body: Any) -> Any:
            async with gate:
                headers = {"Authorization": f"Bearer {served.tokens[who]}"}
                r = await client.request(method, path, json=body, headers=headers)
            assert r.is_success, f"{method} {path}: {r.status_code} {r.text[:300]}"
            return r.json() if r.content else None

        return await asyncio.gather(*(one(*call) for call in calls))


def idle_nodes(names: list[str]) -> list[str]:
    """The nodes the scheduler reports idle: a third, as on a quiet day."""
    return names[::3]


def nodes_without_agent(names: list[str]) -> list[str]:
    """Idle nodes whose agent never registered."""
    return idle_nodes(names)[1::97]


def record_agents(folder: Path, nodes: list[str]) -> dict[str, str]:
    """Migrate the database of :func:`simulated.serve` in ``folder`` and record an alive agent
    (host ``h-<node>``, port 29500) on each of ``nodes``, its node busy, as
    :func:`interstice.api.services.agents.register` leaves them; before the service starts,
    which counts their leases from its start. Returns ``{node: agent_id}``."""
    db = database.Database(f"sqlite:///{folder / 'interstice.db'}")
    try:
        database.upgrade(db.engine)
        now = utcnow()
        agents = [
            Agent(
                node=n,
                host=f"h-{n}",
                ports=[29500],
                devices=[],
                state="alive",
                last_heartbeat_at=now,
            )
            for n in nodes
        ]
        with db.write() as session:
            session.add_all(agents)
            session.add_all(Node(name=n, state="busy", since=now) for n in nodes)
            session.flush()
            return {agent.node: agent.agent_id for agent in agents}
    finally:
        db.dispose()


def populate(
    served: Served, agent_of: dict[str, str], nodes: int = NODES, jobs: int = JOBS
) -> Population:
    """Fill ``served``, whose agents ``agent_of`` (``{node: agent_id}``, of
    :func:`record_agents`) are recorded, with ``nodes`` nodes and ``jobs`` jobs (module
    docstring); returns once the solver has placed jobs on nodes."""
    names = node_names(nodes)
    idle = idle_nodes(names)
    no_agent = nodes_without_agent(names)
    left = [n for n in names[5::211] if n not in no_agent]
    passed = [n for n in idle[2::61] if n not in no_agent]
    asyncio.run(
        _all(served, [("agent", "DELETE", f"/v1/agents/{agent_of[n]}", None) for n in left])
    )
    now = datetime.now(UTC)
    idle_set, passed_set = set(idle), set(passed)

    def event(n: str) -> dict[str, Any]:
        # a passed forecast: idle since two hours, wanted back an hour ago
        at = now - timedelta(hours=2) if n in passed_set else now
        body = {"event_id": f"s-{n}", "node": n, "at": at.isoformat(), "grace_s": 0}
        if n not in idle_set:
            return body | {"state": "busy"}
        return body | {"state": "idle", "until": (at + timedelta(hours=1)).isoformat()}

    # the nodes' states before the jobs: a solve with jobs that runs between two batches of
    # events reads the pool and the forecasts apart and fails (forecast coverage over 1)
    events = [event(n) for n in names]
    batches = [events[i : i + 1000] for i in range(0, len(events), 1000)]
    asyncio.run(
        _all(served, [("scheduler", "POST", "/v1/nodes/events", {"events": b}) for b in batches])
    )
    submitted = asyncio.run(_all(served, [_job(i) for i in range(jobs)]))
    ids = [j["job_id"] for j in submitted]  # in the order of _job's i, not of their ids
    cancelled = ids[::20]
    asyncio.run(_all(served, [("admin", "DELETE", f"/v1/jobs/{j}", None) for j in cancelled]))
    wait_until(
        lambda: served.ok("admin", "GET", "/v1/jobs?state=running&limit=1")["count"] > 0,
        300,
        interval_s=1,
    )
    return Population(
        nodes=names,
        idle=idle,
        no_agent=no_agent,
        left=left,
        passed=passed,
        jobs=sorted(ids, key=lambda job: int(job.removeprefix("j-"))),
        users={job: USERS[i % 3] for i, job in enumerate(ids)},
        cancelled=cancelled,
        scripts=[ids[i] for i in range(jobs) if i % 10 == 3],
    )


def _job(i: int) -> tuple[str, str, str, dict[str, Any]]:
    """Job ``i``'s submission: every tenth a script, the others the table's model."""
    body: dict[str, Any] = {"min_nodes": 1, "max_nodes": 1 + i % 8, "total_samples": 10**9}
    if i % 10 == 3:
        body |= {"model": None, "command": ["python", f"/home/{USERS[i % 3]}/train_resnet.py"]}
    else:
        body |= {"model": "tinycnn"}
    return (USERS[i % 3], "POST", "/v1/jobs", body)


@contextmanager
def summit(
    folder: Path, nodes: int = NODES, jobs: int = JOBS
) -> Iterator[tuple[Served, Population]]:
    """A service in ``folder`` filled by :func:`record_agents` and :func:`populate`, stopped
    when the block ends."""
    names = node_names(nodes)
    without = set(nodes_without_agent(names))
    agent_of = record_agents(folder, [n for n in names if n not in without])
    served = serve(folder, env=SETTINGS)
    try:
        yield served, populate(served, agent_of, nodes, jobs)
    finally:
        stop(served)
