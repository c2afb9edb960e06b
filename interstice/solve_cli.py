"""``interstice solve``: solve one allocation snapshot and print the answer as JSON.

The optimizer and its solvers are imported inside the command, so ``interstice --help``
stays light.
"""

from pathlib import Path
from typing import Annotated, Literal

import typer

from interstice.errors import fail


def solve(
    snapshot: Annotated[
        Path,
        typer.Argument(help="JSON of a Problem, as written by Problem.model_dump_json()."),
    ],
    backend: Annotated[
        Literal["cbc", "cpsat"],
        typer.Option(help="MILP backend: cbc (PuLP's CBC) or cpsat (OR-Tools CP-SAT)."),
    ] = "cbc",
    time_limit: Annotated[
        float | None,
        typer.Option("--time-limit", help="Solver limit, seconds; overrides time_limit_s.", min=0),
    ] = None,
) -> None:
    """Allocate the snapshot's idle nodes to its jobs; print the Allocation as JSON.

    Output fields:
    status: optimal (proven), feasible (best incumbent at the time limit),
    or fallback (no incumbent: the greedy answer, backend "greedy");
    objective: weighted samples over the horizon; backend; termination
    (the solver's reason); solve_time_s (building included); horizon_s;
    jobs: per job its job_id, node_count, node_names (sorted; a superset
    or subset of the nodes it held), spb_depth, samples_per_s, goodput
    (samples of progress over the horizon) and rescaled.

    A bad snapshot exits with code 2 and one line naming the field.
    """
    from pydantic import ValidationError

    from interstice.optimizer import Problem
    from interstice.optimizer import solve as solve_problem

    try:
        text = snapshot.read_text()
    except OSError as exc:
        fail(f"{snapshot}: cannot read the snapshot: {exc.strerror or exc}")
    except UnicodeDecodeError:
        fail(f"{snapshot}: the snapshot is not UTF-8 text")
    try:
        problem = Problem.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        where = where.removeprefix(".") or "snapshot"
        message = first["msg"].removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        fail(f"{snapshot}: {where}: {message}{more}")
    if time_limit is not None:
        if time_limit <= 0:
            fail(f"--time-limit must be > 0, got {time_limit}")
        problem = problem.model_copy(update={"time_limit_s": time_limit})
    typer.echo(solve_problem(problem, backend=backend).model_dump_json(indent=2))
