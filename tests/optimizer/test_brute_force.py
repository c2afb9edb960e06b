"""Both backends against exhaustive enumeration on many small random instances.

The enumeration does not use the formulation: it tries every assignment of a count (0, or
min_nodes..max) and a depth to every job within the idle pool, builds each Allocation with
rates from the table and goodput by eqs. (a)-(b) written out here, and scores it with
Problem.evaluate.
"""

import importlib
import itertools
import random
from collections import Counter

import pytest
from interstice.optimizer import (
    BACKENDS,
    Allocation,
    Job,
    JobAllocation,
    Problem,
    ScalabilityPoint,
    ScalabilityTable,
    Weights,
    equal_share,
    greedy,
    solve,
)
from interstice.optimizer.formulation import build_options
from interstice.optimizer.placement import assign_nodes
from interstice.optimizer.solve import LP_INTEGRAL, chosen_options

INSTANCES = 60


def random_table(rng: random.Random) -> ScalabilityTable:
    """One or two models, 1-3 depths, measured at a random subset of 1, 2, 4, 6 nodes."""
    points = []
    for model in ("m0", "m1")[: rng.randint(1, 2)]:
        for depth in range(rng.randint(1, 3)):
            progress = 1.0 if depth == 0 else rng.uniform(0.5, 1.0)
            counts = sorted(rng.sample([1, 2, 4, 6], rng.randint(1, 4)))
            top = max(counts)
            counts = sorted({*counts, top})
            for n in counts:  # rates not always increasing, so dominance pruning matters
                rate = rng.uniform(50, 150) * n ** rng.uniform(0.3, 1.1)
                points.append(
                    ScalabilityPoint(model=model, nodes=n, samples_per_s=rate, spb_depth=depth,
                                     progress_per_sample=progress)
                )  # fmt: skip
    return ScalabilityTable(points=tuple(points))


def random_problem(rng: random.Random) -> Problem:
    table = random_table(rng)
    nodes = [f"n{i}" for i in range(rng.randint(1, 8))]
    free = nodes[:]
    rng.shuffle(free)
    jobs = []
    for j in range(rng.randint(1, 4)):
        model = rng.choice(sorted(table.models))
        depths = table.depths(model)
        min_nodes = rng.randint(1, 3)
        held = rng.randint(0, min(len(free), 5))
        mine, free = free[:held], free[held:]
        allowed = tuple(rng.sample(depths, rng.randint(1, len(depths))))
        jobs.append(
            Job(
                job_id=f"j{j}",
                model=model,
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
        speedup=rng.random() < 0.3,
        fairness=rng.choice([0.0, rng.uniform(0, 1)]),
        priority=rng.choice([0.0, 1.0, rng.uniform(0, 2)]),
        churn=rng.choice([0.0, rng.uniform(0, 0.5)]),
        early_finish=rng.choice([0.0, 0.9, 1.0, rng.uniform(0, 1)]),
    )
    return Problem(idle_nodes=tuple(nodes), jobs=tuple(jobs), scalability=table,
                   weights=weights, horizon_s=rng.uniform(10, 200))  # fmt: skip


def job_options(problem: Problem, job: Job) -> list[tuple[int, int]]:
    """Every (count, depth) the rules allow ``job``, from the rules, not the formulation."""
    table = problem.scalability
    depths = job.spb_depths or table.depths(job.model)
    options = [(0, job.spb_depth)]
    for depth in depths:
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
    table = problem.scalability
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
    """min/max, capacity and held-node superset/subset, checked here besides evaluate."""
    assert [a.job_id for a in allocation.jobs] == [j.job_id for j in problem.jobs]
    assert sum(a.node_count for a in allocation.jobs) <= len(problem.idle_nodes)
    for job, a in zip(problem.jobs, allocation.jobs, strict=True):
        assert a.node_count == 0 or job.min_nodes <= a.node_count <= job.max_nodes
        assert set(a.node_names) <= set(job.nodes) or set(job.nodes) <= set(a.node_names)
    assert problem.evaluate(allocation) == pytest.approx(allocation.objective, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize("seed", range(INSTANCES))
def test_backends_reach_the_exhaustive_optimum(seed: int) -> None:
    problem = random_problem(random.Random(seed))
    optimum = exhaustive_optimum(problem)
    # CP-SAT optimizes integer-rounded coefficients; rel=1e-7 covers the rounding
    # (jobs * max|v| / 2 / SCALE_TOP) for these instances.
    close = pytest.approx(optimum, rel=1e-7, abs=1e-6)
    options = build_options(problem)
    no_hint = options.start[:-1]  # every job at its zero option
    for backend in BACKENDS:
        allocation = solve(problem, backend=backend)
        assert allocation.status == "optimal"
        assert_rules_hold(problem, allocation)
        assert allocation.objective == close
        # The backend itself, even where solve() proved the greedy answer optimal.
        module = importlib.import_module(f"interstice.optimizer.{backend}")
        answer = module.solve(options, len(problem.idle_nodes), 10.0, no_hint)
        assert answer.status == "optimal"
        assert options.value[chosen_options(options, answer.values)].sum() == close
    for policy in (greedy, equal_share):
        allocation = policy(problem)
        assert_rules_hold(problem, allocation)
        assert allocation.objective <= optimum + 1e-6 * max(1.0, abs(optimum))


def test_instances_take_every_path_of_solve() -> None:
    """The random instances exercise the solver, the LP-integral shortcut and the trivial case."""
    terminations = Counter(
        solve(random_problem(random.Random(seed)), backend="cpsat").termination
        for seed in range(INSTANCES)
    )
    assert terminations["OPTIMAL"] >= 10
    assert terminations[LP_INTEGRAL] >= 10
    assert terminations["trivial"] >= 1
