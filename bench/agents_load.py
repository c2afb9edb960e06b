"""Load benchmark of ``interstice serve``: N simulated node agents on the loopback interface.

Starts ``interstice serve`` on a fresh SQLite file (a subprocess, bench/served.py),
registers N agents (one small connection pool each, :class:`AgentClient`, split over
``--client-processes`` processes, the scheduler and the measurement in this one), each
long-polling for commands with its heartbeat in the poll (protocol version 3: a request per
``--heartbeat-s`` at most while idle; ``--separate-heartbeats``: version 2, a heartbeat
every ``--heartbeat-s`` apart from 30 s long-polls), and submits jobs that fill the nodes.
Once 90 % of the nodes run and none has started for ``--settle-s`` (at most ``--warmup-s``:
the ramp-up is not measured), for ``--duration-s`` a scheduler reclaims ``--reclaims-per-s``
held nodes per second (``busy`` events, the direct path that never waits for the solver) and
gives each back ``--idle-after-s`` later (``idle`` events, which go through the debounced
solve). It prints JSON lines:

- ``{"phase": "register" | "warmup", ...}`` as phases end;
- one summary: ``agents``, ``requests``, ``requests_per_s``, ``errors``, and the command
  latency (event posted -> the node's agent receives its command) ``reclaim_p50_s`` /
  ``reclaim_p99_s`` (``stop`` after ``busy``) and ``allocation_p50_s`` /
  ``allocation_p99_s`` (``start`` after ``idle``: debounce + solve included), and
  ``event_post_p50_s`` / ``event_post_p99_s`` (the scheduler's ``POST /v1/nodes/events``
  answered: the write path alone), ``event_post_served_p99_le_s`` (the same POST timed
  inside the service, from its ``interstice_request_seconds`` histogram: the upper bound of
  the bucket that holds its p99), ``server_cpu_share``: the service's CPU seconds (its
  process and its solver process) over the phase's wall seconds (1.0 = one core busy), of
  which ``server_main_cpu_share`` the service process's (event loop, writes) and
  ``solver_cpu_share`` its solver process's (None when it solves in a thread,
  ``INTERSTICE_SOLVER_PROCESS=false``), ``solves_measured`` and ``solve_mean_s`` (the solves
  of the phase and their mean ``solve_time_s``, seconds), ``client_cpu_share`` (this load
  generator's, all its processes), ``client_gc_pause_max_s`` (the longest garbage
  collection of a process of simulated agents: it stops all of them at once;
  ``--client-gc-freeze-s``), ``client_loop_lag_p99_s`` / ``client_loop_lag_max_s`` (how
  late those processes' event loops woke from a 10 ms sleep: a command that reaches a busy
  loop is seen that much later), with the machine's ``load1_at_end``, and from the service's
  /metrics its ``solves``, ``solve_s_sum``, ``solver_status`` and ``agents_lost`` (each time
  it marked an agent lost since it started, registration included: all false, as every
  simulated agent keeps polling).

Real agents are separate processes on separate nodes; here they share this machine with the
service, so the latencies include the simulated agents' own event-loop lag
(``client_loop_lag_*``) and the scheduler's POST its own wait for the service's event loop
(``event_post_p99_s`` against ``event_post_served_p99_le_s``). ``--client-processes`` splits
the agents over more event loops; on 2 cores that starves the service, since two processes
take more of a core together than one does.

``--slow-solver FACTOR`` makes every solve take FACTOR times as long (bench/slow_serve.py:
the solver computes on after each solve, a stand-in for a slower host or a busier problem;
for benchmarks only, the service has no such setting): the reclaim latency should not follow.

Bounded: at most 20,000 agents, and the whole run ends after ``--max-run-s``: then it prints
``{"phase": "timed out", ...}`` (how far it got) and ``{"finished": false}`` and exits 1.

Usage: ``python bench/agents_load.py --agents 5000 --duration-s 60``; with
``BENCH_DUMP_METRICS=FILE`` the service's /metrics at the end of the run is written to FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import multiprocessing.synchronize
import os
import random
import re
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import httpcore
import httpx
import numpy as np
import psutil
from interstice.api.collector import freezing_every
from served import served

MAX_AGENTS = 20000
REGISTERING = 50
"""Most registrations in flight at once, over all processes."""
LAG_PROBE_S = 0.01
"""The event-loop lag probe's sleep, seconds."""
TICK_S = 0.5
"""How often each process of agents reports its request and error counts, seconds."""
SOLVE_SUMS = ("solves", "solve_s_sum")
"""The :func:`metrics_summary` fields of the solves' count and total time."""


HEADERS = [
    (b"Accept", b"*/*"),
    (b"Accept-Encoding", b"gzip, deflate"),
    (b"Connection", b"keep-alive"),
    (b"User-Agent", f"python-httpx/{httpx.__version__}".encode()),
]
"""The headers httpx sends on every request (host and body headers aside): the service reads
the same request from an :class:`AgentClient` as from the real agent's httpx client."""
TIMEOUTS = {"connect": 90.0, "read": 90.0, "write": 90.0, "pool": 90.0}
"""An :class:`AgentClient` request's timeouts, seconds (httpcore's ``timeout`` extension)."""
JSON_BODY = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""A request body as httpx writes it."""


@dataclass(frozen=True)
class Answer:
    """An HTTP answer as :func:`request` reads it (httpx.Response's names)."""

    status_code: int
    content: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> object:
        return json.loads(self.content)


class AgentClient:
    """A simulated agent's HTTP client: httpcore's connection pool (httpx's own transport) with
    httpx's headers, without httpx's request and response models, which cost the load
    generator over half again as much CPU a request: at 10,000 agents they keep the
    simulated agents' one event loop busy enough to wake late, and every latency includes
    that lag.

    Args:
        url: the service's base URL.
        token: the agent's bearer token.
    """

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.headers = [*HEADERS, (b"Authorization", f"Bearer {token}".encode())]
        self.pool = httpcore.AsyncConnectionPool(max_connections=2, max_keepalive_connections=2)

    async def request(
        self, method: str, path: str, json: object = None, params: dict | None = None
    ) -> Answer:
        """``method`` ``path`` with a JSON body and query parameters, a 90 s timeout.

        Raises:
            httpx.TransportError: the connection failed or timed out.
        """
        url = self.url + path + ("?" + urlencode(params) if params else "")
        headers = self.headers
        body = b""
        if json is not None:
            body = JSON_BODY(json).encode()
            headers = [*headers, (b"Content-Type", b"application/json")]
        try:
            response = await self.pool.request(
                method, url, headers=headers, content=body, extensions={"timeout": TIMEOUTS}
            )
        except (httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError) as exc:
            raise httpx.TransportError(f"{type(exc).__name__} {exc}") from exc
        return Answer(response.status, response.content)

    async def aclose(self) -> None:
        await self.pool.aclose()


@dataclass
class Counts:
    """One process's requests and errors."""

    requests: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(what)


async def request(
    client: httpx.AsyncClient | AgentClient, counts: Counts, method: str, url: str, **kwargs: object
) -> httpx.Response | Answer | None:
    """One request, counted; an exception or a non-2xx answer counts as an error."""
    counts.requests += 1
    try:
        response = await client.request(method, url, **kwargs)  # type: ignore[arg-type]
    except httpx.HTTPError as exc:
        counts.error(f"{method} {url}: {type(exc).__name__} {exc}")
        return None
    if not response.is_success:
        counts.error(f"{method} {url}: {response.status_code} {response.text[:200]}")
    return response


# --- the simulated agents (in their own processes) ---


async def agent_loop(
    client: AgentClient,
    counts: Counts,
    agent_id: str,
    node: str,
    stop: asyncio.Event,
    beat_in_poll_s: float | None,
    seen: multiprocessing.Queue,
) -> None:
    """Long-poll; put ``(kind, node, time.monotonic())`` on ``seen`` for each ``start`` and
    ``stop`` as it arrives; ack. With ``beat_in_poll_s`` each poll carries the heartbeat
    (protocol version 3) and waits at most that long; else it waits 30 s and
    :func:`heartbeat_loop` beats apart (version 2)."""
    while not stop.is_set():
        if beat_in_poll_s is None:
            r = await request(
                client, counts, "GET", f"/v1/agents/{agent_id}/commands", params={"wait": 30}
            )
        else:
            params = {"wait": beat_in_poll_s}
            r = await request(
                client, counts, "POST", f"/v1/agents/{agent_id}/poll", json={}, params=params
            )
        if r is None or not r.is_success:
            await asyncio.sleep(1)
            continue
        now = time.monotonic()
        for command in r.json()["data"]:
            if command["kind"] in ("start", "stop"):
                seen.put((command["kind"], node, now))
            await request(
                client,
                counts,
                "POST",
                f"/v1/agents/{agent_id}/commands/{command['command_id']}/ack",
                json={"ok": True},
            )


async def heartbeat_loop(
    client: AgentClient, counts: Counts, agent_id: str, period_s: float, stop: asyncio.Event
) -> None:
    """Heartbeat every ``period_s``, starting at a random phase."""
    await asyncio.sleep(random.uniform(0, period_s))
    while not stop.is_set():
        await request(client, counts, "POST", f"/v1/agents/{agent_id}/heartbeat", json={})
        await asyncio.sleep(period_s)


class PauseClock:
    """The longest pause of this process's garbage collector since :meth:`reset`, seconds
    (``gc.callbacks``): it stops every simulated agent of the process at once, so it is in
    every latency."""

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


def agents_process(
    args: argparse.Namespace,
    url: str,
    shard: int,
    nodes: list[int],
    out: multiprocessing.Queue,
    measuring: multiprocessing.synchronize.Event,
    done: multiprocessing.synchronize.Event,
) -> None:
    """A process of simulated agents, one per node number in ``nodes``, until ``done`` is
    set. Puts on ``out``: ``("registered", shard, agents, seconds)`` once its agents are
    registered, ``("tick", shard, requests, errors)`` every :data:`TICK_S`, each command
    seen (:func:`agent_loop`), and at the end ``("done", shard, requests, errors,
    error_samples, gc_pause_max_s, loop lags)``: the pause and the lags (seconds, one per
    probe) since ``measuring`` was set."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process ends the run
    asyncio.run(_agents(args, url, shard, nodes, out, measuring, done))


async def _agents(
    args: argparse.Namespace,
    url: str,
    shard: int,
    nodes: list[int],
    out: multiprocessing.Queue,
    measuring: multiprocessing.synchronize.Event,
    done: multiprocessing.synchronize.Event,
) -> None:
    async with freezing_every(args.client_gc_freeze_s):
        counts, pauses, lags = Counts(), PauseClock(), []
        stop = asyncio.Event()
        # one small pool per agent, as on real nodes: a pool scans its connections on every
        # request, so one shared pool of thousands of connections costs O(agents) each
        clients = [AgentClient(url, args.tokens["agent"]) for _ in nodes]
        gate = asyncio.Semaphore(max(1, REGISTERING // args.client_processes))
        beat_in_poll_s = None if args.separate_heartbeats else args.heartbeat_s
        tasks: list[asyncio.Task] = []

        async def register(own: AgentClient, i: int) -> bool:
            """Register agent ``i`` and start its loops at once, as a real agent does (the
            others still registering: at 10,000 agents that takes longer than a lease)."""
            node = f"node{i:05d}"
            async with gate:
                r = await request(
                    own,
                    counts,
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
                return False
            agent_id = r.json()["agent_id"]
            loop = agent_loop(own, counts, agent_id, node, stop, beat_in_poll_s, out)
            tasks.append(asyncio.create_task(loop))
            if args.separate_heartbeats:
                beat = heartbeat_loop(own, counts, agent_id, args.heartbeat_s, stop)
                tasks.append(asyncio.create_task(beat))
            return True

        async def probe_lag() -> None:
            while True:
                slept = time.perf_counter()
                await asyncio.sleep(LAG_PROBE_S)
                if measuring.is_set():
                    if not lags:
                        pauses.reset()
                    lags.append(time.perf_counter() - slept - LAG_PROBE_S)

        tasks.append(asyncio.create_task(probe_lag()))
        try:
            began = time.perf_counter()
            pairs = zip(clients, nodes, strict=True)
            registered = await asyncio.gather(*(register(c, i) for c, i in pairs))
            seconds = time.perf_counter() - began
            out.put(("registered", shard, sum(registered), seconds))
            while not done.is_set():
                out.put(("tick", shard, counts.requests, counts.errors))
                await asyncio.sleep(TICK_S)
        finally:
            # the agents' loops end before their clients close, or they fail on a closed client
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for own in clients:
                await own.aclose()
        summary = (counts.requests, counts.errors, counts.error_samples, pauses.longest_s, lags)
        out.put(("done", shard, *summary))


# --- the scheduler and the measurement (the main process) ---


@dataclass
class Stats:
    """What the main process knows of the run: its own requests, the processes' counts, the
    held nodes, and the command latencies."""

    own: Counts = field(default_factory=Counts)
    processes: dict[int, tuple[int, int]] = field(default_factory=dict)
    registered: dict[int, tuple[int, float]] = field(default_factory=dict)
    finals: dict[int, tuple] = field(default_factory=dict)
    reclaim_s: list[float] = field(default_factory=list)
    allocation_s: list[float] = field(default_factory=list)
    event_post_s: list[float] = field(default_factory=list)
    last_start_at: float = 0.0
    started_nodes: set[str] = field(default_factory=set)
    busy_at: dict[str, float] = field(default_factory=dict)
    idle_at: dict[str, float] = field(default_factory=dict)
    measured: dict[str, object] = field(default_factory=dict)

    def requests(self) -> int:
        return self.own.requests + sum(r for r, _ in self.processes.values())

    def errors(self) -> int:
        return self.own.errors + sum(e for _, e in self.processes.values())

    def take(self, message: tuple) -> None:
        """Apply a message of a process of agents (:func:`agents_process`)."""
        kind, key, *rest = message
        if kind == "registered":
            self.registered[key] = (rest[0], rest[1])
        elif kind == "tick":
            self.processes[key] = (rest[0], rest[1])
        elif kind == "done":
            self.processes[key] = (rest[0], rest[1])
            self.finals[key] = tuple(rest)
        elif kind == "start":
            self.started_nodes.add(key)
            self.last_start_at = rest[0]
            if key in self.idle_at:
                self.allocation_s.append(rest[0] - self.idle_at.pop(key))
        elif kind == "stop":
            if key in self.busy_at:
                self.reclaim_s.append(rest[0] - self.busy_at.pop(key))
            else:
                self.started_nodes.discard(key)


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
            posted = time.monotonic()
            for node in chosen:
                stats.busy_at[node] = posted
                stats.started_nodes.discard(node)
            for node in due:
                stats.idle_at[node] = posted
            await request(
                client,
                stats.own,
                "POST",
                "/v1/nodes/events",
                json={"events": events},
                headers={"Authorization": f"Bearer {args.tokens['scheduler']}"},
            )
            stats.event_post_s.append(time.monotonic() - posted)
            returning += [(tick + args.idle_after_s, n) for n in chosen]
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))


def metrics_summary(metrics_text: str) -> dict[str, object]:
    """From the service's /metrics: solve count, total solve time, statuses, the agents it
    marked lost over its lifetime (registration and warm-up included), and the bucket bound
    of its own p99 of ``POST /v1/nodes/events`` (posted only in the measured phase)."""
    summary: dict[str, object] = {"solver_status": {}}
    buckets: list[tuple[float, float]] = []
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
        elif line.startswith("interstice_request_seconds_bucket{") and (
            'route="/v1/nodes/events"' in line and 'status="200"' in line
        ):
            bound = re.search(r'le="([^"]+)"', line)
            buckets.append((float(bound.group(1)), float(line.split()[-1])))  # type: ignore[union-attr]
    if buckets:
        total = max(count for _, count in buckets)
        summary["event_post_served_p99_le_s"] = min(
            bound for bound, count in buckets if count >= 0.99 * total
        )
    return summary


def quantiles(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of the processes ``pids`` so far."""
    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)


def solver_pids(server_pid: int) -> list[int]:
    """The service's solver process (its ``spawn`` child), or [] when it solves in a thread."""
    found = []
    for child in psutil.Process(server_pid).children():
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                found.append(child.pid)
        except psutil.Error:  # ended meanwhile
            pass
    return found


def solve_mean(before: dict[str, object], after: dict[str, object]) -> dict[str, object]:
    """The solves between two :func:`metrics_summary` and their mean time, seconds."""
    count, seconds = (float(after.get(k, 0)) - float(before.get(k, 0)) for k in SOLVE_SUMS)  # type: ignore[arg-type]
    mean = round(seconds / count, 4) if count else None
    return {"solves_measured": int(count), "solve_mean_s": mean}


async def run(args: argparse.Namespace, url: str) -> None:
    """Start the processes of agents, run :func:`simulate`, and end them (in every case)."""
    spawn = multiprocessing.get_context("spawn")
    out, measuring, done = spawn.Queue(), spawn.Event(), spawn.Event()
    stats = Stats()
    loop = asyncio.get_running_loop()

    def drain() -> None:  # the processes' messages, in order, onto the event loop
        while (message := out.get()) is not None:
            loop.call_soon_threadsafe(stats.take, message)

    reader = threading.Thread(target=drain, name="messages", daemon=True)
    reader.start()
    processes = [
        spawn.Process(
            target=agents_process,
            args=(args, url, k, list(range(k, args.agents, args.client_processes))),
            kwargs={"out": out, "measuring": measuring, "done": done},
            name=f"agents-{k}",
        )
        for k in range(args.client_processes)
    ]
    for process in processes:
        process.start()
    try:
        await simulate(args, url, stats, [p.pid for p in processes], measuring)
    finally:
        done.set()
        for process in processes:
            await asyncio.to_thread(process.join, 60)
            if process.is_alive():
                process.terminate()
        out.put(None)
        await asyncio.to_thread(reader.join, 10)
        await asyncio.sleep(0)  # the last messages' callbacks
    print(json.dumps(summary(args, stats)), flush=True)


async def simulate(
    args: argparse.Namespace,
    url: str,
    stats: Stats,
    pids: list[int],
    measuring: multiprocessing.synchronize.Event,
) -> None:
    """Register, warm up, measure (the module docstring's phases); leaves the measured
    phase's figures in ``stats.measured``."""
    stop = asyncio.Event()
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(90)) as client:
        try:
            while len(stats.registered) < args.client_processes:
                await asyncio.sleep(0.2)
            agents = sum(n for n, _ in stats.registered.values())
            seconds = max(s for _, s in stats.registered.values())
            registered = {"phase": "register", "agents": agents, "seconds": round(seconds, 2)}
            print(json.dumps(registered | {"errors": stats.errors()}), flush=True)
            user = {"Authorization": f"Bearer {args.tokens['user']}"}
            for _ in range(max(1, args.agents // 20)):
                await request(
                    client,
                    stats.own,
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
            began = time.monotonic()
            while time.monotonic() - began < args.warmup_s and (
                len(stats.started_nodes) < 0.9 * agents
                or time.monotonic() - stats.last_start_at < args.settle_s
            ):
                await asyncio.sleep(0.5)
            warmed = {"phase": "warmup", "nodes_running": len(stats.started_nodes)}
            warmed |= {"seconds": round(time.monotonic() - began, 2), "errors": stats.errors()}
            print(json.dumps(warmed), flush=True)
            requests_before, errors_before = stats.requests(), stats.errors()
            metrics_before = metrics_summary((await client.get("/metrics")).text)
            solver = solver_pids(args.server_pid)
            server_cpu_before = cpu_seconds([args.server_pid])
            solver_cpu_before = cpu_seconds(solver)
            client_cpu_before = cpu_seconds([os.getpid(), *pids])
            measuring.set()
            began = time.monotonic()
            await scheduler(client, stats, args, stop)
            await asyncio.sleep(args.idle_after_s + 2)  # let the last events' commands arrive
            elapsed = time.monotonic() - began
            metrics_text = (await client.get("/metrics")).text
            if os.environ.get("BENCH_DUMP_METRICS"):
                Path(os.environ["BENCH_DUMP_METRICS"]).write_text(metrics_text)
            server_cpu = cpu_seconds([args.server_pid]) - server_cpu_before
            solver_cpu = None  # also when a solver process was started anew in the phase
            if solver and solver == solver_pids(args.server_pid):
                solver_cpu = cpu_seconds(solver) - solver_cpu_before
            stats.measured = {
                "agents": agents,
                "duration_s": round(elapsed, 1),
                "requests": stats.requests() - requests_before,
                "requests_per_s": round((stats.requests() - requests_before) / elapsed, 1),
                "errors": stats.errors() - errors_before,
                "server_cpu_share": round((server_cpu + (solver_cpu or 0)) / elapsed, 2),
                "server_main_cpu_share": round(server_cpu / elapsed, 2),
                "solver_cpu_share": None if solver_cpu is None else round(solver_cpu / elapsed, 2),
                "slow_solver": args.slow_solver,
                "client_cpu_share": round(
                    (cpu_seconds([os.getpid(), *pids]) - client_cpu_before) / elapsed, 2
                ),
                "load1_at_end": os.getloadavg()[0],
            } | metrics_summary(metrics_text)
            stats.measured |= solve_mean(metrics_before, stats.measured)
        except asyncio.CancelledError:  # --max-run-s ran out: say how far the run got
            agents = sum(n for n, _ in stats.registered.values())
            timed_out = {"phase": "timed out", "agents": agents}
            timed_out |= {"nodes_running": len(stats.started_nodes), "requests": stats.requests()}
            print(json.dumps(timed_out | {"errors": stats.errors()}), flush=True)
            raise


def summary(args: argparse.Namespace, stats: Stats) -> dict[str, object]:
    """The run's summary line (the module docstring's fields)."""
    reclaim = quantiles(stats.reclaim_s)
    allocation = quantiles(stats.allocation_s)
    event_post = quantiles(stats.event_post_s)
    finals = list(stats.finals.values())
    lags = [lag for final in finals for lag in final[4]]
    return stats.measured | {
        "client_processes": args.client_processes,
        "errors_total": stats.errors(),
        "error_samples": stats.own.error_samples + [s for f in finals for s in f[2]][:5],
        "reclaims": len(stats.reclaim_s),
        "reclaim_p50_s": reclaim[0],
        "reclaim_p99_s": reclaim[1],
        "allocations": len(stats.allocation_s),
        "allocation_p50_s": allocation[0],
        "allocation_p99_s": allocation[1],
        "unanswered_reclaims": len(stats.busy_at),
        "event_post_p50_s": event_post[0],
        "event_post_p99_s": event_post[1],
        "client_gc_pause_max_s": round(max((f[3] for f in finals), default=0.0), 3),
        "client_loop_lag_p99_s": round(quantiles(lags)[1] or 0.0, 3),
        "client_loop_lag_max_s": round(max(lags, default=0.0), 3),
    }


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
        "--slow-solver",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="every solve takes FACTOR (>= 1) times as long (bench/slow_serve.py; benchmarks only)",
    )
    parser.add_argument(
        "--client-processes",
        type=int,
        default=1,
        help="processes the simulated agents are split over (on 2 cores, 2 starve the "
        "service: they take more CPU together than one event loop does)",
    )
    parser.add_argument(
        "--separate-heartbeats",
        action="store_true",
        help="agents of protocol version 2: a heartbeat request apart from each long-poll",
    )
    parser.add_argument(
        "--client-gc-freeze-s",
        type=float,
        default=1.0,
        help="the agent processes' garbage-collection regime, as the service's "
        "gc_freeze_interval_s (0: CPython's own): real agents are separate processes, "
        "whose collections do not stop each other",
    )
    args = parser.parse_args()
    if not 1 <= args.agents <= MAX_AGENTS:
        parser.error(f"--agents must be in 1..{MAX_AGENTS}")
    if not args.slow_solver >= 1:
        parser.error("--slow-solver must be >= 1")
    if not 1 <= args.client_processes <= min(args.agents, os.cpu_count() or 1, 16):
        parser.error("--client-processes must be in 1..min(agents, CPU cores, 16)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the server is stopped too
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, 4 * args.agents + 1000))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))  # the server inherits it

    try:
        with served(args.heartbeat_s, slow_solver=args.slow_solver) as service:
            args.tokens, args.server_pid = service.tokens, service.pid
            asyncio.run(asyncio.wait_for(run(args, service.url), timeout=args.max_run_s))
    except TimeoutError:
        print(json.dumps({"max_run_s": args.max_run_s, "finished": False}), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
