"""``interstice usage``: node-hours and samples harvested per user and day, like ``sreport``.

Reads ``GET /v1/usage`` with the same server, token and MUNGE rules as ``interstice job``
(:mod:`interstice.client_cli`). A user sees its own usage; an admin token sees every user's,
or ``--user``'s. Exit codes as ``interstice job``: 2 bad input or a 4xx answer (one line), 1
the service unreachable or 5xx.
"""

import json
from collections import defaultdict
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from interstice.client_cli import ServerOption, TokenOption, client, wide_console
from interstice.errors import fail

COLUMNS = ("user", "day", "node_hours", "samples", "jobs")
"""The fields of each row, in the order ``--parsable`` prints them."""


def _time(option: str, text: str | None) -> str | None:
    """``text`` if it is an ISO 8601 time (checked here, so a typo is one line naming the
    option); the service reads it as UTC when it has no offset."""
    if text is None:
        return None
    try:
        datetime.fromisoformat(text)
    except ValueError:
        fail(f"{option} must be an ISO 8601 time like 2026-01-31 or 2026-01-31T12:00, got {text!r}")
    return text


def usage_table(rows: list[dict[str, Any]]) -> Table:
    """The rows as ``sreport`` prints a user's utilization by day, with a total per user."""
    table = Table("User", "Day (UTC)", "Node-hours", "Samples", "Jobs", box=None)
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        table.add_row(row["user"], row["day"], f"{row['node_hours']:.2f}",
                      f"{row['samples']:.4g}", str(row["jobs"]))  # fmt: skip
        totals[row["user"]][0] += row["node_hours"]
        totals[row["user"]][1] += row["samples"]
    if rows:
        table.add_section()
    for user, (node_hours, samples) in totals.items():
        table.add_row(user, "total", f"{node_hours:.2f}", f"{samples:.4g}", "")
    return table


def usage(
    user: Annotated[
        str | None, typer.Option(help="Only this user (an admin token; a user sees itself).")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="From this time, ISO 8601, UTC without an offset.")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Until this time, ISO 8601 (default: now).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the service's JSON answer.")
    ] = False,
    parsable: Annotated[
        bool,
        typer.Option(
            "--parsable",
            help="One row a line, fields separated by |, a header first (as sacct --parsable2).",
        ),
    ] = False,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Node-hours and samples harvested per user and UTC day (like sreport/sacct)."""
    if as_json and parsable:
        fail("--json and --parsable both choose the output: give one")
    params = {
        name: value
        for name, value in (
            ("user", user),
            ("since", _time("--since", since)),
            ("until", _time("--until", until)),
        )
        if value is not None
    }
    answer = client(server, token).call("GET", "/v1/usage", params=params)
    if as_json:
        typer.echo(json.dumps(answer, indent=2))
    elif parsable:
        typer.echo("|".join(COLUMNS))
        for row in answer["data"]:
            typer.echo("|".join(str(row[name]) for name in COLUMNS))
    else:
        wide_console().print(usage_table(answer["data"]))
