"""The demo's stand-in for the HPC scheduler: it posts the replay plan's node events to the
service (``POST /v1/nodes/events`` as the scheduler) at their time, and remembers every
reclaim the service answered (a ``busy`` event on a node a job held)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from interstice.demo.plan import NodeChange, ReplayPlan


@dataclass(frozen=True)
class Reclaim:
    """A node taken back from a job.

    Attributes:
        node: the node.
        job_id: the job that held it.
        at: the ``busy`` event's time.
        deadline: ``at + grace_s``: the job must have released the node by then.
    """

    node: str
    job_id: str
    at: datetime
    deadline: datetime


Post = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
"""Posts one batch of node events; returns the service's results (``NodeEventResult``)."""


class SchedulerStandIn:
    """Replays a :class:`ReplayPlan` on its own thread.

    Args:
        plan: the node events, real seconds after :meth:`start`.
        post: sends a batch of events to the service.
        grace_s: grace period of every ``busy`` event, seconds.
        busy_nodes: nodes reported ``busy`` at the start and never freed (the simulated
            agents').

    Attributes:
        reclaims: the reclaims the service answered, in order.
        posted: events posted so far.
        error: the exception that stopped the replay, if any.
    """

    def __init__(self, plan: ReplayPlan, post: Post, grace_s: float, busy_nodes: list[str]) -> None:
        self.plan, self.post, self.grace_s, self.busy_nodes = plan, post, grace_s, busy_nodes
        self.reclaims: list[Reclaim] = []
        self.posted = 0
        self.error: Exception | None = None
        self.started_at: datetime | None = None
        self._started_monotonic = 0.0
        self._ids = itertools.count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)

    def start(self) -> None:
        """Post every node's initial state now, then the changes at their times."""
        self.started_at = datetime.now(UTC)
        self._started_monotonic = time.monotonic()
        initial = [NodeChange(0.0, node, idle) for node, idle in self.plan.initial_idle.items()]
        initial += [NodeChange(0.0, node, False) for node in self.busy_nodes]
        self._send(initial)
        self._thread.start()

    def elapsed_s(self) -> float:
        """Real seconds since :meth:`start`."""
        return time.monotonic() - self._started_monotonic if self.started_at else 0.0

    def stop(self) -> None:
        """Post nothing more; return once the thread ended."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        for at_s, group in itertools.groupby(self.plan.changes, key=lambda c: c.at_s):
            if self._stop.wait(max(0.0, at_s - self.elapsed_s())):
                return
            try:
                self._send(list(group))
            except Exception as error:  # the service gone: the demo reports it and ends
                self.error = error
                return

    def _send(self, changes: list[NodeChange]) -> None:
        for start in range(0, len(changes), 10000):  # the API's batch limit
            self._send_batch(changes[start : start + 10000])

    def _send_batch(self, changes: list[NodeChange]) -> None:
        at = datetime.now(UTC)
        events = [
            {
                "event_id": f"demo-{next(self._ids)}-{change.node}",
                "node": change.node,
                "state": "idle" if change.idle else "busy",
                "at": at.isoformat(),
                "grace_s": 0.0 if change.idle else self.grace_s,
            }
            for change in changes
        ]
        results = self.post(events)
        self.posted += len(events)
        deadline = at + timedelta(seconds=self.grace_s)
        self.reclaims += [
            Reclaim(result["node"], result["reclaimed_job_id"], at, deadline)
            for result in results
            if result.get("reclaimed_job_id")
        ]
