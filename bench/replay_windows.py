"""Benchmark: the MILP against the greedy (and the rigid baseline) on eight fixed 48-hour windows.

Replays the real Summit node-state trace (``summit-node-state-2021-02.csv.gz``, found by
interstice.data) with a jobs file (default: BFTrainer's 1,001 ImageNet jobs, the first
arriving at each window's start) on eight windows spread over the two weeks, each 48 hours:

- ``s1``..``s4``: 192 nodes drawn with seeds 1..4 (as ``interstice replay --nodes 192
  --seed S``), from 2021-02-10T20:21:15 (the ImageNet jobs' first submission),
  2021-02-14T00:00, 2021-02-18T00:00 and 2021-02-22T00:00;
- ``a1``..``a4``: all 4,734 nodes, from 2021-02-12T00:00, 2021-02-16T00:00 (holds the
  2021-02-17 05:08 peak of 4,654 idle nodes), 2021-02-20T00:00 and 2021-02-22T22:00 (ends at
  2021-02-24T22:00, 19 min before the trace does).

Each window runs every policy of ``--policies`` (default ``milp,greedy,rigid``) through the
replay package (:func:`interstice.replay.simulator.replay`,
:func:`interstice.replay.rigid.replay_rigid`, :func:`interstice.replay.report.build_report`),
with the same settings as ``interstice replay``'s defaults (CP-SAT, horizon 300 s, no
admission cap, early finish 0.9) but for the horizon and the admin weights given here.

Prints one JSON line per (window, policy): harvest, harvest_ceiling (the harvest of the same
node counts without rescale pauses), goodput_samples, utilization, efficiency,
jobs_finished, jct_mean_s, efficiency_loss (per cause of a rescale pause),
node_hours_by_model (the allocated node-hours of each model's jobs), jct_h_by_model (the
mean JCT of each model's finished jobs, hours), solve_p99_s (the
policy's own time per solve, model building included),
solve_wall_p99_s (the simulator's wall time per solve: building the Problem and applying the
answer too) and replay_wall_s. Then one line per window with the ratios of the first policy
to each other: harvest, goodput, and mix = goodput / harvest (both policies see the same
idle node-seconds, so mix is the ratio of their samples per harvested node-second: below 1
when the first policy harvests its node time for slower models); against rigid also the mean
JCT over the jobs both finished. Then, per pair, one summary line over all windows run (min,
mean and max of each ratio, and in how many windows it was >= 1). Last, the load average
(the machine may be shared).

``--forecast none|exact|plan`` (with ``--forecast-coverage P --forecast-error F
--forecast-seed S`` for plan) tells the elastic policies the idle holes' ends as
``interstice replay --forecast`` does (:mod:`interstice.replay.forecast`); rigid ignores
them; they use them only while the coverage measured over the ended holes is at least
``--forecast-min-coverage`` (default 0.9, :mod:`interstice.optimizer.coverage`; 0: always),
and each policy's line gives ``forecast_solves`` and the final ``forecast_coverage``. The
first JSON line records the settings.

``--seeds 1,2,...`` replays each 192-node window once per node draw (``--nodes 192 --seed S``
for each S) instead of its own seed alone: the same start and 48 hours, other nodes. The
policies' differences move from draw to draw (a job that finishes a minute earlier changes
every later decision), so a claim about the policies is read over many draws, not one.

Usage: python bench/replay_windows.py [--windows s1,s2,...] [--policies milp,greedy,rigid]
    [--churn 0.1] [--fairness 0.1] [--objective throughput|speedup|node-seconds]
    [--priority-weight 1] [--completion-s TAU] [--reclaim-loss-s S] [--jobs FILE.csv]
    [--horizon 300|auto] [--rigid-nodes K]
    [--admission-efficiency 0.9] [--seeds 1,2,3]
    [--forecast none|exact|plan [--forecast-coverage 0.5 --forecast-error 0.5]]
    [--forecast-classes K] [--forecast-min-coverage C]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from interstice.optimizer import ScalabilityTable, Weights, admission
from interstice.optimizer.coverage import FORECAST_MIN_COVERAGE
from interstice.optimizer.problem import FORECAST_CLASSES
from interstice.replay.choices import OBJECTIVES, POLICIES, allocators, normalisation, sample_nodes
from interstice.replay.forecast import FORECASTS, ForecastSettings, HoleForecasts
from interstice.replay.horizon import AutoHorizon, FixedHorizon
from interstice.replay.jobs import load_jobs
from interstice.replay.report import build_report
from interstice.replay.rigid import replay_rigid
from interstice.replay.simulator import ReplayOptions, replay
from interstice.replay.trace import load_trace

from interstice import data

HOURS = 48.0
WINDOWS = {  # name: (start, nodes or None for all, seed of the node draw)
    "s1": ("2021-02-10T20:21:15", 192, 1),
    "s2": ("2021-02-14T00:00:00", 192, 2),
    "s3": ("2021-02-18T00:00:00", 192, 3),
    "s4": ("2021-02-22T00:00:00", 192, 4),
    "a1": ("2021-02-12T00:00:00", None, None),
    "a2": ("2021-02-16T00:00:00", None, None),
    "a3": ("2021-02-20T00:00:00", None, None),
    "a4": ("2021-02-22T22:00:00", None, None),
}
FIGURES = (
    "harvest",
    "harvest_ceiling",
    "goodput_samples",
    "utilization",
    "efficiency",
    "jobs_finished",
    "jct_mean_s",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default=",".join(WINDOWS), help="comma-separated names")
    parser.add_argument("--policies", default="milp,greedy,rigid", help="first one is the main")
    parser.add_argument("--jobs", help="jobs CSV (a priority column is read if present)")
    parser.add_argument("--churn", type=float, default=0.0)
    parser.add_argument("--fairness", type=float, default=0.0)
    parser.add_argument("--priority-weight", type=float, default=1.0)
    parser.add_argument(
        "--completion-s", type=float, help="tau of the completion term (default: Weights')"
    )
    parser.add_argument(
        "--reclaim-loss-s", type=float, default=0.0, help="a reclaim's cost beyond a shrink's"
    )
    parser.add_argument("--objective", choices=OBJECTIVES, default=None)
    parser.add_argument("--backend", choices=("cpsat", "cbc"), default="cpsat")
    parser.add_argument("--horizon", default="300", help="seconds, or auto")
    parser.add_argument("--rigid-nodes", type=int, help="rigid jobs' count (default: max_nodes)")
    parser.add_argument(
        "--admission-efficiency",
        type=float,
        default=admission.ADMISSION_EFFICIENCY,
        help="parallel efficiency at which admission counts a job's nodes (0: max_nodes)",
    )
    parser.add_argument(
        "--seeds",
        help="comma-separated node draws for the 192-node windows (default: each window's own)",
    )
    parser.add_argument(
        "--forecast", choices=FORECASTS, default="none", help="idle-hole forecasts (replay)"
    )
    parser.add_argument("--forecast-coverage", type=float, default=0.5, help="plan: P")
    parser.add_argument("--forecast-error", type=float, default=0.5, help="plan: F")
    parser.add_argument("--forecast-seed", type=int, default=0, help="plan: seed of the draws")
    parser.add_argument(
        "--forecast-classes",
        type=int,
        default=FORECAST_CLASSES,
        help="Problem.forecast_classes: classes of nodes forecast to leave within the horizon",
    )
    parser.add_argument(
        "--forecast-min-coverage",
        type=float,
        default=FORECAST_MIN_COVERAGE,
        help="Problem.forecast_min_coverage: forecasts are used only at this coverage or more",
    )
    args = parser.parse_args()
    try:
        forecast = ForecastSettings(
            args.forecast, args.forecast_coverage, args.forecast_error, args.forecast_seed
        )
    except ValueError as exc:
        sys.exit(str(exc))
    if args.forecast_classes < 1:
        sys.exit(f"--forecast-classes must be >= 1, got {args.forecast_classes}")
    if not 0 <= args.forecast_min_coverage <= 1:
        sys.exit(f"--forecast-min-coverage must be in [0, 1], got {args.forecast_min_coverage}")
    names = args.windows.split(",")
    policies = args.policies.split(",")
    unknown = [n for n in names if n not in WINDOWS] + [p for p in policies if p not in POLICIES]
    if unknown:
        sys.exit(f"unknown window or policy: {', '.join(unknown)}")

    folder = data.data_dir()
    table = ScalabilityTable.from_csv((folder / data.SCALABILITY_FILE).read_text())
    jobs_path = Path(args.jobs) if args.jobs else folder / data.IMAGENET_JOBS_FILE
    jobs = load_jobs(jobs_path, table)
    trace = load_trace(folder / data.TRACE_FILE)
    weights = Weights(
        **normalisation(args.objective),
        fairness=args.fairness,
        churn=args.churn,
        priority=args.priority_weight,
        **({} if args.completion_s is None else {"completion_s": args.completion_s}),
    )
    options = ReplayOptions(
        weights=weights,
        admission_efficiency=args.admission_efficiency,
        reclaim_loss_s=args.reclaim_loss_s,
        forecast_classes=args.forecast_classes,
        forecast_min_coverage=args.forecast_min_coverage,
    )
    run = allocators(args.backend)
    common = {
        "jobs": str(jobs_path),
        "weights": weights.model_dump(),
        "backend": args.backend,
        "horizon": args.horizon,
        "rigid_nodes": args.rigid_nodes,
        "admission_efficiency": args.admission_efficiency,
        "completion_s": weights.completion_s,
        "reclaim_loss_s": args.reclaim_loss_s,
        **forecast.report(),
        "forecast_classes": args.forecast_classes,
        "forecast_min_coverage": args.forecast_min_coverage,
    }
    print(json.dumps({"load_average_start": os.getloadavg(), **common}), flush=True)
    runs = []
    for name in names:
        start, n_nodes, seed = WINDOWS[name]
        draws = [int(s) for s in args.seeds.split(",")] if args.seeds and n_nodes else [seed]
        runs += [(name, start, n_nodes, draw) for draw in draws]
    all_ratios: dict[str, list[dict[str, float]]] = {}
    for name, start, n_nodes, seed in runs:
        start_s = float((np.datetime64(start, "s") - trace.start) / np.timedelta64(1, "s"))
        node_ids = None
        if n_nodes is not None:  # the draw of `interstice replay --nodes N --seed S`
            node_ids = sample_nodes(len(trace.node_names), n_nodes, seed)
        window = trace.window(start_s, start_s + HOURS * 3600, node_ids)
        if args.horizon == "auto":
            horizon = AutoHorizon(trace, start_s)
        else:
            horizon = FixedHorizon(float(args.horizon))
        holes = None
        if forecast.mode != "none":
            holes = HoleForecasts(trace, start_s, node_ids, forecast).remaining_s
        results = []
        for policy in policies:
            started = time.perf_counter()
            if policy == "rigid":
                result = replay_rigid(window, jobs, table, rigid_nodes=args.rigid_nodes)
            else:
                result = replay(
                    window,
                    jobs,
                    table,
                    run[policy],
                    horizon=horizon,
                    options=options,
                    name=policy,
                    forecast=holes,
                )
            results.append(result)
            figures = build_report({}, [result])["policies"][policy]
            line = {
                "window": name,
                "start": start,
                "nodes": len(window.node_names),
                "seed": seed,
                "policy": policy,
                **{key: figures[key] for key in FIGURES},
                "efficiency_loss": figures["efficiency_loss"],
                "node_hours_by_model": {
                    model: round(part["allocated_node_hours"], 1)
                    for model, part in figures["by_model"].items()
                },
                "jct_h_by_model": {
                    model: round(part["jct_mean_s"] / 3600, 2) if part["jct_mean_s"] else None
                    for model, part in figures["by_model"].items()
                },
                "solve_p99_s": figures["solve_time_s"]["p99"],
                "solve_wall_p99_s": figures["solve_wall_s"]["p99"],
                "solves": figures["solves"],
                "forecast_solves": figures["forecast_solves"],
                "forecast_coverage": figures["forecast_coverage"],
                "replay_wall_s": round(time.perf_counter() - started, 1),
            }
            print(json.dumps(line), flush=True)
        ratios = build_report({}, results)["ratios"]
        line = {"window": name, "nodes": len(window.node_names), "seed": seed}
        for pair, figures in ratios.items():
            line[pair] = {"harvest": figures["harvest"], "goodput": figures["goodput_samples"]}
            if figures["harvest"] and figures["goodput_samples"] is not None:
                # goodput ratio = harvest ratio x mix: the same idle node-seconds, so this is
                # the ratio of samples per harvested node-second (the models' best rates,
                # weighted by the node time each policy harvested for them).
                line[pair]["mix"] = figures["goodput_samples"] / figures["harvest"]
            if pair.endswith("/rigid"):
                line[pair]["jct_mean_same_jobs"] = figures["jct_mean_s_same_jobs"]
                line[pair]["same_jobs_finished"] = figures["same_jobs_finished"]
            all_ratios.setdefault(pair, []).append(line[pair])
        print(json.dumps(line), flush=True)
    for pair, lines in all_ratios.items():
        print(json.dumps({"summary": pair, "windows": len(lines), **spread(lines)}), flush=True)
    print(json.dumps({"load_average_end": os.getloadavg()}), flush=True)


def spread(lines: list[dict[str, float | None]]) -> dict[str, dict[str, float | int]]:
    """Per ratio of ``lines`` (one mapping of ratios per window): min, mean, max and the
    number of windows where it is >= 1 (``at_least_1``), over the windows where it is defined.
    """
    figures: dict[str, dict[str, float | int]] = {}
    for key in lines[0]:
        values = np.array([line[key] for line in lines if line[key] is not None], dtype=float)
        if key == "same_jobs_finished" or not len(values):
            continue
        figures[key] = {
            "min": float(values.min()),
            "mean": float(values.mean()),
            "max": float(values.max()),
            "at_least_1": int((values >= 1).sum()),
        }
    return figures


if __name__ == "__main__":
    main()
