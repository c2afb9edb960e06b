"""Cut allocation snapshots (``Problem`` JSON) from the real BFTrainer data.

Run from the repository root::

    python examples/make_snapshots.py

It writes, beside this script:

- ``snapshot-small.json``: the first trace instant on 2021-02-17 with 30 to 50 idle nodes
  (00:57:56, 30 idle),
  the first 6 jobs of the ImageNet jobs file (one per model but one), the first two holding
  some of the idle nodes as if a previous allocation had given them;
- ``snapshot-summit-4734.json``: the trace instant with the most idle nodes (4,654 of 4,734,
  2021-02-17 05:08), the first 24 jobs, every third one holding nodes.

Each snapshot's horizon is ``--horizon auto``'s value at that instant (mean residual idle time
of the intervals seen before it, at the pool's median idle age). Both feed
``interstice solve examples/snapshot-small.json``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from interstice.optimizer import Job, Problem, ScalabilityTable
from interstice.replay.horizon import AutoHorizon
from interstice.replay.jobs import JobSpec, load_jobs
from interstice.replay.trace import NodeTrace, load_trace

from interstice import data

HERE = Path(__file__).resolve().parent


def idle_counts(trace: NodeTrace) -> tuple[np.ndarray, np.ndarray]:
    """``(time_s, idle count after the changes at that time)`` at every trace timestamp."""
    window = trace.window(0, trace.duration_s + 1)
    idle = window.initial_idle.copy()
    counts = np.empty(len(window.event_time_s), dtype=np.int64)
    for event in range(len(window.event_time_s)):
        nodes, to_idle = window.changes(event)
        idle[nodes] = to_idle
        counts[event] = np.count_nonzero(idle)
    return window.event_time_s, counts


def snapshot(
    trace: NodeTrace,
    table: ScalabilityTable,
    specs: list[JobSpec],
    at_s: float,
    held_counts: list[int],
) -> Problem:
    """The Problem at ``at_s`` seconds after the trace start.

    Job ``k`` holds ``held_counts[k]`` of the idle nodes (in sorted order, never shared) and has
    all of its samples still to train.
    """
    window = trace.window(at_s, at_s + 1)
    idle_nodes = window.node_names[window.initial_idle].tolist()
    free = iter(idle_nodes)
    jobs = tuple(
        Job(
            job_id=spec.job_id,
            model=spec.model,
            min_nodes=spec.min_nodes,
            max_nodes=spec.max_nodes,
            nodes=tuple(next(free) for _ in range(held)),
            samples_remaining=spec.total_samples,
            rescale_up_s=spec.rescale_up_s,
            rescale_down_s=spec.rescale_down_s,
        )
        for spec, held in zip(specs, held_counts, strict=True)
    )
    horizon_s = AutoHorizon(trace, at_s)(0.0, window.initial_idle_since_s)
    return Problem(idle_nodes=tuple(idle_nodes), jobs=jobs, scalability=table, horizon_s=horizon_s)


def main() -> None:
    folder = data.data_dir()
    trace = load_trace(folder / data.TRACE_FILE)
    table = ScalabilityTable.from_csv((folder / data.SCALABILITY_FILE).read_text())
    specs = load_jobs(folder / data.IMAGENET_JOBS_FILE, table)
    times_s, counts = idle_counts(trace)

    day_s = (np.datetime64("2021-02-17T00:00:00") - trace.start) / np.timedelta64(1, "s")
    small_at = times_s[(times_s >= day_s) & (counts >= 30) & (counts <= 50)][0]
    peak_at = times_s[np.argmax(counts)]
    cuts = {
        "snapshot-small.json": snapshot(trace, table, specs[:6], small_at, [8, 4, 0, 0, 0, 0]),
        "snapshot-summit-4734.json": snapshot(
            trace, table, specs[:24], peak_at, [32 if k % 3 == 0 else 0 for k in range(24)]
        ),
    }
    for name, problem in cuts.items():
        path = HERE / name
        path.write_text(problem.model_dump_json(indent=1) + "\n")
        print(
            f"{path}: {len(problem.idle_nodes)} idle nodes, {len(problem.jobs)} jobs, "
            f"horizon {problem.horizon_s:.0f} s, {path.stat().st_size / 1024:.0f} KiB"
        )


if __name__ == "__main__":
    main()
