"""Benchmark: solve latency of the allocation MILP, both backends, against a BFTrainer-style
node x job formulation.

Prints one JSON line per (case, backend): {"jobs", "nodes", "depths", "backend", "p50_s",
"p99_s", "status", "cpu_p50_s", "cpu_p99_s"} over repeated solves (wall-clock and CPU
seconds, CBC's subprocess included; model building included; a fresh random instance per
repeat, seeds 0..repeats-1); one line per case with the binaries the solvers get
(formulation's options, and those kept by the bound reduction (iii)) over the instances that
needed a solver; the load average at start and end (the machine is shared: compare CPU
times across runs, wall times only within one); then the speed-up of our count formulation
over the node x job one on the small case, as a ratio of p50s measured in this process.

``--forecast-share S`` (default 0: none) gives a share S of each instance's idle nodes a
forecast end (``Problem.idle_forecast_s``), uniform in [0, 2H] (seeded per instance), so
about S / 2 of the nodes are forecast to leave within the horizon and constraints (3) of the
formulation bind; ``--forecast-classes K`` sets ``Problem.forecast_classes`` (default: the
Problem's). The bftrainer baseline is left out then (it has no forecasts).

Cases: 10 jobs x 128 nodes (depth 0 only; max_nodes 8-64) and 200 jobs x 10,000 nodes x 4
SPB depths (max_nodes 64 each, so capacity binds). The depth-0 rates are the real table
``imagenet-scalability.csv`` (found by interstice.data); the rows for depths 1-3 are
SYNTHETIC (rate x (1 + 0.1 d), progress_per_sample 1 - 0.05 d, see
interstice.optimizer.synthetic), not measured.

The baseline ("bftrainer-cbc") is BFTrainer's formulation style (arXiv 2106.12091, progMIP.py):
one binary x_{node}_{job} per (node, job) pair, each node to at most one job, a job's count
= sum_node x, linked to the same option binaries and coefficients as ours (so both reach the
same optimum when it finishes within the problem's 10 s time limit: max_rel_gap_vs_cbc and its
status show whether it did); built and solved with PuLP's CBC like our cbc backend.

Usage: .venv/bin/python bench/solve.py [--repeats-small 50] [--repeats-large 20]
    [--forecast-share 0.5] [--forecast-classes K]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings
from collections import Counter

import numpy as np
import pulp
from interstice.optimizer import BACKENDS, Problem, ScalabilityTable, greedy, solve
from interstice.optimizer.formulation import Options, bound_reduction, build_options
from interstice.optimizer.policies import greedy_choice
from interstice.optimizer.synthetic import random_problem, with_synthetic_depths

from interstice import data


def bftrainer_style(problem: Problem) -> tuple[float, str]:
    """Solve ``problem`` with node x job binaries (the baseline); returns (objective, status):
    the solution status, ``Optimal Solution Found`` or ``Solution Found`` (time limit hit).

    x_{i}_{j}: node i goes to job j; each node to at most one job; a job's count
    sum_i x_{i}_{j} equals the count of its chosen option (our z binaries and coefficients,
    so the optimum is the same); no migration as in BFTrainer: a binary g_j lets job j take
    nodes it does not hold only if it keeps all it holds (superset), else it keeps a subset.
    """
    options: Options = build_options(problem)
    jobs = range(len(problem.jobs))
    model = pulp.LpProblem("bftrainer_style", pulp.LpMaximize)
    z = [pulp.LpVariable(name, cat=pulp.LpBinary) for name in options.names()]
    x = [
        [pulp.LpVariable(f"x_{i}_{j}", cat=pulp.LpBinary) for j in jobs]
        for i in range(len(problem.idle_nodes))
    ]
    model.setObjective(pulp.LpAffineExpression(zip(z, options.value.tolist(), strict=True)))
    starts = options.start.tolist()
    for j, job in enumerate(problem.jobs):
        lo, hi = starts[j], starts[j + 1]
        model.addConstraint(pulp.LpAffineExpression([(v, 1) for v in z[lo:hi]]) == 1)
        counts = options.count[lo:hi].tolist()
        chosen = [(z[k], -n) for k, n in zip(range(lo, hi), counts, strict=True)]
        assigned = [(x[i][j], 1) for i in range(len(problem.idle_nodes))]
        model.addConstraint(pulp.LpAffineExpression(assigned + chosen) == 0)
        if job.nodes:
            grows = pulp.LpVariable(f"g_{j}", cat=pulp.LpBinary)
            held = set(job.nodes)
            for i, node in enumerate(problem.idle_nodes):
                if node in held:
                    model.addConstraint(x[i][j] - grows >= 0)
                else:
                    model.addConstraint(x[i][j] - grows <= 0)
    for row in x:
        model.addConstraint(pulp.LpAffineExpression([(v, 1) for v in row]) <= 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=problem.time_limit_s))
    # PuLP reports an incumbent found before the time limit as status Optimal: the solution
    # status tells them apart (LpSolutionIntegerFeasible = stopped without a proof).
    return float(pulp.value(model.objective) or 0.0), pulp.LpSolution[model.sol_status]


def with_forecasts(problem: Problem, share: float, classes: int | None, seed: int) -> Problem:
    """``problem`` with a forecast end for a share ``share`` of its idle nodes, uniform in
    [0, 2H] seconds (seeded), and ``forecast_classes`` ``classes`` where given."""
    rng = np.random.default_rng(seed)
    known = rng.random(len(problem.idle_nodes)) < share
    ends = rng.uniform(0, 2 * problem.horizon_s, len(problem.idle_nodes))
    forecast = {n: float(e) for n, e, k in zip(problem.idle_nodes, ends, known, strict=True) if k}
    fields = {name: getattr(problem, name) for name in Problem.model_fields}
    fields["idle_forecast_s"] = forecast
    if classes is not None:
        fields["forecast_classes"] = classes
    return Problem(**fields)


def cpu_s() -> float:
    """CPU seconds used so far by this process and its finished children (CBC runs as one)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(solver, problems: list[Problem]) -> tuple[list[float], list[float], list[str], list]:
    """Wall and CPU seconds, status and objective of ``solver`` on each problem."""
    seconds, cpu_seconds, statuses, objectives = [], [], [], []
    for problem in problems:
        started, started_cpu = time.perf_counter(), cpu_s()
        answer = solver(problem)
        seconds.append(time.perf_counter() - started)
        cpu_seconds.append(cpu_s() - started_cpu)
        if isinstance(answer, tuple):
            objective, status = answer
        else:
            objective, status = answer.objective, f"{answer.status}/{answer.termination}"
        statuses.append(status)
        objectives.append(objective)
    return seconds, cpu_seconds, statuses, objectives


def line(problem: Problem, depths: int, backend: str, timing: tuple) -> dict:
    """The JSON line of one (case, backend): wall-clock p50/p99, and CPU p50/p99 besides."""
    seconds, cpu_seconds, statuses, _ = timing
    counts = Counter(statuses)
    return {
        "jobs": len(problem.jobs),
        "nodes": len(problem.idle_nodes),
        "depths": depths,
        "backend": backend,
        "p50_s": round(float(np.percentile(seconds, 50)), 5),
        "p99_s": round(float(np.percentile(seconds, 99)), 5),
        "status": ",".join(f"{s}:{n}" for s, n in sorted(counts.items())),
        "cpu_p50_s": round(float(np.percentile(cpu_seconds, 50)), 5),
        "cpu_p99_s": round(float(np.percentile(cpu_seconds, 99)), 5),
    }


def binaries(problems: list[Problem]) -> dict:
    """Median binaries before and after the bound reduction, over the problems a solver
    gets (those whose LP relaxation is fractional); with forecasts the options per instance
    (levels included) before any reduction."""
    before, after = [], []
    for problem in problems:
        options = build_options(problem)
        if options.level is not None:
            before.append(len(options.count))
            continue
        chosen, price = greedy_choice(options, len(problem.idle_nodes))
        if price is not None:
            before.append(len(options.count))
            keep = bound_reduction(options, len(problem.idle_nodes), price, chosen)
            after.append(int(keep.sum()))
    return {
        "solver_instances": len(before),
        "binaries_p50": float(np.median(before)) if before else None,
        "kept_binaries_p50": float(np.median(after)) if after else None,
        "kept_binaries_max": max(after, default=None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats-small", type=int, default=50)
    parser.add_argument("--repeats-large", type=int, default=20)
    parser.add_argument("--forecast-share", type=float, default=0.0)
    parser.add_argument("--forecast-classes", type=int)
    args = parser.parse_args()
    if not 0 <= args.forecast_share <= 1:
        sys.exit(f"bench/solve.py: --forecast-share must be in [0, 1], got {args.forecast_share}")
    path = data.data_dir() / data.SCALABILITY_FILE
    if not path.is_file():
        sys.exit(f"bench/solve.py: {path} is absent (set INTERSTICE_DATA_DIR)")
    table = ScalabilityTable.from_csv(path.read_text())
    deep_table = with_synthetic_depths(table, 4)
    # Every large-case job wants 64 nodes with little cap from samples_remaining:
    # 12,800 > 10,000 nodes, so capacity binds and the solver has to decide.
    binding = {"max_nodes_range": (64, 64), "samples_remaining": (1e9, 1e11)}
    cases = [
        (1, [random_problem(table, 10, 128, seed=s) for s in range(args.repeats_small)]),
        (
            4,
            [
                random_problem(deep_table, 200, 10_000, seed=s, **binding)
                for s in range(args.repeats_large)
            ],
        ),
    ]
    if args.forecast_share > 0:
        cases = [
            (depths, [with_forecasts(p, args.forecast_share, args.forecast_classes, s)
                      for s, p in enumerate(problems)])
            for depths, problems in cases
        ]  # fmt: skip
    solve(cases[0][1][0], "cbc"), solve(cases[0][1][0], "cpsat")  # warm imports
    print(json.dumps({
        "cpus": os.cpu_count(), "load1_at_start": os.getloadavg()[0],
        "forecast_share": args.forecast_share,
        "forecast_classes": cases[0][1][0].forecast_classes,
    }))  # fmt: skip
    p50 = {}
    for depths, problems in cases:
        runs = {backend: lambda p, b=backend: solve(p, b) for backend in BACKENDS}
        runs["greedy"] = greedy
        if depths == 1 and not args.forecast_share:
            runs["bftrainer-cbc"] = bftrainer_style
        found = {}
        for backend, run in runs.items():
            timing = timed(run, problems)
            found[backend] = timing[3]
            p50[(depths, backend)] = float(np.percentile(timing[0], 50))
            print(json.dumps(line(problems[0], depths, backend, timing)), flush=True)
        print(json.dumps({"jobs": len(problems[0].jobs), "depths": depths, **binaries(problems)}))
        reference = np.array(found["cbc"])
        for backend, objectives in found.items():
            gap = float(np.max(np.abs(np.array(objectives) - reference) / np.abs(reference)))
            print(json.dumps({"depths": depths, "backend": backend, "max_rel_gap_vs_cbc": gap}))
    print(json.dumps({"load1_at_end": os.getloadavg()[0]}))
    for backend in BACKENDS if (1, "bftrainer-cbc") in p50 else ():
        ratio = p50[(1, "bftrainer-cbc")] / p50[(1, backend)]
        print(json.dumps({"speedup_p50_vs_bftrainer_cbc": round(ratio, 2), "backend": backend}))


if __name__ == "__main__":
    main()
