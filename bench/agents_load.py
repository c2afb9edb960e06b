"""Load benchmark of ``interstice serve``: N simulated node agents on the loopback interface.

Starts ``interstice serve`` on a fresh SQLite file (a subprocess, bench/served.py),
registers N agents (async httpx clients), each long-polling for commands with its heartbeat in
the poll (protocol version 3: a request per ``--heartbeat-s`` at most while idle;
``--separate-heartbeats``: version 2, a heartbeat every ``--heartbeat-s`` apart from 30 s
long-polls), and submits jobs that fill the nodes. Once 90 % of the nodes run and none has
started for ``--settle-s`` (at most ``--warmup-s``: the ramp-up is not measured), for
``--duration-s`` a scheduler reclaims ``--reclaims-per-s`` held nodes per second (``busy``
events, the direct path that never waits for the solver) and gives each back
``--idle-after-s`` later (``idle`` events, which go through the debounced solve). It prints
JSON lines:

- ``{"phase": "register" | "warmup", ...}`` as phases end;
- one summary: ``agents``, ``requests``, ``requests_per_s``, ``errors``, and the command
  latency (event posted -> the node's agent receives its command) ``reclaim_p50_s`` /
  ``reclaim_p99_s`` (``stop`` after ``busy``) and ``allocation_p50_s`` /
  ``allocation_p99_s`` (``start`` after ``idle``: debounce + solve included), and
  ``event_post_p50_s`` / ``event_post_p99_s`` (the scheduler's ``POST /v1/nodes/events``
  answered: the write path alone), ``server_cpu_share``: the service process's CPU seconds
  over the phase's wall seconds (1.0 = one core busy), ``client_cpu_share`` (this load
  generator's), ``client_gc_pause_max_s`` (this process's longest garbage collection: it
  stops every simulated agent at once; ``--client-gc-freeze-s``), with the machine's
  ``load1_at_end``, and from the service's /metrics its ``solves``, ``solve_s_sum``,
  ``solver_status`` and ``agents_lost`` (each time it marked an agent lost since it started,
  registration included: all false, as every simulated agent keeps polling).

Bounded: at most 20,000 agents, and the whole run ends after ``--max-run-s``: then it prints
``{"phase": "timed out", ...}`` (how far it got) and ``{"finished": false}`` and exits 1. Client and
server share the machine, so the latencies include the client's own event-loop lag.

Usage: ``python bench/agents_load.py --agents 5000 --duration-s 60``; with
``BENCH_DUMP_METRICS=FILE`` the service's /metrics at the end of the run is written to FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import resource
import signal
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import psutil
from interstice.api.collector import freezing_every
from served import served

MAX_AGENTS = 20000


@dataclass
class Stats:
    """Counters and latencies of the run."""

    requests: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    reclaim_s: list[float] = field(default_factory=list)
    allocation_s: list[float] = field(default_factory=list)
    event_post_s: list[float] = field(default_factory=list)
    last_start_at: float = 0.0
    started_nodes: set[str] = field(default_factory=set)
    busy_at: dict[str, float] = field(default_factory=dict)
    idle_at: dict[str, float] = field(default_factory=dict)

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(what)


async def request(
    client: httpx.AsyncClient, stats: Stats, method: str, url: str, **kwargs: object
) -> httpx.Response | None:
    """One request, counted; an exception or a non-2xx answer counts as an error."""
    stats.requests += 1
    try:
        response = await client.request(method, url, **kwargs)  # type: ignore[arg-type]
    except httpx.HTTPError as exc:
        stats.error(f"{method} {url}: {type(exc).__name__} {exc}")
        return None
    if not response.is_success:
        stats.error(f"{method} {url}: {response.status_code} {response.text[:200]}")
    return response


async def agent_loop(
    client: httpx.AsyncClient,
    stats: Stats,
    agent_id: str,
    node: str,
    stop: asyncio.Event,
    beat_in_poll_s: float | None,
) -> None:
    """Long-poll, record the latency of commands that answer a scheduler event, ack. With
    ``beat_in_poll_s`` each poll carries the heartbeat (protocol version 3) and waits at
    most that long; else it waits 30 s and :func:`heartbeat_loop` beats apart (version 2)."""
    while not stop.is_set():
        if beat_in_poll_s is None:
            r = await request(
                client, stats, "GET", f"/v1/agents/{agent_id}/commands", params={"wait": 30}
            )
        else:
            params = {"wait": beat_in_poll_s}
            r = await request(
                client, stats, "POST", f"/v1/agents/{agent_id}/poll", json={}, params=params
            )
        if r is None or not r.is_success:
            await asyncio.sleep(1)
            continue
        now = time.perf_counter()
        for command in r.json()["data"]:
            if command["kind"] == "stop" and node in stats.busy_at:
                stats.reclaim_s.append(now - stats.busy_at.pop(node))
            elif command["kind"] == "start":
                stats.started_nodes.add(node)
                stats.last_start_at = now
                if node in stats.idle_at:
                    stats.allocation_s.append(now - stats.idle_at.pop(node))
            elif command["kind"] == "stop":
                stats.started_nodes.discard(node)
            await request(
                client,
                stats,
                "POST",
                f"/v1/agents/{agent_id}/commands/{command['command_id']}/ack",
                json={"ok": True},
            )


async def heartbeat_loop(
    client: httpx.AsyncClient, stats: Stats, agent_id: str, period_s: float, stop: asyncio.Event
) -> None:
    """Heartbeat every ``period_s``, starting at a random phase."""
    await asyncio.sleep(random.uniform(0, period_s))
    while not stop.is_set():
        await request(client, stats, "POST", f"/v1/agents/{agent_id}/heartbeat", json={})
        await asyncio.sleep(period_s)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def scheduler(
    client: httpx.AsyncClient, stats: Stats, args: argparse.Namespace, stop: asyncio.Event
) -> None:
    """Reclaim ``reclaims_per_s`` held nodes per second; give each back ``idle_after_s`` later."""
    sequence = 0
    end = time.monotonic() + args.duration_s
    returning: list[tuple[float, str]] = []
    while time.monotonic() < end and not stop.is_set():
        tick = time.monotonic()
        held = sorted(stats.started_nodes - set(stats.busy_at))
        chosen = random.sample(held, min(args.reclaims_per_s, len(held)))
        events = []
        for node in chosen:
            sequence += 1
            events.append(
                {
                    "event_id": f"b{sequence}",
                    "node": node,
                    "state": "busy",
                    "at": now_iso(),
                    "grace_s": 30,
                }
            )
        due = [n for t, n in returning if t <= tick]
        returning = [(t, n) for t, n in returning if t > tick]
        for node in due:
            sequence += 1
            events.append(
                {
                    "event_id": f"i{sequence}",
                    "node": node,
                    "state": "idle",
                    "at": now_iso(),
                    "grace_s": 0,
                }
            )
        if events:
            posted = time.perf_counter()
            for node in chosen:
                stats.busy_at[node] = posted
                stats.started_nodes.discard(node)
            for node in due:
                stats.idle_at[node] = posted
            await request(
                client,
                stats,
                "POST",
                "/v1/nodes/events",
                json={"events": events},
                headers={"Authorization": f"Bearer {args.tokens['scheduler']}"},
            )
            stats.event_post_s.append(time.perf_counter() - posted)
            returning += [(tick + args.idle_after_s, n) for n in chosen]
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))


def metrics_summary(metrics_text: str) -> dict[str, object]:
    """From the service's /metrics: solve count, total solve time, statuses, and the agents
    it marked lost over its lifetime (registration and warm-up included)."""
    summary: dict[str, object] = {"solver_status": {}}
    for line in metrics_text.splitlines():
        if line.startswith("interstice_agents_lost_total "):
            summary["agents_lost"] = float(line.split()[-1])
        elif line.startswith("interstice_solve_seconds_count"):
            summary["solves"] = float(line.split()[-1])
        elif line.startswith("interstice_solve_seconds_sum"):
            summary["solve_s_sum"] = float(line.split()[-1])
        elif line.startswith("interstice_solver_status_total{"):
            status = line.split('"')[1]
            summary["solver_status"][status] = float(line.split()[-1])  # type: ignore[index]
    return summary


def quantiles(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


class PauseClock:
    """The longest pause of this process's garbage collector since :meth:`reset`, seconds
    (``gc.callbacks``): it stops every simulated agent at once, so it is in every latency."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self._started = 0.0
        gc.callbacks.append(self._observe)

    def _observe(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.longest_s = max(self.longest_s, time.perf_counter() - self._started)

    def reset(self) -> None:
        self.longest_s = 0.0


async def run(args: argparse.Namespace, url: str) -> None:
    async with freezing_every(args.client_gc_freeze_s):
        await simulate(args, url)


async def simulate(args: argparse.Namespace, url: str) -> None:
    stats = Stats()
    pauses = PauseClock()
    stop = asyncio.Event()
    agent_auth = {"Authorization": f"Bearer {args.tokens['agent']}"}
    tls = ssl.create_default_context()  # shared: building one per client costs ~0.2 s each
    # one small client per agent, as on real nodes: httpx's pool scans its connections on
    # every request, so one shared pool of thousands of connections costs O(agents) each
    clients = [
        httpx.AsyncClient(
            base_url=url,
            limits=httpx.Limits(max_connections=2, max_keepalive_connections=2),
            timeout=httpx.Timeout(90),
            headers=agent_auth,
            verify=tls,
        )
        for _ in range(args.agents)
    ]
    client = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(90))
    tasks: list[asyncio.Task] = []
    agents: list[tuple[httpx.AsyncClient, str, str]] = []
    try:
        began = time.perf_counter()
        gate = asyncio.Semaphore(50)

        beat_in_poll_s = None if args.separate_heartbeats else args.heartbeat_s

        async def register(i: int) -> tuple[httpx.AsyncClient, str, str] | None:
            """Register agent ``i`` and start its loops at once, as a real agent does (the
            others still registering: at 10,000 agents that takes longer than a lease)."""
            node = f"node{i:05d}"
            own = clients[i]
            async with gate:
                r = await request(
                    own,
                    stats,
                    "POST",
                    "/v1/agents",
                    json={
                        "node": node,
                        "host": "127.0.0.1",
                        "ports": [29500 + i % 1000],
                        "report_idle": True,
                    },
                )
            if r is None or not r.is_success:
                return None
            agent_id = r.json()["agent_id"]
            tasks.append(
                asyncio.create_task(agent_loop(own, stats, agent_id, node, stop, beat_in_poll_s))
            )
            if args.separate_heartbeats:
                tasks.append(
                    asyncio.create_task(
                        heartbeat_loop(own, stats, agent_id, args.heartbeat_s, stop)
                    )
                )
            return own, agent_id, node

        agents = [a for a in await asyncio.gather(*(register(i) for i in range(args.agents))) if a]
        print(
            json.dumps(
                {
                    "phase": "register",
                    "agents": len(agents),
                    "seconds": round(time.perf_counter() - began, 2),
                    "errors": stats.errors,
                }
            ),
            flush=True,
        )
        user = {"Authorization": f"Bearer {args.tokens['user']}"}
        for _ in range(max(1, args.agents // 20)):
            await request(
                client,
                stats,
                "POST",
                "/v1/jobs",
                headers=user,
                json={
                    "model": "benchnet",
                    "min_nodes": 1,
                    "max_nodes": 32,
                    "total_samples": 10**12,
                },
            )
        began = time.perf_counter()
        while time.perf_counter() - began < args.warmup_s and (
            len(stats.started_nodes) < 0.9 * len(agents)
            or time.perf_counter() - stats.last_start_at < args.settle_s
        ):
            await asyncio.sleep(0.5)
        print(
            json.dumps(
                {
                    "phase": "warmup",
                    "nodes_running": len(stats.started_nodes),
                    "seconds": round(time.perf_counter() - began, 2),
                    "errors": stats.errors,
                }
            ),
            flush=True,
        )
        requests_before, errors_before = stats.requests, stats.errors
        server = psutil.Process(args.server_pid)
        cpu_before = sum(server.cpu_times()[:2])
        own_cpu_before = sum(psutil.Process().cpu_times()[:2])
        pauses.reset()
        began = time.perf_counter()
        await scheduler(client, stats, args, stop)
        await asyncio.sleep(args.idle_after_s + 2)  # let the last events' commands arrive
        elapsed = time.perf_counter() - began
        server_cpu_share = (sum(server.cpu_times()[:2]) - cpu_before) / elapsed
        client_cpu_share = (sum(psutil.Process().cpu_times()[:2]) - own_cpu_before) / elapsed
        metrics_text = (await client.get("/metrics")).text
        solver = metrics_summary(metrics_text)
        if os.environ.get("BENCH_DUMP_METRICS"):
            Path(os.environ["BENCH_DUMP_METRICS"]).write_text(metrics_text)
    except asyncio.CancelledError:  # --max-run-s ran out: say how far the run got
        timed_out = {"phase": "timed out", "agents": len(agents)}
        timed_out |= {"nodes_running": len(stats.started_nodes), "requests": stats.requests}
        print(json.dumps(timed_out | {"errors": stats.errors}), flush=True)
        raise
    finally:
        # the agents' loops end before their clients close, or they fail on a closed client
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for own in [client, *clients]:
            await own.aclose()
    reclaim = quantiles(stats.reclaim_s)
    allocation = quantiles(stats.allocation_s)
    event_post = quantiles(stats.event_post_s)
    print(
        json.dumps(
            {
                "agents": len(agents),
                "duration_s": round(elapsed, 1),
                "requests": stats.requests - requests_before,
                "requests_per_s": round((stats.requests - requests_before) / elapsed, 1),
                "errors": stats.errors - errors_before,
                "errors_total": stats.errors,
                "error_samples": stats.error_samples,
                "reclaims": len(stats.reclaim_s),
                "reclaim_p50_s": reclaim[0],
                "reclaim_p99_s": reclaim[1],
                "allocations": len(stats.allocation_s),
                "allocation_p50_s": allocation[0],
                "allocation_p99_s": allocation[1],
                "unanswered_reclaims": len(stats.busy_at),
                "event_post_p50_s": event_post[0],
                "event_post_p99_s": event_post[1],
                "server_cpu_share": round(server_cpu_share, 2),
                "client_cpu_share": round(client_cpu_share, 2),
                "client_gc_pause_max_s": round(pauses.longest_s, 3),
                "load1_at_end": os.getloadavg()[0],
            }
            | solver
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=5000)
    parser.add_argument("--duration-s", type=float, default=60)
    parser.add_argument("--heartbeat-s", type=float, default=10)
    parser.add_argument("--reclaims-per-s", type=int, default=2)
    parser.add_argument("--idle-after-s", type=float, default=5)
    parser.add_argument("--warmup-s", type=float, default=120)
    parser.add_argument("--settle-s", type=float, default=10)
    parser.add_argument("--max-run-s", type=float, default=600)
    parser.add_argument(
        "--separate-heartbeats",
        action="store_true",
        help="agents of protocol version 2: a heartbeat request apart from each long-poll",
    )
    parser.add_argument(
        "--client-gc-freeze-s",
        type=float,
        default=1.0,
        help="this process's garbage-collection regime, as the service's "
        "gc_freeze_interval_s (0: CPython's own): real agents are separate processes, "
        "whose collections do not stop each other",
    )
    args = parser.parse_args()
    if not 1 <= args.agents <= MAX_AGENTS:
        parser.error(f"--agents must be in 1..{MAX_AGENTS}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the server is stopped too
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, 4 * args.agents + 1000))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))  # the server inherits it

    try:
        with served(args.heartbeat_s) as service:
            args.tokens, args.server_pid = service.tokens, service.pid
            asyncio.run(asyncio.wait_for(run(args, service.url), timeout=args.max_run_s))
    except TimeoutError:
        print(json.dumps({"max_run_s": args.max_run_s, "finished": False}), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
