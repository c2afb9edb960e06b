"""Benchmark of node-event ingest: a large batch to ``POST /v1/nodes/events`` on SQLite,
and a reclaim posted while it is being written.

Starts ``interstice serve`` on a fresh SQLite file (bench/served.py), registers two agents
(nodes ``r1``, ``r2``; each long-polls and acks in a thread) and gives them a job of exactly
two nodes (a reclaim of ``r1`` stops it on both). Then, ``--repeats`` times: posts a batch of
``--events`` events (one per node, other nodes than ``r1``/``r2``; all idle, then all busy
the next time, an hour later by their ``at``) and, ``--reclaim-after-s`` into it, a single
``busy`` event for ``r1`` (a reclaim), then gives ``r1`` back (``idle``: the job regrows).
Last, the baseline: ``--singles`` events posted one per request, in the same process. Prints
JSON lines:

- ``{"cpus", "load1_at_start"}``, then ``{"load1_at_end"}`` (the machine may be shared:
  compare figures within one run);
- per repeat ``{"repeat", "events", "batch_s", "events_per_s", "reclaim_answer_s",
  "reclaim_stop_s", "stop_before_batch_end"}``: ``reclaim_stop_s`` is from posting the
  reclaim to ``r1``'s agent receiving its ``stop``; ``stop_before_batch_end`` says whether
  the stop came while the batch was still being written;
- ``{"single_events_per_s"}`` (the baseline), then the summary ``{"events_per_s_p50",
  "reclaim_stop_s_max", "speedup_vs_single_requests"}``: the batch's median events/s over
  the single-event requests' events/s.

Usage: ``python bench/ingest.py [--events 10000] [--repeats 3] [--singles 1000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import httpx
from served import Served, served

HOUR = timedelta(hours=1)


class Agent:
    """A simulated agent in a thread: long-polls, acks every command, keeps when each
    kind of command arrived (``time.perf_counter()``)."""

    def __init__(self, service: Served, node: str) -> None:
        self.http = httpx.Client(base_url=service.url, headers=service.auth("agent"), timeout=60)
        answer = self.http.post(
            "/v1/agents", json={"node": node, "host": "127.0.0.1", "report_idle": True}
        )
        answer.raise_for_status()
        self.agent_id = answer.json()["agent_id"]
        self.arrived: list[tuple[str, float]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stopping.is_set():
            commands = self.http.get(f"/v1/agents/{self.agent_id}/commands", params={"wait": 2})
            now = time.perf_counter()
            for command in commands.json()["data"]:
                self.arrived.append((command["kind"], now))
                self.http.post(
                    f"/v1/agents/{self.agent_id}/commands/{command['command_id']}/ack",
                    json={"ok": True},
                )

    def first(self, kind: str, after: float, timeout_s: float = 60.0) -> float:
        """When the first ``kind`` command after ``after`` arrived.

        Raises:
            TimeoutError: none within ``timeout_s``.
        """
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            found = [t for k, t in list(self.arrived) if k == kind and t > after]
            if found:
                return found[0]
            time.sleep(0.005)
        raise TimeoutError(f"no {kind} command for {self.agent_id} within {timeout_s} s")

    def close(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.http.close()


def events(count: int, repeat: int, at: datetime) -> list[dict[str, object]]:
    """``count`` events, one per node (``b0``, ``b1``, ...), all at ``at``: idle in even
    repeats, busy in odd ones."""
    state = ("idle", "busy")[repeat % 2]
    return [
        {"event_id": f"r{repeat}-{i}", "node": f"b{i}", "state": state, "at": at.isoformat()}
        for i in range(count)
    ]


def post(scheduler: httpx.Client, batch: list[dict[str, object]]) -> None:
    """Post ``batch`` as one request; raises unless it answers 200."""
    scheduler.post("/v1/nodes/events", json={"events": batch}).raise_for_status()


def node_event(node: str, state: str, event_id: str) -> dict[str, object]:
    """One event of ``node`` now."""
    return {"event_id": event_id, "node": node, "state": state, "at": datetime.now(UTC).isoformat()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10000, help="events per batch (<= 10000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--singles", type=int, default=1000, help="baseline: one per request")
    parser.add_argument("--reclaim-after-s", type=float, default=0.3)
    args = parser.parse_args()
    print(json.dumps({"cpus": os.cpu_count(), "load1_at_start": os.getloadavg()[0]}), flush=True)
    with served() as service, ThreadPoolExecutor(1) as pool:
        scheduler = httpx.Client(base_url=service.url, headers=service.auth("scheduler"))
        scheduler.timeout = httpx.Timeout(300)
        r1, r2 = Agent(service, "r1"), Agent(service, "r2")
        job = {"model": "benchnet", "min_nodes": 2, "max_nodes": 2, "total_samples": 10**12}
        user = service.auth("user")
        httpx.post(f"{service.url}/v1/jobs", json=job, headers=user).raise_for_status()
        r1.first("start", 0.0)
        rates, stops = [], []
        hour_ago = datetime.now(UTC) - HOUR
        for repeat in range(args.repeats):
            # an hour apart, in the past: the nodes' idle intervals (the forecast horizon's
            # input) stay as long as a real cluster's
            batch = events(args.events, repeat, hour_ago - (args.repeats - repeat) * HOUR)
            began = time.perf_counter()
            writing = pool.submit(post, scheduler, batch)
            time.sleep(args.reclaim_after_s)
            posted = time.perf_counter()
            post(scheduler, [node_event("r1", "busy", f"reclaim-{repeat}")])
            answered = time.perf_counter()
            stopped = r1.first("stop", posted)
            writing.result()
            ended = time.perf_counter()
            rates.append(args.events / (ended - began))
            stops.append(stopped - posted)
            line = {"repeat": repeat, "events": args.events, "batch_s": round(ended - began, 3)}
            line |= {
                "events_per_s": round(rates[-1]),
                "reclaim_answer_s": round(answered - posted, 4),
            }
            line |= {
                "reclaim_stop_s": round(stops[-1], 4),
                "stop_before_batch_end": stopped < ended,
            }
            print(json.dumps(line), flush=True)
            given_back = time.perf_counter()
            post(scheduler, [node_event("r1", "idle", f"back-{repeat}")])
            r1.first("start", given_back)
        began = time.perf_counter()
        for i in range(args.singles):
            post(scheduler, [node_event(f"s{i}", "idle", f"s{i}")])
        single = args.singles / (time.perf_counter() - began)
        print(json.dumps({"single_events_per_s": round(single, 1)}), flush=True)
        for agent in (r1, r2):
            agent.close()
        scheduler.close()
    rate = statistics.median(rates)
    summary = {"events_per_s_p50": round(rate), "reclaim_stop_s_max": round(max(stops), 4)}
    summary["speedup_vs_single_requests"] = round(rate / single, 1)
    print(json.dumps(summary), flush=True)
    print(json.dumps({"load1_at_end": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
