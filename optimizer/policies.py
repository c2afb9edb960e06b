"""Allocation policies without a solver: greedy marginal gain and equal share.

``greedy`` is the MILP's fallback when a time limit ends with no incumbent, and a policy of
its own; ``equal_share`` is the simple baseline the replay compares against.
"""

from __future__ import annotations

import heapq
import time

import numpy as np
from interstice.optimizer.formulation import Options, build_options
from interstice.optimizer.objective import score_options
from interstice.optimizer.placement import make_allocation
from interstice.optimizer.problem import Allocation, Problem, SolveStatus


def _upper_hull(counts: list[int], values: list[float]) -> list[int]:
    """Indices of the upper concave hull of points (counts[i], values[i]), counts ascending."""
    hull: list[int] = []
    for i in range(len(counts)):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b lies on or below the chord a -> i: drop it.
            cross = (values[b] - values[a]) * (counts[i] - counts[a]) - (values[i] - values[a]) * (
                counts[b] - counts[a]
            )
            if cross > 0:
                break
            hull.pop()
        hull.append(i)
    return hull


def greedy_choice(options: Options, capacity: int) -> tuple[np.ndarray, bool]:
    """Greedy marginal gain over the options: the chosen option index per job.

    Every job starts at its zero option. Repeatedly, the step with the largest gain per node
    among all jobs is taken if it fits: a job's steps follow the upper concave hull of its
    (count, value) options; a step that does not fit ends that job's growth. Then one pass in
    job order moves each job to its best option that fits the nodes left.

    In slope order this is the greedy that solves the LP relaxation of the multiple-choice
    knapsack (Sinha & Zoltners 1979): the LP takes a fraction of the first step that does not
    fit. So if no step was refused while nodes were left, the LP optimum is this integral
    answer, which is then optimal for the MILP too.

    Args:
        options: the scored options (values strictly increase with count per job).
        capacity: number of idle nodes N.

    Returns:
        Shape (jobs,) indices into ``options``, and whether the answer is proven optimal.
    """
    starts = options.start.tolist()
    counts, values = options.count.tolist(), options.value.tolist()
    hulls, heap = [], []
    chosen = starts[:-1]
    for j, (lo, hi) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        hull = [lo + i for i in _upper_hull(counts[lo:hi], values[lo:hi])]
        hulls.append(hull)
        if len(hull) > 1:
            heapq.heappush(heap, (-_slope(hull[0], hull[1], counts, values), j, 1))
    left = capacity
    lp_split = False  # a step refused while nodes were left: the LP optimum is fractional
    while heap:
        _, j, k = heapq.heappop(heap)
        need = counts[hulls[j][k]] - counts[chosen[j]]
        if need > left:
            lp_split = lp_split or left > 0
            continue
        left -= need
        chosen[j] = hulls[j][k]
        if k + 1 < len(hulls[j]):
            slope = _slope(hulls[j][k], hulls[j][k + 1], counts, values)
            heapq.heappush(heap, (-slope, j, k + 1))
    for j, (lo, hi) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        room = left + counts[chosen[j]]
        fits = [i for i in range(lo, hi) if counts[i] <= room]
        best = max(fits, key=lambda i: values[i])
        if values[best] > values[chosen[j]]:
            left = room - counts[best]
            chosen[j] = best
    return np.array(chosen, dtype=int), not lp_split


def _slope(a: int, b: int, counts: list[int], values: list[float]) -> float:
    return (values[b] - values[a]) / (counts[b] - counts[a])


def greedy(problem: Problem, *, status: SolveStatus = "feasible") -> Allocation:
    """Allocate by greedy marginal gain (see :func:`greedy_choice`), with no solver.

    Args:
        problem: the instance.
        status: ``feasible`` as a policy; the MILP passes ``fallback`` when it had no answer.

    Returns:
        The allocation, backend ``greedy``, termination ``greedy``.
    """
    started_s = time.perf_counter()
    options = build_options(problem)
    chosen, _ = greedy_choice(options, len(problem.idle_nodes))
    return make_allocation(
        problem,
        options,
        chosen,
        status=status,
        backend="greedy",
        termination="greedy",
        started_s=started_s,
    )


def equal_share_counts(problem: Problem) -> list[tuple[int, int]]:
    """Equal-share (count, depth) per job: the idle nodes split equally, by water-filling.

    Each job runs at depth 0 (or its smallest allowed depth) and gets the same share
    floor(N' / k) of the N' nodes left among the k jobs still unsettled, clipped to its
    bounds: a job whose max count is at most the share gets its max; while some job's
    min_nodes exceeds the share, the one with the largest min_nodes (the last such in job
    order) gets 0. The remainder goes one node each to the first jobs in order.

    Args:
        problem: the instance.

    Returns:
        One (count, depth) per job, in the problem's order.
    """
    depths = [problem.depths_of(job)[0] for job in problem.jobs]
    tops = [problem.max_count(job, d) for job, d in zip(problem.jobs, depths, strict=True)]
    counts = [0] * len(problem.jobs)
    active = [j for j, job in enumerate(problem.jobs) if job.min_nodes <= tops[j]]
    left = len(problem.idle_nodes)
    while active:
        share = left // len(active)
        capped = [j for j in active if tops[j] <= share]
        if capped:
            for j in capped:
                counts[j] = tops[j]
                left -= tops[j]
            active = [j for j in active if j not in capped]
            continue
        short = [j for j in active if problem.jobs[j].min_nodes > share]
        if short:
            active.remove(max(reversed(short), key=lambda j: problem.jobs[j].min_nodes))
            continue
        for j in active:
            counts[j] = share
        left -= share * len(active)
        for j in active[:left]:  # every active job is below its max: share < tops[j]
            counts[j] += 1
        break
    return list(zip(counts, depths, strict=True))


def equal_share(problem: Problem) -> Allocation:
    """Allocate by equal share (see :func:`equal_share_counts`), ignoring the objective.

    Args:
        problem: the instance.

    Returns:
        The allocation, status ``feasible``, backend and termination ``equal_share``; its
        objective is the formulation's value of this allocation.
    """
    started_s = time.perf_counter()
    weights, horizon_s = problem.weights, problem.horizon_s
    rows = []
    for job, (n, d) in zip(problem.jobs, equal_share_counts(problem), strict=True):
        if n == 0:
            d = job.spb_depth
        s = score_options(job, np.array([n]), (d,), problem.table_of(job), weights, horizon_s)
        rows.append((n, d, s.value[0, 0], s.samples_per_s[0, 0], s.goodput[0, 0], s.rescaled[0, 0]))
    columns = zip(*rows, strict=True) if rows else [np.zeros(0)] * 6
    count, depth, value, rate, goodput, rescaled = (np.array(c) for c in columns)
    options = Options(
        job=np.arange(len(rows)),
        count=count.astype(int),
        depth=depth.astype(int),
        value=value.astype(float),
        samples_per_s=rate.astype(float),
        goodput=goodput.astype(float),
        rescaled=rescaled.astype(bool),
        start=np.arange(len(rows) + 1),
    )
    return make_allocation(
        problem,
        options,
        np.arange(len(rows)),
        status="feasible",
        backend="equal_share",
        termination="equal_share",
        started_s=started_s,
    )
