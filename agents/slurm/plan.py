"""Forecasts from Slurm's own plan: when is each idle node wanted back.

The backfill planner computes, for every pending job, a planned start (``StartTime``) and the
nodes it will take (``SchedNodes``); advance reservations and maintenance windows have a
``StartTime`` and ``Nodes``. A node in either is wanted back at the earliest such start.
Each pass of ``interstice slurm fill --server ...`` (:func:`forecast_pass`) reads both,
and for every node the service shows ``idle`` posts an ``idle`` node event carrying
``until`` (the node is idle already, so the event changes only its forecast; see
:mod:`interstice.api.services.ingest`); a node whose forecast disappears (the pending job was
cancelled or started elsewhere, the reservation deleted) gets an ``idle`` event without
``until`` (a withdrawal), but only where this process posted one. Nodes the service shows
busy or does not know get nothing: an ``idle`` event would lend them.

Before the first backfill pass, and for jobs it cannot place, squeue prints ``N/A`` and
``(null)``: such a job forecasts nothing. Slurm prints times in the controller's local zone
without an offset; the commands run with ``SLURM_TIME_FORMAT=%s`` so they print seconds
since the epoch instead (:data:`PLAN_ENV`); a local time is still read, in ``zone``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

from interstice.agents.slurm.env import parse_node_list

PLANNED_STARTS_COMMAND = ["squeue", "--start", "-t", "PD", "-h", "-o", "%i %S %Y"]
"""Pending jobs' planned starts: job id, ``StartTime``, ``SchedNodes`` (``-O
JobID,StartTime,SchedNodes`` pads and truncates each column to 20 characters, which would cut
a long node list; ``-o`` fields without a width are printed whole)."""
RESERVATIONS_COMMAND = ["scontrol", "show", "res", "-o"]
"""Reservations and maintenance windows, one per line of ``Key=Value`` fields."""
PLAN_ENV = {"SLURM_TIME_FORMAT": "%s"}
"""Environment of the plan commands: times as seconds since the epoch (UTC, no zone)."""
UNKNOWN = {"N/A", "(null)", "None", "Unknown", "", "n/a"}
"""What squeue and scontrol print for a start or a node list not planned yet."""
EVENTS_PER_POST = 1000
"""Node events per ``POST /v1/nodes/events``."""


def slurm_time(text: str, zone: tzinfo | None = None) -> datetime | None:
    """A time as Slurm prints it, in UTC.

    Args:
        text: seconds since the epoch (``SLURM_TIME_FORMAT=%s``), or an ISO 8601 local time
            without offset (Slurm's default), or an unknown marker (``N/A``).
        zone: the zone of a local time; None: this host's.

    Returns:
        The time (aware, UTC), None for an unknown one.

    Raises:
        ValueError: ``text`` is none of these.
    """
    text = text.strip()
    if text in UNKNOWN:
        return None
    if text.isdigit():
        return datetime.fromtimestamp(int(text), UTC)
    local = datetime.fromisoformat(text)
    if local.tzinfo is None:
        local = local.replace(tzinfo=zone) if zone is not None else local.astimezone()
    return local.astimezone(UTC)


def _earliest(into: dict[str, datetime], nodes: Iterable[str], start: datetime) -> None:
    for node in nodes:
        if node not in into or start < into[node]:
            into[node] = start


def parse_planned_starts(output: str, zone: tzinfo | None = None) -> dict[str, datetime]:
    """Each node's earliest planned start from :data:`PLANNED_STARTS_COMMAND`'s output.

    Args:
        output: lines ``JOBID STARTTIME SCHEDNODES``; a line with ``N/A`` or ``(null)``
            (not planned yet) forecasts nothing.
        zone: the zone of local times (see :func:`slurm_time`).

    Returns:
        The earliest planned start per node (aware, UTC).

    Raises:
        ValueError: a line has fewer than three fields, or an unreadable time.
        NodeListError: an unparsable node list.
    """
    starts: dict[str, datetime] = {}
    for line in output.splitlines():
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) < 3:
            raise ValueError(f"squeue --start: expected JOBID STARTTIME SCHEDNODES, got {line!r}")
        start = slurm_time(fields[1], zone)
        if start is None or fields[2] in UNKNOWN:
            continue
        _earliest(starts, parse_node_list(fields[2]), start)
    return starts


def parse_reservations(output: str, zone: tzinfo | None = None) -> dict[str, datetime]:
    """Each node's earliest reservation start from :data:`RESERVATIONS_COMMAND`'s output.

    Args:
        output: ``scontrol show res -o`` lines (``ReservationName=... StartTime=...
            Nodes=...``), or ``No reservations in the system``.
        zone: the zone of local times (see :func:`slurm_time`).

    Returns:
        The earliest start per node (aware, UTC), reservations already begun included (the
        caller keeps the future ones).

    Raises:
        ValueError: an unreadable time.
        NodeListError: an unparsable node list.
    """
    starts: dict[str, datetime] = {}
    for line in output.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "StartTime" not in fields or fields.get("Nodes", "") in UNKNOWN:
            continue
        start = slurm_time(fields["StartTime"], zone)
        if start is not None:
            _earliest(starts, parse_node_list(fields["Nodes"]), start)
    return starts


def wanted_back(*plans: dict[str, datetime]) -> dict[str, datetime]:
    """Each node's earliest start over ``plans`` (planned starts, reservations)."""
    merged: dict[str, datetime] = {}
    for plan in plans:
        for node, start in plan.items():
            _earliest(merged, [node], start)
    return merged


@dataclass
class Posted:
    """What this process last posted per node: its ``until``, None for a withdrawal."""

    until: dict[str, datetime | None] = field(default_factory=dict)


def forecast_events(
    wanted: dict[str, datetime], idle: Iterable[str], posted: Posted, now: datetime
) -> list[dict[str, Any]]:
    """The node events of one pass: a new or revised ``until`` for each idle node, a
    withdrawal for each idle node whose forecast this process posted and Slurm no longer has.

    A planned start at or before ``now`` is due: Slurm is starting the job and the node's
    ``busy`` event follows, so it is left as it is (an ``until`` must be after ``at``).

    Args:
        wanted: each node's earliest planned start (:func:`wanted_back`).
        idle: the nodes the service shows ``idle``.
        posted: what this process posted before (not changed here).
        now: the events' ``at`` (aware, UTC).

    Returns:
        ``POST /v1/nodes/events`` events, by node name; ids
        ``slurm-plan-<node>-<until epoch | none>-<at epoch ms>``.
    """
    events = []
    for node in sorted(set(idle)):
        until = wanted.get(node)
        if until is not None and until <= now:
            continue
        if until is None and posted.until.get(node) is None:
            continue  # nothing posted, or already withdrawn
        if node in posted.until and posted.until[node] == until:
            continue
        label = "none" if until is None else str(int(until.timestamp()))
        event = {
            "event_id": f"slurm-plan-{node}-{label}-{int(now.timestamp() * 1000)}",
            "node": node,
            "state": "idle",
            "at": _iso(now),
            "until": None if until is None else _iso(until),
        }
        events.append(event)
    return events


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class ForecastPass:
    """The outcome of one :func:`forecast_pass`.

    Attributes:
        planned: nodes Slurm's plan wants back (pending jobs and reservations).
        posted: forecasts posted (new or revised).
        withdrawn: forecasts withdrawn.
    """

    planned: int
    posted: int
    withdrawn: int


def forecast_pass(
    run: Callable[..., str],
    call: Callable[..., Any],
    posted: Posted,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> ForecastPass:
    """Read Slurm's plan, the service's idle nodes, and post what changed.

    Args:
        run: runs a Slurm command (``run(arguments, env=...)``, see
            :func:`interstice.agents.slurm.fill.run_slurm`), returns its output.
        call: ``call(method, path, json=..., params=...)`` of the service as the scheduler
            (:meth:`interstice.agents.client.ServiceClient.call`).
        posted: this process's memory of what it posted; updated for what the service
            answered.
        now: the clock (aware UTC).

    Returns:
        What the pass saw and posted.

    Raises:
        SlurmCommandError: squeue or scontrol failed.
        NodeListError, ValueError: unreadable output.
        ServiceRejected, ServiceUnavailable: the service refused or could not be reached.
    """
    env = {**os.environ, **PLAN_ENV}
    wanted = wanted_back(
        parse_planned_starts(run(PLANNED_STARTS_COMMAND, env=env)),
        parse_reservations(run(RESERVATIONS_COMMAND, env=env)),
    )
    idle = _idle_nodes(call)
    for node in set(posted.until) - idle:
        del posted.until[node]  # taken back (busy clears until) or gone: start afresh
    events = forecast_events(wanted, idle, posted, now())
    for start in range(0, len(events), EVENTS_PER_POST):
        batch = events[start : start + EVENTS_PER_POST]
        answer = call("POST", "/nodes/events", json={"events": batch})
        for event, result in zip(batch, answer["data"], strict=True):
            if result["applied"]:
                posted.until[event["node"]] = wanted.get(event["node"])
    withdrawn = sum(e["until"] is None for e in events)
    return ForecastPass(len(wanted), len(events) - withdrawn, withdrawn)


def _idle_nodes(call: Callable[..., Any]) -> set[str]:
    """The nodes the service shows ``idle`` (``GET /v1/nodes``, every page)."""
    idle: set[str] = set()
    cursor = None
    while True:
        page = call("GET", "/nodes", params={} if cursor is None else {"cursor": cursor})
        idle.update(n["name"] for n in page["data"] if n["state"] == "idle")
        cursor = page["next_cursor"]
        if cursor is None:
            return idle
