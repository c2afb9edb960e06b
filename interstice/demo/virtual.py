"""Simulated node agents (as ``bench/agents_load.py`` makes them): async httpx clients that
register, heartbeat at the service's interval and fetch and acknowledge commands, so the
service sees a large machine while the real agents train.

They run no workers, so the demo's scheduler stand-in reports their nodes ``busy``: a job
whose generation spanned a simulated node could never complete its rendezvous.

At most :data:`CONNECTIONS` requests are in flight at a time, and the others wait on a
semaphore rather than in httpx's connection pool: httpcore 1.0's pool re-scans every queued
request against every connection each time a request joins or leaves it
(https://github.com/encode/httpcore/pull/1035), so with thousands queued at once (every
agent registering) its event loop spent minutes in that scan and sent nothing.

A failed request (a transport error or a non-2xx answer) is counted under a short
description of what failed (:class:`Failures`), so that the demo can say why its simulated
agents did not register or fell silent.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import threading
from collections import Counter
from typing import Any

import httpx

TIMEOUT_S = 30.0
"""Most seconds one request may take."""
CONNECTIONS = 50
"""Most requests (and connections) the simulated agents have in flight together."""
REGISTERING = CONNECTIONS // 2
"""Most registrations in flight or waiting for a connection together: the registered agents'
heartbeats then wait behind at most these many, not behind every agent still to register."""
POLL_EVERY = 5
"""Heartbeats between two fetches of an agent's commands."""
HEARTBEATS_PER_S = 25.0
"""Heartbeats per second the simulated agents send together at most: at 100 a second, a
service on a loaded 2-core VM fell behind, and on such a VM each request costs the agents'
own thread 4 to 6 ms of CPU."""
LOST_AFTER = 3
"""Missed heartbeats of a simulated agent after which the service marks it lost."""
KINDS_SHOWN = 3
"""Distinct failures a :meth:`Failures.line` names (the first ones seen)."""
KINDS_KEPT = 100
"""Distinct failures counted apart; later new ones are counted together."""
BODY_CHARS = 200
"""Most characters of an error answer's body a failure quotes."""


def simulated_heartbeat_s(nodes: int, service_heartbeat_s: float) -> float:
    """Seconds between two heartbeats of each of ``nodes`` simulated agents: the service's
    interval, or longer so that they send at most :data:`HEARTBEATS_PER_S` together."""
    return max(service_heartbeat_s, nodes / HEARTBEATS_PER_S)


def service_env(nodes: int, service_heartbeat_s: float) -> dict[str, str]:
    """The service's settings (environment variables) for ``nodes`` simulated agents that
    heartbeat every :func:`simulated_heartbeat_s` while real agents keep the service's
    ``service_heartbeat_s``: an agent is lost after :data:`LOST_AFTER` simulated intervals
    (a real agent that stops is then seen late by the service; the demo watches its
    processes itself)."""
    ratio = simulated_heartbeat_s(nodes, service_heartbeat_s) / service_heartbeat_s
    return {
        "INTERSTICE_HEARTBEAT_INTERVAL_S": f"{service_heartbeat_s:g}",
        "INTERSTICE_MISSED_HEARTBEATS_LOST": str(math.ceil(LOST_AFTER * ratio)),
    }


class Failures:
    """The simulated agents' failed requests: how many, and how many of each distinct kind
    (``"register: HTTP 401 {...}"``, ``"heartbeat: ConnectError ..."``) in the order first
    seen."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()

    @property
    def count(self) -> int:
        """Failed requests so far."""
        return self.kinds.total()

    def add(self, what: str, failure: httpx.Response | httpx.HTTPError) -> None:
        """Count one failed request of the step ``what`` (``register``, ``heartbeat``, ...)."""
        if isinstance(failure, httpx.Response):
            body = " ".join(failure.text.split())
            if len(body) > BODY_CHARS:
                body = body[:BODY_CHARS] + "…"
            kind = f"{what}: HTTP {failure.status_code} {body}".rstrip()
        else:
            detail = " ".join(str(failure).split())[:BODY_CHARS]
            kind = f"{what}: {type(failure).__name__} {detail}".rstrip()
        if kind not in self.kinds and len(self.kinds) >= KINDS_KEPT:
            kind = "other kinds"  # an answer quoting each agent's id would make thousands
        self.kinds[kind] += 1

    def line(self) -> str:
        """One line: the count, then the first :data:`KINDS_SHOWN` distinct failures, each
        with its count, e.g. ``3 requests failed: 3 x register: HTTP 401 {"detail":...}``;
        ``""`` when none failed."""
        if not self.kinds:
            return ""
        kinds = list(self.kinds.items())  # one copy: the agents' thread may add meanwhile
        shown = [f"{n} x {kind}" for kind, n in kinds[:KINDS_SHOWN]]
        more = len(kinds) - KINDS_SHOWN
        tail = f"; and {more} other kinds" if more > 0 else ""
        count = sum(n for _, n in kinds)
        plural = "s" if count != 1 else ""
        return f"{count} request{plural} failed: " + "; ".join(shown) + tail


class SimulatedAgentsFailed(RuntimeError):
    """Not every simulated agent registered; the message says how many did and why not."""


class VirtualAgents:
    """``nodes`` simulated agents on their own thread and event loop.

    Args:
        url: the service's base URL.
        token: an agent token.
        nodes: node names, one simulated agent each.
        heartbeat_s: seconds between two heartbeats of an agent; None: the service's
            interval (a longer one needs the service's ``missed_heartbeats_lost`` raised to
            match, or it marks them lost).

    Attributes:
        failures: the failed requests (:class:`Failures`).
        registered: agents registered so far.
    """

    def __init__(
        self, url: str, token: str, nodes: list[str], heartbeat_s: float | None = None
    ) -> None:
        self.url, self.token, self.nodes = url, token, nodes
        self.heartbeat_s = heartbeat_s
        self.failures = Failures()
        self.registered = 0
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gate: asyncio.Semaphore | None = None
        self._registering: asyncio.Semaphore | None = None
        self._settled = threading.Event()  # every registration answered, or one failed
        self._crash: BaseException | None = None
        self._stopping = False
        self._answered = 0  # registrations answered (or skipped after a failure)
        self._agent_ids: list[str] = []
        self._thread = threading.Thread(target=self._run, name="virtual-agents", daemon=True)

    def start(self) -> None:
        """Start the agents' thread: they register, :data:`REGISTERING` at a time, each
        living (heartbeats, commands) from its registration on, until :meth:`stop`.
        Registration stops at the first one that fails."""
        self._thread.start()

    def wait_registered(self, stall_s: float) -> None:
        """Return once every agent registered.

        Args:
            stall_s: most seconds to wait for the next registration's answer (the whole
                registration takes minutes at thousands of agents on a loaded machine).

        Raises:
            SimulatedAgentsFailed: one failed, or none answered for ``stall_s``; the message
                counts them and names the first distinct failures (:meth:`Failures.line`),
                e.g. ``0 of 2500 simulated agents registered: 25 requests failed: 25 x
                register: HTTP 401 {"detail":"..."}``.
        """
        answered = -1
        while not self._settled.is_set() and self._answered > answered:
            answered = self._answered
            self._settled.wait(stall_s)
        if self._settled.is_set() and self._crash is None and self.registered == len(self.nodes):
            return
        message = f"{self.registered} of {len(self.nodes)} simulated agents registered"
        if self.failures.count:
            message += f": {self.failures.line()}"
        elif self._crash is not None:
            message += f": {type(self._crash).__name__}: {self._crash}"
        else:
            message += (
                f"; none answered for {stall_s:g} s and no request failed: the service or "
                "this machine is too slow"
            )
        raise SimulatedAgentsFailed(message)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Make every agent leave (``DELETE /v1/agents/{id}``) and end the thread."""
        self._stopping = True  # seen by a thread that has not made its event loop yet
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread.ident is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as crash:  # wait_registered() reports it at once
            self._crash = crash
        finally:
            self._settled.set()

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        if self._stopping:
            self._stop.set()
        self._gate = asyncio.Semaphore(CONNECTIONS)
        self._registering = asyncio.Semaphore(REGISTERING)
        if not self.nodes:
            self._settled.set()
        limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
        async with httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=TIMEOUT_S,
            limits=limits,
        ) as client:
            tasks = [asyncio.create_task(self._agent(client, node)) for node in self.nodes]
            await self._stop.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.gather(
                *(
                    self._call(client, "leave", "DELETE", f"/v1/agents/{agent_id}")
                    for agent_id in self._agent_ids
                )
            )

    async def _call(
        self, client: httpx.AsyncClient, what: str, method: str, path: str, **kwargs: Any
    ) -> httpx.Response | None:
        """One request of the step ``what``; None when it failed (counted)."""
        assert self._gate is not None
        async with self._gate:
            try:
                response = await client.request(method, path, **kwargs)
            except httpx.HTTPError as error:
                self.failures.add(what, error)
                return None
        if not response.is_success:
            self.failures.add(what, response)
            return None
        return response

    async def _agent(self, client: httpx.AsyncClient, node: str) -> None:
        """Register the agent of ``node``, then keep it alive (:meth:`_live`) at once: the
        first ones would be lost waiting for the last ones' registration otherwise."""
        agent = None
        assert self._registering is not None
        async with self._registering:
            if not self.failures.count:  # one failed: the demo stops; say why at once
                body = {"node": node, "host": "127.0.0.1", "ports": [], "devices": []}
                response = await self._call(client, "register", "POST", "/v1/agents", json=body)
                agent = None if response is None else response.json()
        if agent is not None:
            self._agent_ids.append(agent["agent_id"])
            self.registered += 1
        self._answered += 1
        if self._answered == len(self.nodes) or agent is None:
            self._settled.set()
        if agent is not None:
            await self._live(client, agent)

    async def _live(self, client: httpx.AsyncClient, agent: dict) -> None:
        """Heartbeat every interval (:attr:`heartbeat_s`); every :data:`POLL_EVERY`
        heartbeats, also fetch (without waiting) and ack any command (their nodes stay busy:
        commands are rare).

        The interval runs from one heartbeat's start to the next (not from the end of the
        last command's ack), so a slow service on a loaded machine does not stretch it past
        the three intervals after which the service marks an agent lost."""
        path = f"/v1/agents/{agent['agent_id']}"
        loop = asyncio.get_running_loop()
        interval_s = self.heartbeat_s or agent["heartbeat_interval_s"]
        due = loop.time() - random.uniform(0, interval_s)  # spread the agents over the interval
        for beat in itertools.count():
            due = max(due + interval_s, loop.time())
            await asyncio.sleep(due - loop.time())
            await self._call(client, "heartbeat", "POST", f"{path}/heartbeat", json={})
            if beat % POLL_EVERY:
                continue
            response = await self._call(
                client, "commands", "GET", f"{path}/commands", params={"wait": 0}
            )
            for command in response.json()["data"] if response is not None else []:
                ack = f"{path}/commands/{command['command_id']}/ack"
                await self._call(client, "ack", "POST", ack, json={"ok": True})
