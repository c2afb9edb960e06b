"""What the demo shows: the live view of nodes and jobs, and the final summary, from what the
service answers (``/v1/nodes``, ``/v1/jobs``, ``/v1/stats``) and what it recorded of the
reclaimed nodes' ``stop`` commands (their acknowledgement times, in its database)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from interstice.api.store.tables import Agent, Command
from interstice.client_cli import loss, samples
from interstice.demo.scheduler import Reclaim

CLOCK_SLACK = timedelta(seconds=1)
"""How much earlier than the event's ``at`` the service may have stamped its ``stop``."""


def node_counts(nodes: list[dict[str, Any]], names: set[str]) -> Counter[str]:
    """How many of the nodes ``names`` are ``idle`` (free), ``held`` (idle, a job on it)
    and ``busy`` (the scheduler's), from ``GET /v1/nodes``'s ``data``."""
    counts: Counter[str] = Counter(idle=0, held=0, busy=0)
    for node in nodes:
        if node["name"] in names:
            held = node["state"] == "idle" and node["holder"]
            counts["held" if held else node["state"]] += 1
    return counts


def true_rescales(job: dict[str, Any]) -> int:
    """Generations of a running job that changed its nodes while it kept some: neither its
    start nor its end (``from_nodes`` and ``to_nodes`` both non-empty)."""
    return sum(1 for r in job.get("rescales", ()) if r["from_nodes"] and r["to_nodes"])


def live_view(
    *,
    elapsed_s: float,
    duration_s: float,
    trace_time: str,
    nodes: list[dict[str, Any]],
    real_nodes: list[str],
    virtual_nodes: int,
    jobs: list[dict[str, Any]],
    job_names: dict[str, str],
    events_posted: int,
    reclaims: int,
    simulated_failures: str = "",
) -> Group:
    """The terminal's live view: clock, node counts, the simulated agents' failed requests
    (``simulated_failures``, :meth:`interstice.demo.virtual.Failures.line`) if any, one row
    per job."""
    real = node_counts(nodes, set(real_nodes))
    head = Text.assemble(
        ("interstice demo ", "bold"),
        f"{elapsed_s:5.0f}/{duration_s:.0f} s   trace at {trace_time}   ",
        f"events {events_posted}   reclaims {reclaims}",
    )
    node_line = Text.assemble(
        ("nodes ", "bold"),
        ("idle ", "green"),
        f"{real['idle']}  ",
        ("held ", "cyan"),
        f"{real['held']}  ",
        ("busy ", "red"),
        f"{real['busy']}  of {len(real_nodes)} real",
        f"   + {virtual_nodes} simulated (busy)" if virtual_nodes else "",
    )
    table = Table(box=None, pad_edge=False)
    for column in ("JOB", "NAME", "STATE", "WORLD", "NODES", "SAMPLES", "LOSS", "RESCALES"):
        table.add_column(column, no_wrap=True)
    for job in sorted(jobs, key=lambda j: int(j["job_id"].split("-")[1])):
        table.add_row(
            job["job_id"],
            job_names.get(job["job_id"], "-"),
            job["state"],
            str(job["world_size"]),
            ",".join(job["nodes"]) or "-",
            samples(job),
            loss(job),
            str(true_rescales(job)),
        )
    if simulated_failures:
        failures = Text.assemble(("simulated agents ", "bold"), (simulated_failures, "red"))
        return Group(head, node_line, failures, table)
    return Group(head, node_line, table)


@dataclass(frozen=True)
class ReclaimOutcome:
    """How a reclaimed node's agent released it, as the service recorded it.

    Attributes:
        reclaim: the reclaim.
        acked_at: when the agent acknowledged the node's ``stop`` (its workers ended), or
            None if it never did.
        ok: the acknowledgement's ``ok`` (False: the node ran none of the job's workers,
            e.g. still starting them), or None.
    """

    reclaim: Reclaim
    acked_at: datetime | None
    ok: bool | None

    @property
    def within_grace(self) -> bool:
        """Whether the node was released by ``at + grace_s``."""
        return self.acked_at is not None and self.acked_at <= self.reclaim.deadline

    @property
    def release_s(self) -> float | None:
        """Seconds from the ``busy`` event to the acknowledgement."""
        return None if self.acked_at is None else (self.acked_at - self.reclaim.at).total_seconds()


def reclaim_outcomes(db_url: str, reclaims: list[Reclaim]) -> list[ReclaimOutcome]:
    """The ``stop`` command each reclaim gave its node's agent, and its acknowledgement.

    Args:
        db_url: the service's database (read after the service stopped).
        reclaims: what the scheduler stand-in saw.
    """
    engine = create_engine(db_url)
    outcomes = []
    try:
        with Session(engine) as session:
            for reclaim in reclaims:
                command = session.scalars(
                    select(Command)
                    .join(Agent, Agent.id == Command.agent_id)
                    .where(
                        Agent.node == reclaim.node,
                        Command.job_id == int(reclaim.job_id.removeprefix("j-")),
                        Command.kind == "stop",
                        # the first stop written for the node and job after the event
                        Command.created_at >= reclaim.at - CLOCK_SLACK,
                    )
                    .order_by(Command.id)
                ).first()
                acked_at = command.acked_at if command else None
                outcomes.append(ReclaimOutcome(reclaim, acked_at, command.ok if command else None))
    finally:
        engine.dispose()
    return outcomes


def final_summary(
    *,
    machine: str,
    duration_s: float,
    speedup: float,
    grace_s: float,
    trace: str,
    synthetic: bool,
    trace_window: str,
    real_nodes: list[str],
    virtual_nodes: int,
    jobs: list[dict[str, Any]],
    job_names: dict[str, str],
    stats: dict[str, Any] | None,
    outcomes: list[ReclaimOutcome],
    processes_left: int,
    kept: str | None,
    error: str | None,
) -> dict[str, Any]:
    """The run's summary, one JSON-able mapping (the demo's last output line).

    ``trace`` is the replayed trace file (``synthetic``: the one the package ships); ``kept``
    the folder holding the job folders at the end, None when they were deleted.
    """
    release_s = [o.release_s for o in outcomes if o.release_s is not None]
    jobs = sorted(jobs, key=lambda job: int(job["job_id"].split("-")[1]))

    def rounded(value: float | None, digits: int = 1) -> float | None:
        return None if value is None else round(value, digits)

    return {
        "demo": "summary",
        "machine": machine,
        "duration_s": round(duration_s, 1),
        "speedup": speedup,
        "grace_s": grace_s,
        "trace": trace,
        "synthetic_trace": synthetic,
        "trace_window_start": trace_window,
        "nodes": real_nodes,
        "virtual_nodes": virtual_nodes,
        "jobs": [
            {
                "job_id": job["job_id"],
                "name": job_names.get(job["job_id"]),
                "state": job["state"],
                "samples_done": job["samples_done"],
                "total_samples": job["total_samples"],
                "world_size": job["world_size"],
                "rescales": true_rescales(job),
            }
            for job in jobs
        ],
        "jobs_finished": sum(1 for job in jobs if job["state"] == "finished"),
        "rescales": sum(true_rescales(job) for job in jobs),
        "reclaims": len(outcomes),
        "reclaims_within_grace": sum(1 for o in outcomes if o.within_grace),
        "reclaims_stopping_workers": sum(1 for o in outcomes if o.ok),
        "reclaim_release_s_max": rounded(max(release_s, default=None), 2),
        "idle_node_s": None if stats is None else rounded(stats["idle_node_hours"] * 3600),
        "harvested_node_s": (
            None if stats is None else rounded(stats["harvested_node_hours"] * 3600)
        ),
        "utilization": None if stats is None else rounded(stats["utilization"], 3),
        "processes_left": processes_left,
        "job_folders": kept,
        "error": error,
    }


def summary_table(summary: dict[str, Any]) -> Table:
    """The final summary for people: one row per measure."""
    table = Table(title="interstice demo: summary", box=None, show_header=False)
    table.add_column("measure", style="bold", no_wrap=True)
    table.add_column("value")

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} s" if value < 10 else f"{value:.0f} s"

    def node_seconds(harvested: float | None, idle: float | None) -> str:
        if harvested is None or idle is None:
            return "-"
        share = f" (jobs held {harvested / idle:.0%} of the idle node-time)" if idle else ""
        return f"{harvested:.0f} / {idle:.0f}{share}"

    trace_h = summary["duration_s"] * summary["speedup"] / 3600
    trace = "synthetic" if summary["synthetic_trace"] else "Summit"
    rows = [
        ("machine", summary["machine"]),
        ("replayed", f"{summary['duration_s']:.0f} s = {trace_h:.1f} h of the {trace} trace "
         f"from {summary['trace_window_start']} at {summary['speedup']:g}x"),
        ("nodes", f"{len(summary['nodes'])} real ({', '.join(summary['nodes'])}), "
         f"{summary['virtual_nodes']} simulated"),
        ("jobs finished", f"{summary['jobs_finished']} of {len(summary['jobs'])}"),
        ("rescales", str(summary["rescales"])),
        ("reclaims honoured within grace",
         f"{summary['reclaims_within_grace']} of {summary['reclaims']} "
         f"(grace {summary['grace_s']:g} s, slowest release "
         f"{seconds(summary['reclaim_release_s_max'])}; "
         f"{summary['reclaims_stopping_workers']} stopped workers)"),
        ("harvested / idle node-seconds",
         node_seconds(summary["harvested_node_s"], summary["idle_node_s"])),
        ("processes left", str(summary["processes_left"])),
        ("job folders", f"kept in {summary['job_folders']}" if summary["job_folders"]
         else "deleted (--keep DIR keeps them)"),
    ]  # fmt: skip
    if summary["error"]:
        rows.append(("error", summary["error"]))
    for name, value in rows:
        table.add_row(name, value)
    return table
