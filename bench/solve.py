"""Benchmark: solve latency of the allocation MILP, both backends, against a BFTrainer-style
node x job formulation.

Prints one JSON line per (case, backend): {"jobs", "nodes", "depths", "backend", "p50_s",
"p99_s", "status"} over repeated solves (model building included; a fresh random instance
per repeat, seeds 0..repeats-1), then one line with the speed-up of our count formulation
over the node x job one on the small case, as a ratio of p50s measured in this process.

Cases: 10 jobs x 128 nodes (depth 0 only) and 200 jobs x 10,000 nodes x 4 SPB depths. The
depth-0 rates are the real table ``imagenet-scalability.csv`` (found by interstice.data);
the rows for depths 1-3 are SYNTHETIC (rate x (1 + 0.1 d), progress_per_sample 1 - 0.05 d,
see interstice.optimizer.synthetic), not measured.

The baseline ("bftrainer-cbc") is BFTrainer's formulation style (arXiv 2106.12091, Sec. 3):
one binary x_{node}_{job} per (node, job) pair, each node to at most one job, a job's count
= sum_node x, linked to the same option binaries and coefficients as ours (so both reach the
same optimum, checked below); built and solved with PuLP's CBC like our cbc backend.

Usage: .venv/bin/python bench/solve.py [--repeats-small 50] [--repeats-large 20]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import Counter

import numpy as np
import pulp
from interstice.optimizer import BACKENDS, Problem, ScalabilityTable, greedy, solve
from interstice.optimizer.formulation import Options, build_options
from interstice.optimizer.synthetic import random_problem, with_synthetic_depths

from interstice import data


def bftrainer_style(problem: Problem) -> tuple[float, str]:
    """Solve ``problem`` with node x job binaries (the baseline); returns (objective, status)."""
    options: Options = build_options(problem)
    model = pulp.LpProblem("bftrainer_style", pulp.LpMaximize)
    z = [pulp.LpVariable(name, cat=pulp.LpBinary) for name in options.names()]
    x = {
        (node, j): pulp.LpVariable(f"x_{i}_{j}", cat=pulp.LpBinary)
        for i, node in enumerate(problem.idle_nodes)
        for j in range(len(problem.jobs))
    }
    model.setObjective(pulp.LpAffineExpression(zip(z, options.value.tolist(), strict=True)))
    starts = options.start.tolist()
    for j in range(len(problem.jobs)):
        lo, hi = starts[j], starts[j + 1]
        model.addConstraint(pulp.LpAffineExpression([(v, 1) for v in z[lo:hi]]) == 1)
        count = [
            (z[i], -n) for i, n in zip(range(lo, hi), options.count[lo:hi].tolist(), strict=True)
        ]
        nodes = [(x[(node, j)], 1) for node in problem.idle_nodes]
        model.addConstraint(pulp.LpAffineExpression(nodes + count) == 0)  # count = sum_node x
    for node in problem.idle_nodes:
        model.addConstraint(
            pulp.LpAffineExpression([(x[(node, j)], 1) for j in range(len(problem.jobs))]) <= 1
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=problem.time_limit_s))
    return float(pulp.value(model.objective) or 0.0), pulp.LpStatus[model.status]


def timed(solver, problems: list[Problem]) -> tuple[list[float], list[str], list[float]]:
    seconds, statuses, objectives = [], [], []
    for problem in problems:
        started = time.perf_counter()
        answer = solver(problem)
        seconds.append(time.perf_counter() - started)
        if isinstance(answer, tuple):
            objective, status = answer
        else:
            objective, status = answer.objective, answer.status
        statuses.append(status)
        objectives.append(objective)
    return seconds, statuses, objectives


def line(problem: Problem, depths: int, backend: str, seconds: list[float], statuses) -> dict:
    counts = Counter(statuses)
    return {
        "jobs": len(problem.jobs),
        "nodes": len(problem.idle_nodes),
        "depths": depths,
        "backend": backend,
        "p50_s": round(float(np.percentile(seconds, 50)), 5),
        "p99_s": round(float(np.percentile(seconds, 99)), 5),
        "status": ",".join(f"{s}:{n}" for s, n in sorted(counts.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats-small", type=int, default=50)
    parser.add_argument("--repeats-large", type=int, default=20)
    args = parser.parse_args()
    path = data.data_dir() / data.SCALABILITY_FILE
    if not path.is_file():
        sys.exit(f"bench/solve.py: {path} is absent (set INTERSTICE_DATA_DIR)")
    table = ScalabilityTable.from_csv(path.read_text())
    cases = [
        (1, [random_problem(table, 10, 128, seed=s) for s in range(args.repeats_small)]),
        (
            4,
            [
                random_problem(with_synthetic_depths(table, 4), 200, 10_000, seed=s)
                for s in range(args.repeats_large)
            ],
        ),
    ]
    solve(cases[0][1][0], "cbc"), solve(cases[0][1][0], "cpsat")  # warm imports
    p50 = {}
    for depths, problems in cases:
        found = {}
        for backend in (*BACKENDS, "greedy"):
            run = greedy if backend == "greedy" else lambda p, b=backend: solve(p, b)
            seconds, statuses, objectives = timed(run, problems)
            found[backend] = objectives
            p50[(depths, backend)] = float(np.percentile(seconds, 50))
            print(json.dumps(line(problems[0], depths, backend, seconds, statuses)), flush=True)
        if depths == 1:
            seconds, statuses, objectives = timed(bftrainer_style, problems)
            p50[(depths, "bftrainer-cbc")] = float(np.percentile(seconds, 50))
            print(json.dumps(line(problems[0], depths, "bftrainer-cbc", seconds, statuses)))
            found["bftrainer-cbc"] = objectives
        reference = np.array(found["cbc"])
        for backend, objectives in found.items():
            gap = float(np.max(np.abs(np.array(objectives) - reference) / np.abs(reference)))
            print(json.dumps({"depths": depths, "backend": backend, "max_rel_gap_vs_cbc": gap}))
    for backend in BACKENDS:
        ratio = p50[(1, "bftrainer-cbc")] / p50[(1, backend)]
        print(json.dumps({"speedup_p50_vs_bftrainer_cbc": round(ratio, 2), "backend": backend}))


if __name__ == "__main__":
    main()
