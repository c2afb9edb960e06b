"""Synthetic allocation instances for the solve benchmark and the tests.

The throughput rows at depth 0 are whatever table is passed (the benchmark passes the real
ImageNet table, ``imagenet-scalability.csv``). The SPB depth rows are SYNTHETIC, derived
from depth 0 and not measured: at depth d a job runs ``1 + 0.1 d`` times faster (less
backpropagation per sample) and a sample is worth ``1 - 0.05 d`` of full-backprop progress.
"""

from __future__ import annotations

import random

from interstice.optimizer.problem import Job, Problem, ScalabilityTable


def with_synthetic_depths(table: ScalabilityTable, depths: int) -> ScalabilityTable:
    """``table``'s depth-0 rows plus SYNTHETIC rows for SPB depths 1..depths-1.

    Depth d: samples_per_s x (1 + 0.1 d), progress_per_sample 1 - 0.05 d (not measured).
    """
    base = [p for p in table.points if p.spb_depth == 0]
    derived = [
        p.model_copy(
            update={
                "spb_depth": d,
                "samples_per_s": p.samples_per_s * (1 + 0.1 * d),
                "progress_per_sample": 1 - 0.05 * d,
            }
        )
        for d in range(1, depths)
        for p in base
    ]
    return ScalabilityTable(points=tuple(base + derived))


def random_problem(
    table: ScalabilityTable,
    jobs: int,
    nodes: int,
    *,
    seed: int = 0,
    horizon_s: float = 475.0,
    time_limit_s: float = 10.0,
    held_fraction: float = 0.5,
    max_nodes_range: tuple[int, int] = (8, 64),
    samples_remaining: tuple[float, float] = (1e6, 1e9),
) -> Problem:
    """A random instance: ``jobs`` jobs on random models of ``table``, ``nodes`` idle nodes.

    Each job has min_nodes 1-4, max_nodes drawn from ``max_nodes_range``, samples_remaining from
    ``samples_remaining`` (uniform), BFTrainer-like rescale costs (up 10-30 s, down 2-10 s),
    a random SPB depth; about ``held_fraction`` of the jobs already hold a random number of
    nodes within their bounds, while the pool lasts.

    Args:
        table: the scalability table (every depth of a model must reach its max count).
        jobs: number of jobs.
        nodes: number of idle nodes, named ``node00000``, ``node00001``, ...
        seed: random seed.
        horizon_s: forecast horizon, seconds.
        time_limit_s: solver time limit, seconds.
        held_fraction: share of jobs that already run.
        max_nodes_range: (low, high) bounds of each job's max_nodes.
        samples_remaining: (low, high) bounds of each job's samples_remaining.

    Returns:
        The instance.
    """
    rng = random.Random(seed)
    names = [f"node{i:05d}" for i in range(nodes)]
    free = names[:]
    rng.shuffle(free)
    models = sorted(table.models)
    made = []
    for j in range(jobs):
        model = rng.choice(models)
        min_nodes = rng.randint(1, 4)
        max_nodes = rng.randint(max(max_nodes_range[0], min_nodes), max_nodes_range[1])
        held = rng.randint(min_nodes, max_nodes) if rng.random() < held_fraction else 0
        held = held if held <= len(free) else 0
        mine, free = free[:held], free[held:]
        made.append(
            Job(
                job_id=f"job{j:04d}",
                model=model,
                min_nodes=min_nodes,
                max_nodes=max_nodes,
                nodes=tuple(sorted(mine)),
                spb_depth=rng.choice(table.depths(model)),
                samples_remaining=rng.uniform(*samples_remaining),
                rescale_up_s=rng.uniform(10, 30),
                rescale_down_s=rng.uniform(2, 10),
            )
        )
    return Problem(
        idle_nodes=tuple(names),
        jobs=tuple(made),
        scalability=table,
        horizon_s=horizon_s,
        time_limit_s=time_limit_s,
    )
