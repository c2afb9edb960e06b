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

The process remembers what it posted (:class:`Posted`); at its first pass it adopts the
forecasts the service holds for idle nodes of its partition (an earlier fill process posted
them, and its memory ended with it), so a restart revises or withdraws those the plan no
longer gives. Within the partition, fill is the forecasts' one source.

A line that cannot be read (a time out of range, a node list that is malformed or expands to
too many names) is left out with a note (:attr:`Plan.dropped`), never failing the pass, and
so is a start after the latest time the service takes (years to 2100, e.g.
4294967295 seconds): the node's end counts as unknown. Event ids stay within the service's
:data:`~interstice.wire.EVENT_ID_MAX_CHARS` whatever the node name's length (a hash stands
for a long name).

Before the first backfill pass, and for jobs it cannot place, squeue prints ``N/A`` and
``(null)``: such a job forecasts nothing. Slurm prints times in the controller's local zone
without an offset; the commands run with ``SLURM_TIME_FORMAT=%s`` so they print seconds
since the epoch instead (:data:`PLAN_ENV`); a local time is still read, in ``zone``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

from interstice.agents.slurm.env import node_names, parse_node_list, quoted

from interstice.wire import EVENT_ID_MAX_CHARS, LATEST_TIME

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
EVENT_ID_NODE_CHARS = 100
"""Characters of a node's name kept in an event id that would be too long with all of it (a
hash of the whole name follows them)."""


@dataclass
class Plan:
    """What Slurm's plan says: each node's earliest start, and the lines left out.

    Attributes:
        starts: the earliest start per node (aware, UTC).
        dropped: one note per line left out: which command printed it, the line (cut), why.
    """

    starts: dict[str, datetime] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)


def slurm_time(text: str, zone: tzinfo | None = None) -> datetime | None:
    """A time as Slurm prints it, in UTC.

    Args:
        text: seconds since the epoch (``SLURM_TIME_FORMAT=%s``), or an ISO 8601 local time
            without offset (Slurm's default), or an unknown marker (``N/A``).
        zone: the zone of a local time; None: this host's.

    Returns:
        The time (aware, UTC), None for an unknown one.

    Raises:
        ValueError: ``text`` is none of these, or a time before year 1 or after 9999.
    """
    text = text.strip()
    if text in UNKNOWN:
        return None
    if text.isdigit():
        try:
            return datetime.fromtimestamp(int(text), UTC)
        except (OverflowError, OSError, ValueError) as error:
            raise ValueError(f"time {quoted(text)} is out of range ({error})") from None
    local = datetime.fromisoformat(text)
    if local.tzinfo is None:
        local = local.replace(tzinfo=zone) if zone is not None else local.astimezone()
    return local.astimezone(UTC)


def _earliest(into: dict[str, datetime], nodes: Iterable[str], start: datetime) -> None:
    for node in nodes:
        if node not in into or start < into[node]:
            into[node] = start


def _read_plan(
    command: str, output: str, read_line: Callable[[str], tuple[datetime, list[str]] | None]
) -> Plan:
    """A plan from ``output``, one line at a time through ``read_line`` (None: a line that
    forecasts nothing); a line it cannot read, or whose start is after the latest time the
    service takes, is left out with a note."""
    plan = Plan()
    for line in output.splitlines():
        try:
            read = read_line(line)
        except ValueError as error:  # NodeListError included
            plan.dropped.append(f"{command}: left out {quoted(line)}: {error}")
            continue
        if read is None:
            continue
        start, nodes = read
        if start >= LATEST_TIME:
            plan.dropped.append(
                f"{command}: left out {quoted(line)}: start {_iso(start)} is past the "
                f"service's times (before {_iso(LATEST_TIME)}): the end counts as unknown"
            )
            continue
        _earliest(plan.starts, nodes, start)
    return plan


def parse_planned_starts(output: str, zone: tzinfo | None = None) -> Plan:
    """Each node's earliest planned start from :data:`PLANNED_STARTS_COMMAND`'s output.

    Args:
        output: lines ``JOBID STARTTIME SCHEDNODES``; a line with ``N/A`` or ``(null)``
            (not planned yet) forecasts nothing.
        zone: the zone of local times (see :func:`slurm_time`).

    Returns:
        The earliest planned start per node (aware, UTC); left out with a note: a line with
        fewer than three fields, an unreadable time or node list, a start after 2100.
    """

    def read_line(line: str) -> tuple[datetime, list[str]] | None:
        fields = line.split()
        if not fields:
            return None
        if len(fields) < 3:
            raise ValueError("expected JOBID STARTTIME SCHEDNODES")
        start = slurm_time(fields[1], zone)
        if start is None or fields[2] in UNKNOWN:
            return None
        return start, parse_node_list(fields[2])

    return _read_plan("squeue --start", output, read_line)


def parse_reservations(output: str, zone: tzinfo | None = None) -> Plan:
    """Each node's earliest reservation start from :data:`RESERVATIONS_COMMAND`'s output.

    Args:
        output: ``scontrol show res -o`` lines (``ReservationName=... StartTime=...
            Nodes=...``), or ``No reservations in the system``.
        zone: the zone of local times (see :func:`slurm_time`).

    Returns:
        The earliest start per node (aware, UTC), reservations already begun included (the
        caller keeps the future ones); left out with a note: a line with an unreadable time
        or node list, a start after 2100.
    """

    def read_line(line: str) -> tuple[datetime, list[str]] | None:
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "StartTime" not in fields or fields.get("Nodes", "") in UNKNOWN:
            return None
        start = slurm_time(fields["StartTime"], zone)
        return None if start is None else (start, parse_node_list(fields["Nodes"]))

    return _read_plan("scontrol show res", output, read_line)


def wanted_back(*plans: Plan) -> Plan:
    """Each node's earliest start over ``plans`` (planned starts, reservations), and all
    their notes."""
    merged = Plan()
    for plan in plans:
        for node, start in plan.starts.items():
            _earliest(merged.starts, [node], start)
        merged.dropped.extend(plan.dropped)
    return merged


@dataclass
class Posted:
    """What this process last posted per node: its ``until``, None for a withdrawal;
    ``adopted``: whether it took over the forecasts an earlier process posted (its first
    pass that reached the service)."""

    until: dict[str, datetime | None] = field(default_factory=dict)
    adopted: bool = False


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
        ``slurm-plan-<node>-<until epoch | none>-<at epoch ms>`` (:func:`event_id`).
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
        event = {
            "event_id": event_id(node, until, now),
            "node": node,
            "state": "idle",
            "at": _iso(now),
            "until": None if until is None else _iso(until),
        }
        events.append(event)
    return events


def event_id(node: str, until: datetime | None, at: datetime) -> str:
    """The id of the event of ``node`` posting ``until`` (None: a withdrawal) at ``at``:
    ``slurm-plan-<node>-<until epoch | none>-<at epoch ms>``, at most
    :data:`~interstice.wire.EVENT_ID_MAX_CHARS` characters: a name that would make it longer
    is cut to :data:`EVENT_ID_NODE_CHARS` characters followed by ``~`` and 16 hex digits of
    its SHA-256, so two long names that share their beginning keep distinct ids."""
    label = "none" if until is None else str(int(until.timestamp()))
    suffix = f"-{label}-{int(at.timestamp() * 1000)}"
    full = f"slurm-plan-{node}{suffix}"
    if len(full) <= EVENT_ID_MAX_CHARS:
        return full
    digest = hashlib.sha256(node.encode()).hexdigest()[:16]
    return f"slurm-plan-{node[:EVENT_ID_NODE_CHARS]}~{digest}{suffix}"


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class ForecastPass:
    """The outcome of one :func:`forecast_pass`.

    Attributes:
        planned: nodes Slurm's plan wants back (pending jobs and reservations).
        posted: forecasts posted (new or revised).
        withdrawn: forecasts withdrawn.
        dropped: the notes of the lines left out (:attr:`Plan.dropped`), and of the
            partition's node lists left out when adopting earlier forecasts.
    """

    planned: int
    posted: int
    withdrawn: int
    dropped: tuple[str, ...] = ()


def forecast_pass(
    run: Callable[..., str],
    call: Callable[..., Any],
    posted: Posted,
    partition: str,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> ForecastPass:
    """Read Slurm's plan, the service's idle nodes, and post what changed.

    The first pass that reaches the service (``posted.adopted`` false) adopts the forecasts
    the service holds for idle nodes of ``partition`` (``sinfo``, every state) as this
    process's own, so it revises or withdraws those the plan no longer gives.

    Args:
        run: runs a Slurm command (``run(arguments, env=...)``, see
            :func:`interstice.agents.slurm.fill.run_slurm`), returns its output.
        call: ``call(method, path, json=..., params=...)`` of the service as the scheduler
            (:meth:`interstice.agents.client.ServiceClient.call`).
        posted: this process's memory of what it posted; updated for what the service
            answered.
        partition: the scavenger partition, whose nodes' forecasts this process owns.
        now: the clock (aware UTC).

    Returns:
        What the pass saw and posted, and the notes of what it left out.

    Raises:
        SlurmCommandError: squeue, scontrol or sinfo failed.
        ServiceRejected, ServiceUnavailable: the service refused or could not be reached.
    """
    env = {**os.environ, **PLAN_ENV}
    wanted = wanted_back(
        parse_planned_starts(run(PLANNED_STARTS_COMMAND, env=env)),
        parse_reservations(run(RESERVATIONS_COMMAND, env=env)),
    )
    idle = _idle_nodes(call)
    if not posted.adopted:
        listed = run(["sinfo", "-h", "-p", partition, "-o", "%N"], env=env)
        _adopt(idle, node_names(listed, "sinfo", wanted.dropped), posted)
    for node in set(posted.until) - idle.keys():
        del posted.until[node]  # taken back (busy clears until) or gone: start afresh
    events = forecast_events(wanted.starts, idle, posted, now())
    for start in range(0, len(events), EVENTS_PER_POST):
        batch = events[start : start + EVENTS_PER_POST]
        answer = call("POST", "/nodes/events", json={"events": batch})
        for event, result in zip(batch, answer["data"], strict=True):
            if result["applied"]:
                posted.until[event["node"]] = wanted.starts.get(event["node"])
    withdrawn = sum(e["until"] is None for e in events)
    return ForecastPass(
        len(wanted.starts), len(events) - withdrawn, withdrawn, tuple(wanted.dropped)
    )


def _adopt(idle: dict[str, datetime | None], partition: set[str], posted: Posted) -> None:
    """Take as posted by this process the ``until`` the service holds for each idle node of
    the partition that this process has not posted to (an earlier process's forecast)."""
    for node in partition & idle.keys():
        if idle[node] is not None:
            posted.until.setdefault(node, idle[node])
    posted.adopted = True


def _idle_nodes(call: Callable[..., Any]) -> dict[str, datetime | None]:
    """The nodes the service shows ``idle`` (``GET /v1/nodes``, every page), with the
    ``until`` it holds for each."""
    idle: dict[str, datetime | None] = {}
    cursor = None
    while True:
        page = call("GET", "/nodes", params={} if cursor is None else {"cursor": cursor})
        for node in page["data"]:
            if node["state"] == "idle":
                until = node["until"]
                idle[node["name"]] = None if until is None else datetime.fromisoformat(until)
        cursor = page["next_cursor"]
        if cursor is None:
            return idle
