"""From chosen options (a count and a depth per job) to an Allocation with node names.

Nothing migrates: a job keeps the first min(n, h) of its sorted held nodes, so its new set is
a subset (it shrinks) or a superset (it grows) of the old one; growing jobs, in the problem's
order, take the free nodes (never held, or released by a shrinking job) in sorted order.
Deterministic: the same problem and choice give the same names.

With forecasts (``Problem.idle_forecast_s``) the order is by forecast life instead: a job
keeps its longest-lived held nodes (it releases the shortest-lived), and the growing jobs,
by level L descending (formulation, constraints (3)), then by the cost of a reclaim and the
restart it may force (``rescale_down_s + reclaim_loss_s + rescale_up_s``) descending, then in
the problem's order, take the longest-lived free nodes left. Taking the most demanding levels
first keeps Hall's condition for the rest (constraints (2)-(3) hold), so every job gets nodes
of its level or longer-lived; the long-lived nodes go to the jobs with the costlier rescales.
"""

from __future__ import annotations

import time

import numpy as np
from interstice.optimizer.formulation import Options
from interstice.optimizer.problem import Allocation, JobAllocation, Problem, SolveStatus


def assign_nodes(
    problem: Problem, counts: list[int], levels: list[int] | None = None
) -> list[tuple[str, ...]]:
    """Node names for ``counts[j]`` nodes per job ``j`` (see the module docstring).

    Args:
        problem: the instance.
        counts: one count per job, in the problem's order; their sum is at most the number
            of idle nodes.
        levels: with forecasts, each job's level L (0: none), in the problem's order;
            ``None``: all 0.

    Returns:
        Sorted node names per job.

    Raises:
        ValueError: the counts need more nodes than are idle.
    """
    lives = problem.lives
    if lives is not None:
        return _assign_by_life(problem, counts, levels or [0] * len(counts))
    jobs = zip(problem.jobs, counts, strict=True)
    kept = [sorted(job.nodes)[: min(n, len(job.nodes))] for job, n in jobs]
    in_use = {node for names in kept for node in names}
    free = iter(sorted(node for node in problem.idle_nodes if node not in in_use))
    names = []
    for mine, n in zip(kept, counts, strict=True):
        extra = [next(free, None) for _ in range(n - len(mine))]
        if None in extra:
            raise ValueError(f"counts {counts} need more than {len(problem.idle_nodes)} nodes")
        names.append(tuple(sorted(mine + extra)))
    return names


def _assign_by_life(
    problem: Problem, counts: list[int], levels: list[int]
) -> list[tuple[str, ...]]:
    """:func:`assign_nodes` with forecasts (module docstring)."""
    lives = problem.lives
    kept = [
        lives.keep_order(job.nodes)[: min(n, len(job.nodes))]
        for job, n in zip(problem.jobs, counts, strict=True)
    ]
    in_use = {node for names in kept for node in names}
    free = lives.keep_order([node for node in problem.idle_nodes if node not in in_use])
    # what a reclaim of each job costs, and the restart it may force, seconds
    reclaim_s = [job.rescale_down_s + job.reclaim_loss_s + job.rescale_up_s for job in problem.jobs]
    growing = sorted(
        (j for j, n in enumerate(counts) if n > len(kept[j])),
        key=lambda j: (-levels[j], -reclaim_s[j], j),
    )
    taken = 0
    for j in growing:
        extra = counts[j] - len(kept[j])
        if taken + extra > len(free):
            raise ValueError(f"counts {counts} need more than {len(problem.idle_nodes)} nodes")
        kept[j] = kept[j] + free[taken : taken + extra]
        taken += extra
    return [tuple(sorted(names)) for names in kept]


def make_allocation(
    problem: Problem,
    options: Options,
    chosen: np.ndarray,
    *,
    status: SolveStatus,
    backend: str,
    termination: str,
    started_s: float,
) -> Allocation:
    """The Allocation of one chosen option per job.

    Args:
        problem: the instance.
        options: the scored options (:func:`interstice.optimizer.formulation.build_options`).
        chosen: shape (jobs,), the index into ``options`` of each job's option.
        status: the answer's status.
        backend: the backend or policy that chose.
        termination: the solver's termination reason.
        started_s: ``time.perf_counter()`` when solving began (model building included).

    Returns:
        The allocation, objective = sum of the chosen options' values plus the shares of
        the users with several jobs (:meth:`Problem.user_share`); with forecasts
        within the horizon, each job scored on the nodes it is given
        (:meth:`Problem.score`, what ``evaluate`` recomputes), at least its option's value.
    """
    counts = options.count[chosen].tolist()
    depths = options.depth[chosen].tolist()
    levels = None if options.level is None else options.level[chosen].tolist()
    names = assign_nodes(problem, counts, levels)
    rows = zip(
        options.samples_per_s[chosen].tolist(),
        options.goodput[chosen].tolist(),
        options.rescaled[chosen].tolist(),
        options.value[chosen].tolist(),
        strict=True,
    )
    objective = float(options.value[chosen].sum())
    lives = problem.lives
    if lives is not None and lives.classes > 0:
        # Scored on the nodes placed where they outlive the job's level (never shorter), or
        # where the options were scored without the forecasts (equal share's).
        rows = list(rows)
        for j, (job, node_names, d) in enumerate(zip(problem.jobs, names, depths, strict=True)):
            new = [node for node in node_names if node not in job.nodes]
            if levels is None or (new and lives.classes_of(new).min() != levels[j]):
                rows[j] = problem.score(job, node_names, d)
        objective = sum(row[3] for row in rows)
    objective += problem.user_share(counts)  # (d) of the users with several jobs
    jobs = []
    for job, n, node_names, d, (rate, goodput, rescaled, _) in zip(
        problem.jobs, counts, names, depths, rows, strict=True
    ):
        jobs.append(
            JobAllocation(
                job_id=job.job_id,
                node_count=n,
                node_names=node_names,
                spb_depth=d,
                samples_per_s=rate,
                goodput=goodput,
                rescaled=rescaled,
            )
        )
    return Allocation(
        status=status,
        objective=objective,
        backend=backend,
        solve_time_s=time.perf_counter() - started_s,
        horizon_s=problem.horizon_s,
        jobs=tuple(jobs),
        termination=termination,
    )
