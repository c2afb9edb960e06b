"""``interstice trace ...``: make the node-state traces ``interstice replay`` reads.

- ``from-slurm``: from a centre's own Slurm accounting (``sacct``, and optionally
  ``sacctmgr show event``): :mod:`interstice.agents.slurm.accounting` reads the records,
  :mod:`interstice.replay.slurm_trace` builds the trace.
- ``synthetic``: the synthetic trace of :mod:`interstice.synthetic_trace`.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from zoneinfo import ZoneInfo

import typer

from interstice import synthetic_trace
from interstice.errors import fail

if TYPE_CHECKING:
    from interstice.agents.slurm.accounting import Reading

trace_app = typer.Typer(
    help="Make node-state traces for `interstice replay`.",
    no_args_is_help=True,
    add_completion=False,
)
trace_app.command("synthetic")(synthetic_trace.main)


@trace_app.command("from-slurm")
def from_slurm(
    sacct_file: Annotated[
        Path,
        typer.Argument(
            help="Output of `sacct --allocations --parsable2 "
            "--format=JobID,NodeList,Start,End,State,Partition -S T0 -E T1` with its header "
            "(.gz read as gzip)."
        ),
    ],
    nodes: Annotated[
        str,
        typer.Option(
            help="The machine's nodes: a hostlist ('n[01-16],gpu[1-4]'), or @FILE: a file of "
            "hostlists, one or more a line, e.g. `sinfo -h -o %N` output (# comments)."
        ),
    ],
    start: Annotated[str, typer.Option(help="Window start: ISO 8601 (sacct's -S), in --tz.")],
    end: Annotated[str, typer.Option(help="Window end: ISO 8601 (sacct's -E), in --tz.")],
    out: Annotated[Path, typer.Option(help="The trace to write: .csv, or .csv.gz (gzip).")],
    tz: Annotated[
        str | None,
        typer.Option(
            help="Zone of sacct's times and of --start/--end, e.g. Europe/Paris (default: this "
            "host's). The trace is written in UTC."
        ),
    ] = None,
    exclude_partition: Annotated[
        list[str] | None,
        typer.Option(
            help="Jobs of this partition do not count as busy (repeatable; '' for none) "
            "(default: the scavenger partition of agent.conf where one is readable)."
        ),
    ] = None,
    events: Annotated[
        Path | None,
        typer.Option(
            help="Output of `sacctmgr show event --parsable2 Start=T0 End=T1`: down and "
            "drained nodes, written busy and counted apart."
        ),
    ] = None,
) -> None:
    """Convert Slurm accounting into a node-state trace: a node is busy while any job
    holds it, idle otherwise."""
    from interstice.agents.slurm.accounting import parse_events, parse_sacct
    from interstice.agents.slurm.env import NodeListError, parse_node_list
    from interstice.agents.slurm.plan import slurm_time
    from interstice.replay.slurm_trace import convert

    if not out.name.endswith((".csv", ".csv.gz")):
        fail(f"--out {out}: the name must end in .csv or .csv.gz")
    zone = _zone(tz)
    window = []
    for option, text in (("--start", start), ("--end", end)):
        try:
            at = slurm_time(text, zone)
        except (ValueError, OverflowError, OSError):
            at = None
        if at is None:
            fail(f"{option} {text!r}: not an ISO 8601 time such as 2026-11-01T00:00:00")
        window.append(at)
    if window[0] >= window[1]:
        fail(f"--start {start} is not before --end {end}")
    try:
        node_names = _unique(parse_node_list(_node_text(nodes)))
    except NodeListError as error:
        fail(f"--nodes: {error}")
    if not node_names:
        fail("--nodes: no node names")
    excluded = _excluded(exclude_partition)
    jobs = _read(parse_sacct, sacct_file, "SACCT_FILE", zone)
    spells = _read(parse_events, events, "--events", zone) if events else None
    if excluded and "partition" not in (name.lower() for name in jobs.columns):
        fail(
            f"{sacct_file}: no Partition column, so jobs of {', '.join(sorted(excluded))} "
            "cannot be told apart (add Partition to --format, or give --exclude-partition '')"
        )
    kept = [job for job in jobs.allocations if job.partition not in excluded]
    busy = [(node, job.start, job.end) for job in kept for node in job.nodes]
    held = spells.allocations if spells else []
    down = [(node, spell.start, spell.end) for spell in held for node in spell.nodes]
    conversion = convert(node_names, window[0], window[1], busy, down)
    _write(out, conversion.text)

    for what, reading in (("SACCT_FILE", jobs), ("--events", spells)):
        if reading is None:
            continue
        if reading.skipped.get("job step"):
            _warn(
                f"{what}: {_count(reading.skipped['job step'], 'job step')} (JobID with a dot) "
                "ignored: run sacct with --allocations so that each job is one line"
            )
        if reading.skipped.get("unreadable"):
            _warn(
                f"{what}: {_count(reading.skipped['unreadable'], 'unreadable line')} skipped "
                f"(first: {reading.problems[0]})"
            )
    outside = sorted(conversion.outside_nodes)
    if outside:
        more = ", ..." if len(outside) > 5 else ""
        _warn(
            f"{len(outside)} nodes of the records are not in --nodes and are left out "
            f"({', '.join(outside[:5])}{more})"
        )
    total = conversion.nodes * conversion.window_s
    typer.echo(
        f"{out}: {conversion.nodes} nodes, {conversion.window_s} s, {conversion.rows} rows; "
        f"node-time idle {_share(conversion.idle_node_s, total)}, busy "
        f"{_share(conversion.busy_node_s, total)}, down {_share(conversion.down_node_s, total)}"
    )
    typer.echo(
        f"jobs: {len(kept)} used, {len(jobs.allocations) - len(kept)} in excluded "
        f"partitions ({', '.join(sorted(excluded)) or 'none'}), "
        f"{jobs.skipped.get('never started', 0)} never started"
    )


def _zone(name: str | None) -> tzinfo | None:
    """``--tz`` as a zone; None (this host's zone) where not given."""
    if name is None:
        return None
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError):  # ZoneInfoNotFoundError is a KeyError
        fail(f"--tz {name!r}: not a time zone name such as Europe/Paris or UTC")


def _node_text(nodes: str) -> str:
    """``--nodes`` as hostlist text: itself, or the file it names with ``@``, lines of
    hostlists (``#`` comments)."""
    if not nodes.startswith("@"):
        return nodes
    path = Path(nodes[1:])
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as error:
        fail(f"--nodes {nodes}: {error.strerror or error}")
    kept = (line.split("#", 1)[0].strip() for line in lines)
    # sinfo prints one hostlist per partition; several may be on a line, blank-separated.
    return ",".join(part for line in kept for part in line.split())


def _unique(names: list[str]) -> list[str]:
    """``names`` without repeats, in order (a node in two partitions is listed twice)."""
    return list(dict.fromkeys(names))


def _excluded(given: list[str] | None) -> set[str]:
    """The partitions whose jobs are not counted: ``--exclude-partition``, else agent.conf's
    scavenger partition where the file is readable, else none."""
    if given is not None:
        return {name for name in given if name}
    from interstice.agents.slurm.config import AgentConfError, conf_path, load_agent_conf

    path = conf_path(os.environ)
    if not path.exists():
        return set()
    try:
        return {load_agent_conf(path).partition}
    except AgentConfError as error:
        _warn(f"no partition excluded: {error} (give --exclude-partition)")
        return set()


def _read(
    parse: Callable[[str, tzinfo | None], Reading], path: Path, what: str, zone: tzinfo | None
) -> Reading:
    """``parse(text, zone)`` of the file (gzip where its name ends in .gz); exit 2 where it
    cannot be read or has no usable header."""
    from interstice.agents.slurm.accounting import AccountingFormatError

    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as error:
        fail(f"{what} {path}: {getattr(error, 'strerror', None) or error}")
    try:
        return parse(raw.decode(errors="replace"), zone)
    except AccountingFormatError as error:
        fail(f"{what} {path}: {error}")


def _write(path: Path, text: str) -> None:
    """Write the trace, gzip-compressed where the name ends in .gz."""
    try:
        if path.name.endswith(".gz"):
            synthetic_trace.write(path, text)
        else:
            path.write_text(text)
    except OSError as error:
        fail(f"--out {path}: {error.strerror or error}")


def _warn(message: str) -> None:
    typer.echo(f"warning: {message}", err=True)


def _count(number: int, thing: str) -> str:
    """``"1 job step"``, ``"2 job steps"``."""
    return f"{number} {thing}{'' if number == 1 else 's'}"


def _share(part: int, total: int) -> str:
    """``"12.3 node-h (4.5 %)"``."""
    return f"{part / 3600:.1f} node-h ({part / total:.1%})"
