"""Benchmark of reading a scalability table: ``ScalabilityTable.from_csv`` (parse and the
checks of every row) and the per-model curves the first solve builds, for tables of
``models`` x ``rows`` (node counts 1..rows, depth 0), of the sizes ``--sizes`` names.

Prints JSON lines ``{"models", "rows", "csv_bytes", "parse_s", "curves_s"}`` (wall-clock
seconds, best of ``--repeats``), after ``{"cpus", "load1_at_start"}`` (the machine may be
shared: compare figures within one run).

Usage: ``python bench/scalability_table.py [--sizes 8000x1,5000x8,10000x4] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from interstice.optimizer import ScalabilityTable


def table_csv(models: int, rows: int) -> str:
    """A table of ``models`` models with ``rows`` rows each (1..rows nodes), as CSV."""
    lines = [f"m{m},{n},{10 * n}" for m in range(models) for n in range(1, rows + 1)]
    return "\n".join(["model,nodes,samples_per_s", *lines]) + "\n"


def measure(text: str) -> tuple[float, float]:
    """Seconds to parse ``text`` and to build its curves (listing the models does)."""
    started = time.perf_counter()
    table = ScalabilityTable.from_csv(text)
    parsed = time.perf_counter()
    sorted(table.models)
    return parsed - started, time.perf_counter() - parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8000x1,5000x8,10000x4", help="MODELSxROWS,...")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    print(json.dumps({"cpus": os.cpu_count(), "load1_at_start": os.getloadavg()[0]}))
    for size in options.sizes.split(","):
        models, rows = (int(part) for part in size.split("x"))
        text = table_csv(models, rows)
        parse_s, curves_s = min(measure(text) for _ in range(options.repeats))
        print(
            json.dumps(
                {
                    "models": models,
                    "rows": rows,
                    "csv_bytes": len(text.encode()),
                    "parse_s": round(parse_s, 3),
                    "curves_s": round(curves_s, 3),
                }
            )
        )


if __name__ == "__main__":
    main()
