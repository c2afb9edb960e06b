"""From chosen options (a count and a depth per job) to an Allocation with node names.

Nothing migrates: a job keeps the first min(n, h) of its sorted held nodes, so its new set is
a subset (it shrinks) or a superset (it grows) of the old one; growing jobs, in the problem's
order, take the free nodes (never held, or released by a shrinking job) in sorted order.
Deterministic: the same problem and choice give the same names.
"""

from __future__ import annotations

import time

import numpy as np
from interstice.optimizer.formulation import Options
from interstice.optimizer.problem import Allocation, JobAllocation, Problem, SolveStatus


def assign_nodes(problem: Problem, counts: list[int]) -> list[tuple[str, ...]]:
    """Node names for ``counts[j]`` nodes per job ``j`` (see the module docstring).

    Args:
        problem: the instance.
        counts: one count per job, in the problem's order; their sum is at most the number
            of idle nodes.

    Returns:
        Sorted node names per job.

    Raises:
        ValueError: the counts need more nodes than are idle.
    """
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
        The allocation, objective = sum of the chosen options' values.
    """
    counts = options.count[chosen].tolist()
    names = assign_nodes(problem, counts)
    jobs = tuple(
        JobAllocation(
            job_id=job.job_id,
            node_count=n,
            node_names=node_names,
            spb_depth=d,
            samples_per_s=rate,
            goodput=goodput,
            rescaled=rescaled,
        )
        for job, n, node_names, d, rate, goodput, rescaled in zip(
            problem.jobs,
            counts,
            names,
            options.depth[chosen].tolist(),
            options.samples_per_s[chosen].tolist(),
            options.goodput[chosen].tolist(),
            options.rescaled[chosen].tolist(),
            strict=True,
        )
    )
    return Allocation(
        status=status,
        objective=float(options.value[chosen].sum()),
        backend=backend,
        solve_time_s=time.perf_counter() - started_s,
        horizon_s=problem.horizon_s,
        jobs=jobs,
        termination=termination,
    )
