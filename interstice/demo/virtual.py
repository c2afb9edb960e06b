"""Simulated node agents (as ``bench/agents_load.py`` makes them): async httpx clients that
register, heartbeat at the service's interval and fetch and acknowledge commands, so the
service sees a large machine while the real agents train.

They run no workers, so the demo's scheduler stand-in reports their nodes ``busy``: a job
whose generation spanned a simulated node could never complete its rendezvous.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading

import httpx

TIMEOUT_S = 30.0
"""Most seconds one request may take."""
CONNECTIONS = 50
"""Most connections the simulated agents open together."""
POLL_EVERY = 5
"""Heartbeats between two fetches of an agent's commands."""


class VirtualAgents:
    """``nodes`` simulated agents on their own thread and event loop.

    Args:
        url: the service's base URL.
        token: an agent token.
        nodes: node names, one simulated agent each.

    Attributes:
        errors: requests that failed (transport error or non-2xx answer).
        registered: agents registered so far.
    """

    def __init__(self, url: str, token: str, nodes: list[str]) -> None:
        self.url, self.token, self.nodes = url, token, nodes
        self.errors = 0
        self.registered = 0
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="virtual-agents", daemon=True)

    def start(self, timeout_s: float) -> None:
        """Start the agents; return once every one registered.

        Raises:
            TimeoutError: not all registered within ``timeout_s``.
        """
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(
                f"{self.registered} of {len(self.nodes)} simulated agents registered "
                f"in {timeout_s} s"
            )

    def stop(self, timeout_s: float = 10.0) -> None:
        """Make every agent leave (``DELETE /v1/agents/{id}``) and end the thread."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
        async with httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=TIMEOUT_S,
            limits=limits,
        ) as client:
            answers = await asyncio.gather(*(self._register(client, n) for n in self.nodes))
            agents = [answer for answer in answers if answer is not None]
            if len(agents) == len(self.nodes):
                self._ready.set()
            tasks = [asyncio.create_task(self._live(client, agent)) for agent in agents]
            await self._stop.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.gather(
                *(self._call(client, "DELETE", f"/v1/agents/{a['agent_id']}") for a in agents)
            )

    async def _call(
        self, client: httpx.AsyncClient, method: str, path: str, **kwargs: object
    ) -> httpx.Response | None:
        try:
            response = await client.request(method, path, **kwargs)  # type: ignore[arg-type]
        except httpx.HTTPError:
            self.errors += 1
            return None
        if not response.is_success:
            self.errors += 1
            return None
        return response

    async def _register(self, client: httpx.AsyncClient, node: str) -> dict | None:
        body = {"node": node, "host": "127.0.0.1", "ports": [], "devices": []}
        response = await self._call(client, "POST", "/v1/agents", json=body)
        if response is None:
            return None
        self.registered += 1
        return response.json()

    async def _live(self, client: httpx.AsyncClient, agent: dict) -> None:
        """Heartbeat every interval; every :data:`POLL_EVERY` heartbeats, also fetch
        (without waiting) and ack any command (their nodes stay busy: commands are rare).

        The interval runs from one heartbeat's start to the next (not from the end of the
        last command's ack), so a slow service on a loaded machine does not stretch it past
        the three intervals after which the service marks an agent lost."""
        path = f"/v1/agents/{agent['agent_id']}"
        loop = asyncio.get_running_loop()
        interval_s = agent["heartbeat_interval_s"]
        due = loop.time() - random.uniform(0, interval_s)  # spread the agents over the interval
        for beat in itertools.count():
            due = max(due + interval_s, loop.time())
            await asyncio.sleep(due - loop.time())
            await self._call(client, "POST", f"{path}/heartbeat", json={})
            if beat % POLL_EVERY:
                continue
            response = await self._call(client, "GET", f"{path}/commands", params={"wait": 0})
            for command in response.json()["data"] if response is not None else []:
                ack = f"{path}/commands/{command['command_id']}/ack"
                await self._call(client, "POST", ack, json={"ok": True})
