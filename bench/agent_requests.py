"""Benchmark of one agent request's cost inside the service: the app's CPU per request on the
routes a quiet agent calls, against a bare Starlette route in the same process.

Builds the service's app (``create_app``) on a fresh SQLite file, starts its lifespan, registers
one agent and polls once (the agent is then known to have no pending command, as nearly all
of 5,000 agents are between rescales), then calls each route ``--requests`` times straight
through ASGI (no socket, no HTTP parser: what uvicorn adds is not counted), ``--repeats``
times, and keeps the median. The baseline is a bare Starlette app answering the same empty
command list. Prints JSON lines:

- ``{"cpus", "load1_at_start"}``, then ``{"load1_at_end"}`` (a shared machine: compare the
  ratios, which are taken within one run);
- ``{"route": "bare starlette", "cpu_us_per_request"}``, the baseline;
- per route (``poll``: ``POST /v1/agents/{id}/poll?wait=0`` with an empty heartbeat, protocol
  version 3; ``commands``: ``GET .../commands?wait=0``; ``heartbeat``: ``POST .../heartbeat``,
  version 2) ``{"route", "cpu_us_per_request", "ratio_to_bare"}``.

Usage: ``python bench/agent_requests.py [--requests 3000] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from interstice.api.auth.tokens import create_token
from interstice.api.main import create_app
from interstice.api.settings import Settings
from interstice.api.store.db import Database, upgrade
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def call(app: App, method: str, path: str, token: str, body: bytes, query: bytes) -> int:
    """One request straight through ASGI; returns its status code."""
    answered: dict[str, int] = {}
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered["status"] = message["status"]

    headers = [
        (b"host", b"bench"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    return answered["status"]


async def cpu_us_per_request(
    app: App, method: str, path: str, token: str, body: bytes, query: bytes, n: int, repeats: int
) -> float:
    """Median over ``repeats`` of the process's CPU microseconds per request, over ``n``."""
    status = await call(app, method, path, token, body, query)
    if status != 200:
        raise RuntimeError(f"{method} {path} answered {status}")
    runs = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(n):
            await call(app, method, path, token, body, query)
        runs.append((time.process_time() - start) / n * 1e6)
    return statistics.median(runs)


def bare_app() -> Starlette:
    """The baseline: one Starlette route answering an empty command list."""

    async def commands(_: Any) -> JSONResponse:
        return JSONResponse({"data": [], "count": 0})

    return Starlette(routes=[Route("/v1/agents/{agent_id}/commands", commands)])


async def lifespan(app: App) -> tuple[asyncio.Queue[dict[str, str]], asyncio.Task[None]]:
    """Start ``app``'s lifespan; returns its inbox (put ``lifespan.shutdown``) and task."""
    inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.create_task(app(scope, inbox.get, outbox.put))
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise RuntimeError(f"the service did not start: {started}")
    return inbox, task


async def main(args: argparse.Namespace) -> None:
    print(json.dumps({"cpus": os.cpu_count(), "load1_at_start": os.getloadavg()[0]}))
    folder = Path(tempfile.mkdtemp(prefix="interstice-bench-"))
    db_url = f"sqlite:///{folder / 'bench.db'}"
    database = Database(db_url)
    upgrade(database.engine)
    token = create_token(database, "agent", "agent")
    database.dispose()
    app = create_app(Settings(db_url=db_url, checkpoint_root=folder / "checkpoints"))
    inbox, running = await lifespan(app)
    register = json.dumps({"node": "n1", "host": "h1"}).encode()
    if await call(app, "POST", "/v1/agents", token, register, b"") != 201:
        raise RuntimeError("registration failed")
    agent = "/v1/agents/a-1"
    n, repeats = args.requests, args.repeats
    bare = await cpu_us_per_request(
        bare_app(), "GET", f"{agent}/commands", token, b"", b"wait=0", n, repeats
    )
    print(json.dumps({"route": "bare starlette", "cpu_us_per_request": round(bare, 1)}))
    routes = {
        "poll": ("POST", f"{agent}/poll", b"{}", b"wait=0"),
        "commands": ("GET", f"{agent}/commands", b"", b"wait=0"),
        "heartbeat": ("POST", f"{agent}/heartbeat", b"{}", b""),
    }
    for name, (method, path, body, query) in routes.items():
        cost = await cpu_us_per_request(app, method, path, token, body, query, n, repeats)
        answer = {"route": name, "cpu_us_per_request": round(cost, 1)}
        print(json.dumps(answer | {"ratio_to_bare": round(cost / bare, 2)}))
    await inbox.put({"type": "lifespan.shutdown"})
    await running
    print(json.dumps({"load1_at_end": os.getloadavg()[0]}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per route (median kept)")
    asyncio.run(main(parser.parse_args()))
