"""Allocation policies without a solver: greedy marginal gain and equal share.

``greedy`` is the MILP's fallback when a time limit ends with no incumbent, and a policy of
its own; ``equal_share`` is the simple baseline the replay compares against. Both get the
idle-hole forecasts the MILP gets, by the rules of :func:`forecast_greedy_choice` and
:func:`equal_share`.
"""

from __future__ import annotations

import time

import numpy as np
from interstice.optimizer.formulation import Options, build_options
from interstice.optimizer.objective import score_options
from interstice.optimizer.placement import make_allocation
from interstice.optimizer.problem import Allocation, Problem


def upper_hulls(options: Options) -> np.ndarray:
    """Which options lie on their job's upper concave hull of (count, value) points.

    Vectorised over all jobs: every option strictly inside its job's list that lies on or
    below the chord of its kept neighbours is dropped, all at once (such a point is on or
    below a chord of two points of the set, so never a hull vertex), until none is left.
    Each job's first and last options are always kept.

    Returns:
        Bool mask of shape (k,).
    """
    kept = np.ones(len(options.count), dtype=bool)
    counts, values, job = options.count.astype(float), options.value, options.job
    while True:
        index = np.flatnonzero(kept)
        if len(index) < 3:
            return kept
        x, y, j = counts[index], values[index], job[index]
        # (y_i - y_prev) (x_next - x_prev) <= (y_next - y_prev) (x_i - x_prev): on or below.
        inner = (j[1:-1] == j[:-2]) & (j[1:-1] == j[2:])
        cross = (y[1:-1] - y[:-2]) * (x[2:] - x[:-2]) - (y[2:] - y[:-2]) * (x[1:-1] - x[:-2])
        below = inner & (cross <= 0)
        if not below.any():
            return kept
        kept[index[1:-1][below]] = False


def hull_steps(options: Options) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The steps along every job's upper concave hull (:func:`upper_hulls`), in the greedy's
    order.

    Returns:
        ``(to, need, slope, order)``, each of shape (s,) but ``order``: the option each step
        reaches, the nodes it adds, its gain per node, and the steps' order (gain per node
        descending; ties: job order, then hull order).
    """
    hull = np.flatnonzero(upper_hulls(options))
    # A step goes from one hull option to the next of the same job.
    step = options.job[hull[1:]] == options.job[hull[:-1]]
    frm, to = hull[:-1][step], hull[1:][step]
    need = options.count[to] - options.count[frm]
    slope = (options.value[to] - options.value[frm]) / need
    return to, need, slope, np.lexsort((to, -slope))


def greedy_choice(options: Options, capacity: int) -> tuple[np.ndarray, float | None]:
    """Greedy marginal gain over the options: the chosen option index per job.

    Every job starts at its zero option. The steps along each job's upper concave hull of
    (count, value) options (:func:`upper_hulls`) are taken in order of gain per node,
    largest first (ties: job order, then hull order), while they fit; a step that does not
    fit ends that job's growth. Then one pass in job order moves each job to its best option
    that fits the nodes left.

    In slope order this is the greedy that solves the LP relaxation of the multiple-choice
    knapsack (Sinha & Zoltners 1979): the LP takes a fraction of the first step that does not
    fit, and that step's gain per node is the LP's price of a node (the dual of capacity).
    So if no step was refused while nodes were left, the LP optimum is this integral
    answer, which is then optimal for the MILP too.

    Args:
        options: the scored options (values strictly increase with count per job).
        capacity: number of idle nodes N.

    Returns:
        Shape (jobs,) indices into ``options``; and the LP's node price, value per node, or
        ``None`` when the LP optimum is this integral answer (proven optimal).
    """
    chosen = options.start[:-1].copy()
    to, need, slope, order = hull_steps(options)
    # Every step before the first that does not fit is taken.
    fits = np.cumsum(need[order]) <= capacity
    taken = order[: int(np.argmin(fits)) if not fits.all() else len(order)]
    np.maximum.at(chosen, options.job[to[taken]], to[taken])  # a job's last step taken
    left = capacity - int(need[taken].sum())
    price = None  # the LP's split step, refused while nodes were left
    blocked: set[int] = set()
    jobs, needs, slopes, tos = options.job, need.tolist(), slope.tolist(), to.tolist()
    for s in order[len(taken) :].tolist():
        if left == 0:
            break
        j = int(jobs[tos[s]])
        if j in blocked:
            continue
        if needs[s] > left:
            price = slopes[s] if price is None else price
            blocked.add(j)
            continue
        left -= needs[s]
        chosen[j] = tos[s]
    counts, values = options.count, options.value
    starts = options.start.tolist()
    for j, (lo, hi) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        if left == 0:
            break
        room = left + counts[chosen[j]]
        # Counts increase within a job: the options that fit are a prefix, the last is best.
        best = lo + int(np.searchsorted(counts[lo:hi], room, side="right")) - 1
        if values[best] > values[chosen[j]]:
            left = room - counts[best]
            chosen[j] = best
    return chosen.astype(int), price


def forecast_greedy_choice(options: Options, capacity: int) -> np.ndarray:
    """The greedy with forecasts (options with levels and constraints (3)): the chosen
    option index per job, shape (jobs,).

    The rule: the steps of :func:`greedy_choice` on the relaxation without (3)
    (:meth:`Options.relaxed`: every node priced as if it stayed through the horizon), in
    the same order of gain per node, from every job at its zero option. Each step moves its
    job to the target count at the highest level that (2) and (3) still allow (the
    longest-lived nodes left), and is refused when none is allowed or the option there is
    worth no more than the job's current one (a grow onto nodes forecast to leave before it
    pays back): the job then moves to its best option allowed with at most the target's
    count, if that is worth more (e.g. keeping its own held nodes where a step past them was
    refused), and grows no further. Then one pass in job order moves each job to its best
    option that (2) and (3) allow. So the greedy sees the same forecasts
    as the MILP, and spends the longest-lived nodes on the steps of largest gain first.

    Args:
        options: the scored options with levels (``options.level`` set).
        capacity: number of idle nodes N.

    Returns:
        Indices into ``options``; the choice satisfies (1)-(3).
    """
    relaxed, index = options.relaxed()
    to, _, _, order = hull_steps(relaxed)
    count, value, demand, start = options.count, options.value, options.demand, options.start
    chosen = start[:-1].copy()
    left = capacity - int(count[chosen].sum())
    slack = options.supply - demand[chosen].sum(axis=0)
    blocked: set[int] = set()
    for s in order.tolist():
        j = int(relaxed.job[to[s]])
        if j in blocked:
            continue
        now, target = chosen[j], relaxed.count[to[s]]
        same = start[j] + np.flatnonzero(count[start[j] : start[j + 1]] == target)
        fit = np.all(demand[same] - demand[now] <= slack, axis=1) & (target - count[now] <= left)
        o = same[fit][-1] if fit.any() else now  # the highest level allowed
        if value[o] <= value[now]:
            # Refused: the job ends at its best option allowed up to the target count (its
            # own held nodes, say, where a step past them was refused), and grows no further.
            blocked.add(j)
            upto = start[j] + np.flatnonzero(count[start[j] : start[j + 1]] <= target)
            fit = np.all(demand[upto] - demand[now] <= slack, axis=1) & (
                count[upto] - count[now] <= left
            )
            o = upto[int(np.argmax(np.where(fit, value[upto], -np.inf)))]
            if value[o] <= value[now]:
                continue
        left -= int(count[o] - count[now])
        slack = slack - (demand[o] - demand[now])
        chosen[j] = o
    for j, (lo, hi) in enumerate(zip(start[:-1].tolist(), start[1:].tolist(), strict=True)):
        now = chosen[j]
        fit = (count[lo:hi] - count[now] <= left) & np.all(
            demand[lo:hi] - demand[now] <= slack, axis=1
        )
        best = lo + int(np.argmax(np.where(fit, value[lo:hi], -np.inf)))
        if value[best] > value[now]:
            left -= int(count[best] - count[now])
            slack = slack - (demand[best] - demand[now])
            chosen[j] = best
    return chosen.astype(int)


def greedy(problem: Problem) -> Allocation:
    """Allocate by greedy marginal gain (see :func:`greedy_choice`; with forecasts
    :func:`forecast_greedy_choice`), with no solver.

    Args:
        problem: the instance.

    Returns:
        The allocation, status ``feasible``, backend ``greedy``, termination ``greedy``.
    """
    started_s = time.perf_counter()
    options = build_options(problem)
    if options.level is None:
        relaxed, index = options.relaxed()  # itself, unless users share (d)
        chosen = index[greedy_choice(relaxed, len(problem.idle_nodes))[0]]
    else:
        chosen = forecast_greedy_choice(options, len(problem.idle_nodes))
    return make_allocation(
        problem,
        options,
        chosen,
        status="feasible",
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

    With forecasts its counts are the same (they ignore the objective by design); it gets
    the forecasts through the placement, which gives the longest-lived free nodes to the
    growing jobs with the costliest rescales
    (:func:`interstice.optimizer.placement.assign_nodes`), and its objective is scored on
    the nodes it gets.

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
        s = score_options(
            job, np.array([n]), (d,), problem.table_of(job), weights, horizon_s,
            problem.completion_tilt(job), problem.own_share(job),
        )  # fmt: skip
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
