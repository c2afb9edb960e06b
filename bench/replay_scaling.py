"""Benchmark of the replay's time and memory against the size of the node-state trace.

For each ``--nodes`` count, a synthetic trace of that many nodes over ``--days`` days
(:func:`interstice.synthetic_trace.generate`, seed 0: about 12 rows a node a day, the Summit
trace's rate), moved to the second as a trace from ``interstice trace from-slurm`` is
(:func:`to_seconds`), is written to a temporary file, then:

- ``trace`` stage: :func:`~interstice.replay.trace.load_trace`, the whole window, and the
  report's trace figures (:mod:`interstice.replay.idle`: idle node-hours per day, holes);
- each ``--policies`` policy replayed on the whole window with the same jobs (the first
  ``--jobs`` jobs of BFTrainer's ImageNet list, the ImageNet table; horizon 300 s, CP-SAT for
  ``milp``, ``--min-solve-interval``).

Each stage runs twice: under :mod:`tracemalloc` for its peak of traced memory (numpy's
arrays included), then timed (``time.perf_counter``). Prints JSON lines:

- ``{"cpus", "load1_at_start"}``, then ``{"load1_at_end"}`` (the machine may be shared:
  compare figures within one run);
- per size and stage ``{"nodes", "rows", "events", "stage", "wall_s", "peak_mib",
  "us_per_row", "bytes_per_row", "time_ratio", "memory_ratio"}``: ``rows`` the trace's data
  rows, ``events`` its window's distinct timestamps; the ratios are the stage's time and peak
  memory per row over the same stage's at the first (baseline) size of the run: 1 where
  the stage grows linearly in the rows.

Usage: ``python bench/replay_scaling.py [--nodes 625 1250 2500 5000 10000] [--days 1]
[--policies greedy rigid] [--jobs 100] [--min-solve-interval 0]``. Needs the BFTrainer data
folder (:func:`interstice.data.data_dir`) for the jobs and the table.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from interstice.optimizer import ScalabilityTable
from interstice.replay import idle
from interstice.replay.choices import allocators
from interstice.replay.horizon import FixedHorizon
from interstice.replay.jobs import load_jobs
from interstice.replay.rigid import replay_rigid
from interstice.replay.simulator import ReplayOptions, replay
from interstice.replay.trace import load_trace

from interstice import data, synthetic_trace


def measure(stage: Callable[[], Any]) -> tuple[float, float, Any]:
    """``(wall_s, peak_mib, result)`` of ``stage``: one traced run, then one timed run (the
    first also warms the caches and imports, which would weigh on the baseline alone)."""
    tracemalloc.start()
    stage()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    started = time.perf_counter()
    result = stage()
    wall_s = time.perf_counter() - started
    return wall_s, peak / 2**20, result


def to_seconds(text: str) -> str:
    """``text`` (a synthetic trace, 10 s resolution) with every change moved later by a
    seeded 0-9 s: to the second, as a trace converted from Slurm's records is. A node's
    changes are at least 10 s apart, so each keeps its order; the first timestamp (every
    node's state) and the last (the trace's end) stay."""
    header, *rows = text.splitlines()
    fields = np.array([row.split(",", 2) for row in rows])
    times = fields[:, 0].astype("datetime64[s]")
    inner = (times > times[0]) & (times < times[-1])
    jitter = np.random.default_rng(0).integers(0, 10, len(rows))
    times = times + np.where(inner, jitter, 0).astype("timedelta64[s]")
    lines = [header] + [
        f"{t},{node},{state}" for t, (_, node, state) in zip(times, fields, strict=True)
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[625, 1250, 2500, 5000, 10000])
    parser.add_argument("--days", type=int, default=1)
    parser.add_argument("--policies", nargs="+", default=["greedy", "rigid"])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--min-solve-interval", type=float, default=0.0)
    args = parser.parse_args()
    folder = data.data_dir()
    table = ScalabilityTable.from_csv((folder / data.SCALABILITY_FILE).read_text())
    jobs = load_jobs(folder / data.IMAGENET_JOBS_FILE, table)[: args.jobs]
    policies = allocators("cpsat")
    options = ReplayOptions(min_solve_interval_s=args.min_solve_interval)
    print(json.dumps({"cpus": os.cpu_count(), "load1_at_start": os.getloadavg()[0]}))
    baseline: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in args.nodes:
            path = Path(tmp) / f"trace-{nodes}.csv"
            path.write_text(to_seconds(synthetic_trace.generate(nodes=nodes, days=args.days)))

            def offer(path: Path = path) -> Any:
                trace = load_trace(path)
                window = trace.window(0, trace.duration_s)
                holes = idle.hole_lengths(window)
                reference = idle.Reference("this", path, "", holes[0])
                return window, idle.trace_figures(window, holes, reference)

            stages: dict[str, Callable[[], Any]] = {"trace": offer}
            wall_s, peak_mib, (window, _) = measure(offer)
            rows = len(path.read_text().splitlines()) - 1
            for name in args.policies:
                if name == "rigid":
                    stages[name] = lambda window=window: replay_rigid(window, jobs, table)
                else:
                    stages[name] = lambda window=window, name=name: replay(
                        window,
                        jobs,
                        table,
                        policies[name],
                        horizon=FixedHorizon(300.0),
                        options=options,
                        name=name,
                    )
            for stage, run in stages.items():
                if stage != "trace":
                    wall_s, peak_mib, _ = measure(run)
                per_row = (wall_s / rows, peak_mib / rows)
                base = baseline.setdefault(stage, per_row)
                line = {
                    "nodes": nodes,
                    "rows": rows,
                    "events": len(window.event_time_s),
                    "stage": stage,
                    "wall_s": round(wall_s, 3),
                    "peak_mib": round(peak_mib, 2),
                    "us_per_row": round(per_row[0] * 1e6, 2),
                    "bytes_per_row": round(per_row[1] * 2**20, 1),
                    "time_ratio": round(per_row[0] / base[0], 2),
                    "memory_ratio": round(per_row[1] / base[1], 2),
                }
                print(json.dumps(line), flush=True)
    print(json.dumps({"load1_at_end": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
