"""The jobs file of a replay: which elastic jobs arrive when, and how much they must train.

Layout (``jobs-imagenet-1001.csv``, see ``shared/data/README.md``): columns ``job_id, model,
submit_time, min_nodes, max_nodes, total_samples, rescale_up_s, rescale_down_s``, an
optional ``priority`` (> 0, default 1: the multiplier of the job's term in the objective) and
an optional ``user`` (who submitted it: the unit of the objective's fairness term and of fair
admission; empty or absent: a user of its own). A replay
keeps only the spacing of the submit times: they become offsets from the first job's, and the
first job arrives at the replay window's start.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from interstice.optimizer import ScalabilityTable

COLUMNS = (
    "job_id",
    "model",
    "submit_time",
    "min_nodes",
    "max_nodes",
    "total_samples",
    "rescale_up_s",
    "rescale_down_s",
)


@dataclass(frozen=True)
class JobSpec:
    """One job of the jobs file.

    Attributes:
        job_id: unique id.
        model: a model of the scalability table.
        submit_offset_s: seconds after the first job's submission, >= 0.
        min_nodes: fewest nodes it runs on, >= 1.
        max_nodes: most nodes it uses, capped at the table's largest measured count for its
            model (the optimizer never extrapolates a rate).
        total_samples: samples of full-backprop progress to train before it is done, > 0.
        rescale_up_s: seconds without progress after it grows (or starts), >= 0.
        rescale_down_s: seconds without progress after it shrinks, >= 0.
        priority: multiplier of its term in the objective, > 0 (column ``priority``, default 1).
        user: who submitted it (column ``user``); ``None``: a user of its own.
    """

    job_id: str
    model: str
    submit_offset_s: float
    min_nodes: int
    max_nodes: int
    total_samples: float
    rescale_up_s: float
    rescale_down_s: float
    priority: float = 1.0
    user: str | None = None


def load_jobs(path: Path, table: ScalabilityTable) -> list[JobSpec]:
    """Read a jobs CSV, checked against the scalability table.

    Args:
        path: the CSV file.
        table: the scalability table the replay uses.

    Returns:
        The jobs in submission order (stable for equal times), offsets from the earliest one.

    Raises:
        OSError: the file cannot be read.
        ValueError: a missing column, a bad value (priority <= 0 included), a duplicate
            job_id, a model not in the table, or min_nodes above the table's largest count
            for the model (the message names the line); or no rows.
    """
    reader = csv.DictReader(io.StringIO(path.read_text()))
    missing = set(COLUMNS) - set(reader.fieldnames or ())
    if missing:
        raise ValueError(f"{path.name}: missing column(s) {', '.join(sorted(missing))}")
    rows: list[tuple[datetime, int, dict[str, str]]] = []
    seen: set[str] = set()
    for line, row in enumerate(reader, start=2):
        try:
            submitted = datetime.fromisoformat(row["submit_time"])
        except (TypeError, ValueError):
            raise ValueError(
                f"{path.name} line {line}: bad submit_time {row['submit_time']!r}"
            ) from None
        if row["job_id"] in seen:
            raise ValueError(f"{path.name} line {line}: job_id {row['job_id']!r} listed twice")
        seen.add(row["job_id"])
        rows.append((submitted, line, row))
    if not rows:
        raise ValueError(f"{path.name}: no rows")
    rows.sort(key=lambda item: item[0])
    first = rows[0][0]
    return [
        _job_spec(row, (t - first).total_seconds(), table, f"{path.name} line {line}")
        for t, line, row in rows
    ]


def _job_spec(row: dict[str, str], offset_s: float, table: ScalabilityTable, where: str) -> JobSpec:
    model = row["model"]
    if model not in table.models:
        raise ValueError(f"{where}: model {model!r} is not in the scalability table")
    try:
        spec = JobSpec(
            job_id=row["job_id"],
            model=model,
            submit_offset_s=offset_s,
            min_nodes=int(row["min_nodes"]),
            max_nodes=min(int(row["max_nodes"]), table.max_nodes(model)),
            total_samples=float(row["total_samples"]),
            rescale_up_s=float(row["rescale_up_s"]),
            rescale_down_s=float(row["rescale_down_s"]),
            priority=float(row.get("priority") or 1.0),
            user=(row.get("user") or "").strip() or None,
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {str(exc).splitlines()[0]}") from None
    if not spec.job_id:
        raise ValueError(f"{where}: empty job_id")
    if spec.min_nodes < 1 or spec.min_nodes > spec.max_nodes:
        raise ValueError(
            f"{where}: need 1 <= min_nodes {spec.min_nodes} <= max_nodes {spec.max_nodes} "
            f"(capped at the table's largest count for {model!r})"
        )
    if not spec.total_samples > 0:
        raise ValueError(f"{where}: total_samples must be > 0")
    if not spec.priority > 0 or spec.priority == float("inf"):
        raise ValueError(f"{where}: priority must be a number > 0, got {row.get('priority')!r}")
    if not (spec.rescale_up_s >= 0 and spec.rescale_down_s >= 0):
        raise ValueError(f"{where}: rescale_up_s and rescale_down_s must be >= 0")
    return spec
