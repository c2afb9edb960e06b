"""Prometheus metrics, one :class:`~prometheus_client.CollectorRegistry` per app instance.

Counters and histograms are updated where things happen; the gauges (nodes, jobs, pending
commands, agents, the lifetime measures of ``GET /v1/stats`` and each user's harvest of
``GET /v1/usage``) are read from the database at scrape time.
"""

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Metrics:
    """The service's instruments."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.idle_nodes = Gauge(
            "interstice_idle_nodes", "Nodes the scheduler reports idle", registry=r
        )
        self.busy_nodes = Gauge(
            "interstice_busy_nodes",
            "Nodes the scheduler has taken back (busy) since it last reported them idle",
            registry=r,
        )
        self.allocatable_nodes = Gauge(
            "interstice_allocatable_nodes",
            "Idle nodes with an alive agent, not quarantined",
            registry=r,
        )
        self.quarantined_nodes = Gauge(
            "interstice_nodes_quarantined",
            "Nodes quarantined after a launch failed for a reason of the node (or its agent's "
            "launcher did not warm up): no job is placed on them until their agent proves "
            "healthy or an admin releases them",
            registry=r,
        )
        self.allocated_nodes = Gauge(
            "interstice_allocated_nodes", "Nodes held by a job", registry=r
        )
        self.jobs = Gauge("interstice_jobs", "Jobs by state", ["state"], registry=r)
        self.pending_commands = Gauge(
            "interstice_pending_commands", "Commands not yet acknowledged", registry=r
        )
        self.agents_alive = Gauge("interstice_agents_alive", "Agents alive", registry=r)
        self.agents_not_as_owner = Gauge(
            "interstice_agents_not_running_as_owner",
            "Alive agents that did not say they run jobs as their owners (older agents, or "
            "not root): in multi-user mode their nodes are not allocatable",
            registry=r,
        )
        self.leader = Gauge(
            "interstice_leader",
            "1 while this process leads (runs the solver and the lease sweep), else 0",
            registry=r,
        )
        self.solve_seconds = Histogram(
            "interstice_solve_seconds",
            "Wall-clock time of one solve, model building included",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.solver_status = Counter(
            "interstice_solver_status", "Solves by termination status", ["status"], registry=r
        )
        self.rescales = Counter(
            "interstice_rescales", "Job rescales by reason", ["reason"], registry=r
        )
        self.forecast_coverage = Gauge(
            "interstice_forecast_coverage",
            "Share of the newest ended idle intervals whose node had an until, as the last "
            "solve with forecasts saw it (fewer than 50 ended: the share of the allocatable "
            "nodes that have one; NaN: no forecasts)",
            registry=r,
        )
        self.forecasts_used = Gauge(
            "interstice_forecasts_used",
            "1 if the last solve used the nodes' until forecasts, else 0 (none given, or the "
            "coverage below the objective's forecast_min_coverage)",
            registry=r,
        )
        self.stale_forecasts = Gauge(
            "interstice_stale_forecasts",
            "Idle nodes whose until has passed: the scheduler's forecast is stale and the "
            "optimizer reads the node's end as unknown",
            registry=r,
        )
        self.agents_lost = Counter(
            "interstice_agents_lost",
            "Agents marked lost: silent for missed_heartbeats_lost heartbeat intervals",
            registry=r,
        )
        self.lifetime = {
            name: Gauge(f"interstice_{name}", f"{help}, over the service's lifetime", registry=r)
            for name, help in (
                ("idle_node_hours", "Node-hours the scheduler reported nodes idle"),
                ("harvested_node_hours", "Node-hours jobs held nodes"),
                ("utilization", "Harvested / idle node-hours (NaN before any idle time)"),
                ("harvest", "Dedicated-node work trained / idle node-seconds (GET /v1/stats)"),
                ("jobs_finished", "Jobs finished"),
                ("jct_mean_s", "Mean job completion time, seconds (NaN before a finish)"),
                ("jct_p95_s", "95th percentile job completion time, seconds"),
                ("wait_mean_s", "Mean wait from submission to first node, seconds"),
            )
        }
        """The measures of ``GET /v1/stats`` over the lifetime, by field name."""
        self.user_node_seconds = Gauge(
            "interstice_user_node_seconds",
            "Node-seconds the user's jobs held idle nodes, over the service's lifetime "
            "(GET /v1/usage); one series per user with a job",
            ["user"],
            registry=r,
        )
        self.user_samples = Gauge(
            "interstice_user_samples",
            "Samples the user's jobs trained, over the service's lifetime (GET /v1/usage)",
            ["user"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "interstice_request_seconds",
            "HTTP request latency by route",
            ["method", "route", "status"],
            registry=r,
        )


class RequestLatency:
    """ASGI middleware timing every HTTP request into ``interstice_request_seconds``."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            self.metrics.request_seconds.labels(
                scope["method"], getattr(route, "path", "unmatched"), str(status[0])
            ).observe(time.perf_counter() - start)
