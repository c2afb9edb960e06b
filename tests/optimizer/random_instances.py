"""Random small allocation problems and an exhaustive optimum, for the brute-force and
property tests.

The enumeration does not use the formulation: it tries every assignment of a count (0, or
min_nodes..max) and a depth to every job within the idle pool, by the rules written out
here (a job's own curve if it has one, its allowed depths less any derived depth > 0),
builds each Allocation with rates from the curve and goodput by eqs. (a)-(b) written out
here, and scores it with Problem.evaluate.
"""

import itertools
import random

import pytest
from interstice.optimizer import (
    Allocation,
    Job,
    JobAllocation,
    Problem,
    ScalabilityPoint,
    ScalabilityTable,
    Weights,
)
from interstice.optimizer.placement import assign_nodes


def random_points(rng: random.Random, models: tuple[str, ...]) -> list[ScalabilityPoint]:
    """1-3 depths per model, measured at a random subset of 1, 2, 4, 6 nodes; a depth > 0 is
    derived (not measured) one time in four."""
    points = []
    for model in models:
        for depth in range(rng.randint(1, 3)):
            derived = depth > 0 and rng.random() < 0.25
            progress = 1.0 if depth == 0 else rng.uniform(0.5, 1.0)
            counts = sorted(rng.sample([1, 2, 4, 6], rng.randint(1, 4)))
            top = max(counts)
            counts = sorted({*counts, top})
            for n in counts:  # rates not always increasing, so dominance pruning matters
                rate = rng.uniform(50, 150) * n ** rng.uniform(0.3, 1.1)
                points.append(
                    ScalabilityPoint(model=model, nodes=n, samples_per_s=rate, spb_depth=depth,
                                     progress_per_sample=progress, derived=derived)
                )  # fmt: skip
    return points


def random_table(rng: random.Random) -> ScalabilityTable:
    """One or two models (:func:`random_points`)."""
    return ScalabilityTable(points=tuple(random_points(rng, ("m0", "m1")[: rng.randint(1, 2)])))


def random_problem(rng: random.Random) -> Problem:
    table = random_table(rng)
    nodes = [f"n{i}" for i in range(rng.randint(1, 8))]
    free = nodes[:]
    rng.shuffle(free)
    jobs = []
    for j in range(rng.randint(1, 4)):
        model = rng.choice(sorted(table.models))
        # One job in four brings its own curve (model "own", not in the table).
        rates = tuple(random_points(rng, ("x",))) if rng.random() < 0.25 else None
        curve = ScalabilityTable(points=rates) if rates else table
        depths = curve.depths("x" if rates else model)
        min_nodes = rng.randint(1, 3)
        held = rng.randint(0, min(len(free), 5))
        mine, free = free[:held], free[held:]
        # A depth > 0 with derived rows is never allowed to be asked for alone; one job in
        # five takes only depth 0 (plain data parallel, SplitBrain).
        offered = [d for d in depths if d == 0 or not any(
            p.derived for p in curve.points if p.spb_depth == d)]  # fmt: skip
        allowed = (
            (0,) if rng.random() < 0.2 else tuple(rng.sample(offered, rng.randint(1, len(offered))))
        )
        jobs.append(
            Job(
                job_id=f"j{j}",
                model="own" if rates else model,
                rates=rates,
                min_nodes=min_nodes,
                max_nodes=rng.randint(min_nodes, 7),
                nodes=tuple(mine),
                spb_depth=rng.choice(depths),
                spb_depths=allowed if rng.random() < 0.5 else None,
                priority=rng.uniform(0.5, 3.0),
                samples_remaining=rng.choice([1e9, rng.uniform(1e3, 2e4)]),
                rescale_up_s=rng.uniform(0, 40),
                rescale_down_s=rng.uniform(0, 20),
            )
        )
    weights = Weights(
        throughput=rng.choice([1.0, rng.uniform(0, 2)]),
        speedup=(normalise := rng.choice(["none", "speedup", "node_seconds"])) == "speedup",
        node_seconds=normalise == "node_seconds",
        fairness=rng.choice([0.0, rng.uniform(0, 1)]),
        priority=rng.choice([0.0, 1.0, rng.uniform(0, 2)]),
        churn=rng.choice([0.0, rng.uniform(0, 0.5)]),
        early_finish=rng.choice([0.0, 0.9, 1.0, rng.uniform(0, 1)]),
    )
    return Problem(idle_nodes=tuple(nodes), jobs=tuple(jobs), scalability=table,
                   weights=weights, horizon_s=rng.uniform(10, 200))  # fmt: skip


def curve_of(problem: Problem, job: Job) -> ScalabilityTable:
    """The job's rates as a table of its model, else the problem's table."""
    if job.rates is None:
        return problem.scalability
    points = tuple(p.model_copy(update={"model": job.model}) for p in job.rates)
    return ScalabilityTable(points=points)


def job_options(problem: Problem, job: Job) -> list[tuple[int, int]]:
    """Every (count, depth) the rules allow ``job``, from the rules, not the formulation:
    its own curve if it has one, its allowed depths less any derived depth > 0."""
    table = curve_of(problem, job)
    depths = job.spb_depths or table.depths(job.model)
    options = [(0, job.spb_depth)]
    for depth in depths:
        if depth > 0 and any(p.derived for p in table.points if p.spb_depth == depth):
            continue
        top = min(job.max_nodes, table.max_nodes(job.model, depth), len(problem.idle_nodes))
        options += [(n, depth) for n in range(job.min_nodes, top + 1)]
    return options


def share(problem: Problem, job: Job, count: int, depth: int, names: tuple) -> JobAllocation:
    """A job's share with rate from the table and goodput by eqs. (a)-(b) of the formulation."""
    held = len(job.nodes)
    if count == 0 or (count == held and depth == job.spb_depth):
        cost_s = 0.0
    elif count > held:
        cost_s = job.rescale_up_s
    else:
        cost_s = job.rescale_down_s
    table = curve_of(problem, job)
    rate = table.samples_per_s(job.model, count, depth) if count else 0.0
    progress = table.progress_per_sample(job.model, depth)
    goodput = min(rate * progress * max(0.0, problem.horizon_s - cost_s), job.samples_remaining)
    rescaled = count != held or (count > 0 and depth != job.spb_depth)
    return JobAllocation(job_id=job.job_id, node_count=count, node_names=names, spb_depth=depth,
                         samples_per_s=rate, goodput=goodput, rescaled=rescaled)  # fmt: skip


def exhaustive_optimum(problem: Problem) -> float:
    best = -float("inf")
    capacity = len(problem.idle_nodes)
    for combo in itertools.product(*(job_options(problem, job) for job in problem.jobs)):
        counts = [n for n, _ in combo]
        if sum(counts) > capacity:
            continue
        names = assign_nodes(problem, counts)
        jobs = tuple(
            share(problem, job, n, d, job_names)
            for job, (n, d), job_names in zip(problem.jobs, combo, names, strict=True)
        )
        allocation = Allocation(status="optimal", objective=0.0, backend="brute", solve_time_s=0,
                                horizon_s=problem.horizon_s, jobs=jobs)  # fmt: skip
        best = max(best, problem.evaluate(allocation))
    return best


def assert_rules_hold(problem: Problem, allocation: Allocation) -> None:
    """min/max, capacity, held-node superset/subset and allowed depths (SplitBrain-style
    jobs at 0, no derived depth > 0), checked here besides evaluate."""
    assert [a.job_id for a in allocation.jobs] == [j.job_id for j in problem.jobs]
    assert sum(a.node_count for a in allocation.jobs) <= len(problem.idle_nodes)
    for job, a in zip(problem.jobs, allocation.jobs, strict=True):
        assert a.node_count == 0 or job.min_nodes <= a.node_count <= job.max_nodes
        assert set(a.node_names) <= set(job.nodes) or set(job.nodes) <= set(a.node_names)
        if a.node_count:
            assert (a.node_count, a.spb_depth) in job_options(problem, job)
            assert job.spb_depths != (0,) or a.spb_depth == 0
    assert problem.evaluate(allocation) == pytest.approx(allocation.objective, rel=1e-9, abs=1e-6)
