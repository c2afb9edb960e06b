"""Slurm's accounting records as node intervals: ``sacct`` jobs and ``sacctmgr`` node events.

Both commands print ``--parsable2`` text: a header line of column names, then one record a
line, fields separated by ``|`` (``--parsable`` ends each line with one more ``|``, also read).
The readers find their columns by name in the header (case-insensitive, in any order, other
columns ignored), so ``--format`` may hold more than they need.

- :func:`parse_sacct` reads ``sacct --allocations --parsable2
  --format=JobID,NodeList,Start,End,State,Partition``: each job allocation that started
  holds its nodes from ``Start`` to ``End`` (``End=Unknown``: still running). Jobs that never
  started (``NodeList`` ``None assigned``, ``Start`` ``Unknown``) and job steps (a ``JobID``
  with a dot, present when ``--allocations`` was left out) are counted and left out; so is each
  line that cannot be read, with the reason. ``State`` (``COMPLETED``, ``CANCELLED by 0``, ...)
  is kept but plays no part: a job holds its nodes whatever way it ended.
- :func:`parse_events` reads ``sacctmgr show event --parsable2`` (columns ``NodeName``,
  ``TimeStart``, ``TimeEnd``): the intervals nodes were down or drained. Cluster events (no
  node name) are counted and left out.

Times: Slurm prints each time in the local zone of the process that ran the command, without
an offset (or seconds since the epoch under ``SLURM_TIME_FORMAT=%s``); they are read with
:func:`~interstice.agents.slurm.plan.slurm_time` in the zone given (None: this host's).
Node lists are expanded with :func:`~interstice.agents.slurm.env.parse_node_list`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, tzinfo

from interstice.agents.slurm.env import NodeListError, parse_node_list
from interstice.agents.slurm.plan import slurm_time

SACCT_COLUMNS = ("JobID", "NodeList", "Start", "End")
"""Columns :func:`parse_sacct` needs (``State`` and ``Partition`` are read where present)."""
EVENT_COLUMNS = {"node": ("NodeName",), "start": ("TimeStart", "Start"), "end": ("TimeEnd", "End")}
"""Columns :func:`parse_events` needs: our name -> the header names that give it."""
NOT_ASSIGNED = {"None assigned", "(null)", ""}
"""What sacct prints as the node list of a job that never ran."""
MAX_PROBLEMS_KEPT = 20
"""How many unreadable lines a reading keeps the reason of (all are counted)."""


class AccountingFormatError(ValueError):
    """The text has no usable header: it is empty, or a needed column is missing."""


@dataclass(frozen=True)
class Allocation:
    """Nodes held by one job allocation, or by a down or drained spell of nodes.

    Attributes:
        what: the job id (sacct) or ``event`` and its state (sacctmgr), for messages.
        nodes: the node names, expanded.
        start: when the nodes were taken, aware, UTC.
        end: when they were given back, aware, UTC; None: not yet (``Unknown``).
        partition: the job's partition (empty where unknown or for an event).
        state: the job's or the event's state as printed (``CANCELLED by 0``).
    """

    what: str
    nodes: tuple[str, ...]
    start: datetime
    end: datetime | None
    partition: str = ""
    state: str = ""


@dataclass
class Reading:
    """What one reading of accounting text found.

    Attributes:
        allocations: the usable records, in file order.
        skipped: reason -> how many records were left out for it (``never started``,
            ``job step``, ``cluster event``, ``unreadable``).
        problems: ``"line N: why"`` of the first :data:`MAX_PROBLEMS_KEPT` unreadable lines.
        columns: the header's column names, as printed.
    """

    allocations: list[Allocation] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)

    def skip(self, reason: str, problem: str | None = None) -> None:
        """Count one record left out for ``reason``; keep ``problem`` (the line's fault)."""
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if problem is not None and len(self.problems) < MAX_PROBLEMS_KEPT:
            self.problems.append(problem)


def parse_sacct(text: str, zone: tzinfo | None = None) -> Reading:
    """Job allocations from ``sacct --parsable2`` output with its header.

    Args:
        text: the output; lines end in LF or CRLF; blank lines are ignored.
        zone: the zone of the printed times; None: this host's.

    Returns:
        The allocations that started (nodes expanded, times in UTC) and what was skipped:
        ``never started`` (no node list or no start), ``job step`` (a ``JobID`` with a dot),
        ``unreadable`` (a wrong number of fields, a bad time or node list, an end before the
        start; each reason kept in ``problems``).

    Raises:
        AccountingFormatError: no header line, or one without JobID, NodeList, Start and End.
    """
    reading = Reading()
    for number, record in _records(text, {name: (name,) for name in SACCT_COLUMNS}, reading):
        job_id = record["JobID"]
        if "." in job_id:
            reading.skip("job step")
            continue
        if not job_id or any(char.isspace() for char in job_id):
            reading.skip("unreadable", f"line {number}: bad JobID {job_id!r}")
            continue
        allocation = _allocation(number, job_id, record, "NodeList", "Start", "End", zone, reading)
        if allocation is not None:
            reading.allocations.append(allocation)
    return reading


def parse_events(text: str, zone: tzinfo | None = None) -> Reading:
    """Down and drained intervals of nodes from ``sacctmgr show event --parsable2`` output.

    Args:
        text: the output, with its header (``Cluster|NodeName|TimeStart|TimeEnd|State|...``).
        zone: the zone of the printed times; None: this host's.

    Returns:
        One allocation per node event (``end`` None: still down); what was skipped:
        ``cluster event`` (no node name), ``unreadable`` (as for :func:`parse_sacct`).

    Raises:
        AccountingFormatError: no header line, or one without NodeName, TimeStart, TimeEnd.
    """
    reading = Reading()
    for number, record in _records(text, EVENT_COLUMNS, reading):
        if not record["node"].strip():
            reading.skip("cluster event")
            continue
        what = f"event {record.get('State', '')}".strip()
        allocation = _allocation(number, what, record, "node", "start", "end", zone, reading)
        if allocation is not None:
            reading.allocations.append(allocation)
    return reading


def _records(
    text: str, needed: dict[str, tuple[str, ...]], reading: Reading
) -> list[tuple[int, dict[str, str]]]:
    """``(line number, {column: field})`` of every data line with as many fields as the
    header; the columns of ``needed`` under our names, the others under their own."""
    lines = text.replace("\r\n", "\n").split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise AccountingFormatError("empty: no header line")
    # --parsable ends every line, the header too, with a "|"; --parsable2 does not, and its
    # lines end in "|" only where the last field is empty.
    trailing = lines[first].rstrip().endswith("|")
    header = _fields(lines[first], trailing)
    reading.columns = [name.strip() for name in header]
    by_lower = {name.strip().lower(): i for i, name in enumerate(header)}
    columns = {name.strip(): i for i, name in enumerate(header)}
    for ours, names in needed.items():
        found = [by_lower[name.lower()] for name in names if name.lower() in by_lower]
        if not found:
            raise AccountingFormatError(
                f"header {lines[first][:120]!r} has no {' or '.join(names)} column "
                "(is this --parsable2 output with its header?)"
            )
        columns[ours] = found[0]
    records = []
    for index in range(first + 1, len(lines)):
        line = lines[index]
        if not line.strip():
            continue
        values = _fields(line, trailing)
        if len(values) != len(header):
            reading.skip(
                "unreadable",
                f"line {index + 1}: {len(values)} fields, the header has {len(header)}",
            )
            continue
        records.append((index + 1, {name: values[i] for name, i in columns.items()}))
    return records


def _fields(line: str, trailing: bool) -> list[str]:
    """The ``|``-separated fields of a line; with ``trailing``, its last ``|`` dropped."""
    return (line.rstrip().removesuffix("|") if trailing else line).split("|")


def _allocation(
    number: int,
    what: str,
    record: dict[str, str],
    nodes_column: str,
    start_column: str,
    end_column: str,
    zone: tzinfo | None,
    reading: Reading,
) -> Allocation | None:
    """The record as an :class:`Allocation`, or None (counted in ``reading``) where it never
    started or cannot be read."""
    node_list = record[nodes_column].strip()
    try:
        start = slurm_time(record[start_column], zone)
        end = slurm_time(record[end_column], zone)
    except (ValueError, OverflowError, OSError):
        reading.skip(
            "unreadable",
            f"line {number}: bad time {record[start_column]!r} or {record[end_column]!r}",
        )
        return None
    if node_list in NOT_ASSIGNED or start is None:
        reading.skip("never started")
        return None
    try:
        nodes = tuple(parse_node_list(node_list))
    except NodeListError as error:
        reading.skip("unreadable", f"line {number}: {error}")
        return None
    if end is not None and end < start:
        reading.skip("unreadable", f"line {number}: ends before it starts")
        return None
    return Allocation(
        what=what,
        nodes=nodes,
        start=start,
        end=end,
        partition=record.get("Partition", "").strip(),
        state=record.get("State", "").strip(),
    )
