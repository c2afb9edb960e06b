"""Build ``jobs-mixed.csv``: a workload a greedy allocator cannot do well, from the real table.

Run from the repository root::

    python examples/make_mixed_jobs.py                  # writes examples/jobs-mixed.csv
    python examples/make_mixed_jobs.py --add-priorities-to \\
        ../shared/data/bftrainer/jobs-imagenet-1001.csv --out /tmp/jobs-imagenet-priority.csv

The mixed workload (seed 0, 600 jobs, the seven models of BFTrainer's
``imagenet-scalability.csv`` in turn):

- arrivals: a Poisson process, one job a minute on average, from 2021-02-10T20:21:15 (the
  ImageNet jobs file's first submission);
- node bounds: a third elastic (1..64 nodes), a third all or nothing at a size, min = max in
  {4, 8, 16, 32}, a third with a floor, min in {2, 4, 8}, max 64;
- rescale costs that differ per job: ``rescale_up_s`` log-uniform in [5, 120] s (the ImageNet
  jobs' 17-19 s inside), ``rescale_down_s`` 0.6 of it;
- work: ``total_samples`` = node-hours log-uniform in [2, 40] times 3,600 times the model's best
  per-node samples/s in the table, rounded to 1,000 samples (so every model's jobs are of like
  size in dedicated node-hours, not in samples);
- ``priority``: 1 (70 %), 2 (20 %) or 4 (10 %).

``--add-priorities-to FILE`` instead copies a jobs file and adds a ``priority`` column drawn
the same way (1/2/4 at 70/20/10 %), for replays of the real job list with priorities.
"""

from __future__ import annotations

import argparse
import csv
import io
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from interstice.optimizer import ScalabilityTable
from interstice.replay.jobs import COLUMNS as JOB_COLUMNS

from interstice import data

HERE = Path(__file__).resolve().parent
FIRST_SUBMIT = datetime(2021, 2, 10, 20, 21, 15)
COLUMNS = (*JOB_COLUMNS, "priority")  # the replay's jobs file with its optional column
PRIORITIES = (1, 2, 4)
PRIORITY_SHARES = (0.7, 0.2, 0.1)


def best_per_node_samples_per_s(table: ScalabilityTable, model: str) -> float:
    """The model's largest samples/s per node over its measured depth-0 counts."""
    counts = range(1, table.max_nodes(model) + 1)
    return max(table.samples_per_s(model, n) / n for n in counts)


def mixed_jobs(table: ScalabilityTable, count: int, seed: int) -> list[dict[str, object]]:
    """The mixed workload's rows (module docstring), in submission order."""
    rng = np.random.default_rng(seed)
    models = sorted(table.models)
    submit_s = np.cumsum(rng.exponential(60.0, count))
    submit_s -= submit_s[0]
    rows = []
    for k in range(count):
        model = models[k % len(models)]
        top = table.max_nodes(model)
        kind = k % 3
        if kind == 0:
            lo, hi = 1, top
        elif kind == 1:
            lo = hi = min(top, int(rng.choice([4, 8, 16, 32])))
        else:
            lo, hi = min(top, int(rng.choice([2, 4, 8]))), top
        up_s = float(np.exp(rng.uniform(np.log(5.0), np.log(120.0))))
        node_hours = float(np.exp(rng.uniform(np.log(2.0), np.log(40.0))))
        total = node_hours * 3600 * best_per_node_samples_per_s(table, model)
        rows.append(
            {
                "job_id": f"M{k:04d}",
                "model": model,
                "submit_time": (FIRST_SUBMIT + timedelta(seconds=float(submit_s[k]))).isoformat(
                    timespec="seconds"
                ),
                "min_nodes": lo,
                "max_nodes": hi,
                "total_samples": int(round(total, -3)),
                "rescale_up_s": round(up_s, 3),
                "rescale_down_s": round(0.6 * up_s, 3),
                "priority": int(rng.choice(PRIORITIES, p=PRIORITY_SHARES)),
            }
        )
    return rows


def with_priorities(path: Path, seed: int) -> tuple[list[str], list[dict[str, str]]]:
    """The rows of the jobs file ``path`` with a seeded ``priority`` column added."""
    reader = csv.DictReader(io.StringIO(path.read_text()))
    rows = list(reader)
    rng = np.random.default_rng(seed)
    for row, priority in zip(
        rows, rng.choice(PRIORITIES, len(rows), p=PRIORITY_SHARES), strict=True
    ):
        row["priority"] = str(int(priority))
    return [*(reader.fieldnames or ()), "priority"], rows


def write_csv(path: Path, columns: list[str] | tuple[str, ...], rows: list[dict]) -> None:
    """Write ``rows`` under ``columns`` to ``path``."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=600, help="Jobs in the mixed workload.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of every draw.")
    parser.add_argument(
        "--add-priorities-to", type=Path, help="Copy this jobs file, adding priorities."
    )
    parser.add_argument("--out", type=Path, default=HERE / "jobs-mixed.csv", help="CSV to write.")
    args = parser.parse_args()
    if args.add_priorities_to is not None:
        columns, rows = with_priorities(args.add_priorities_to, args.seed)
        write_csv(args.out, columns, rows)
    else:
        table_path = data.data_dir() / data.SCALABILITY_FILE
        table = ScalabilityTable.from_csv(table_path.read_text())
        write_csv(args.out, COLUMNS, mixed_jobs(table, args.jobs, args.seed))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
