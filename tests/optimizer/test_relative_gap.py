"""``Problem.relative_gap``: an answer proven within the gap, never further from the optimum."""

import importlib
import random

import pytest
from interstice.optimizer import BACKENDS, Job, Problem, ScalabilityPoint, ScalabilityTable, solve
from interstice.optimizer.formulation import build_options, lp_bound
from interstice.optimizer.policies import greedy_choice
from interstice.optimizer.solve import WITHIN_GAP, chosen_options
from random_instances import assert_rules_hold, exhaustive_optimum, random_problem


@pytest.mark.parametrize("gap", [1e-3, 1e-2, 0.1, 0.5])
@pytest.mark.parametrize("seed", range(30))
def test_an_answer_within_the_gap_of_the_exhaustive_optimum(seed: int, gap: float) -> None:
    problem = random_problem(random.Random(seed)).model_copy(update={"relative_gap": gap})
    optimum = exhaustive_optimum(problem)
    for backend in BACKENDS:
        allocation = solve(problem, backend=backend)
        assert allocation.status == "optimal"
        assert_rules_hold(problem, allocation)
        assert allocation.objective <= optimum + 1e-6 * max(1.0, abs(optimum))
        assert allocation.objective >= optimum - gap * abs(optimum) - 1e-6


def test_the_greedy_answer_within_the_gap_is_returned_without_a_solver() -> None:
    """Random instances whose greedy answer is not optimal: with a gap above the greedy's own
    distance from the LP bound it is returned as it is; with none a backend improves on it."""
    seen = 0
    for seed in range(200):
        problem = random_problem(random.Random(seed))
        options = build_options(problem)
        chosen, price = greedy_choice(options, len(problem.idle_nodes))
        if price is None:
            continue  # the LP optimum is integral: optimal without any gap
        greedy_value = options.value[chosen].sum()
        bound = lp_bound(options, len(problem.idle_nodes), price)
        optimum = exhaustive_optimum(problem)
        if greedy_value >= optimum - 1e-9 * max(1.0, abs(optimum)) or bound <= 0:
            continue
        seen += 1
        assert bound >= optimum - 1e-6 * max(1.0, abs(optimum))  # it is a bound
        gap = min(0.99, 1.01 * (bound - greedy_value) / bound)
        loose = problem.model_copy(update={"relative_gap": gap})
        allocation = solve(loose, backend="cpsat")
        assert (allocation.backend, allocation.termination) == ("greedy", WITHIN_GAP)
        assert allocation.objective == pytest.approx(greedy_value)
        exact = solve(problem, backend="cpsat")
        assert exact.backend == "cpsat" and exact.objective == pytest.approx(optimum, rel=1e-7)
    assert seen >= 5


def symmetric_problem(jobs: int) -> Problem:
    """``jobs`` identical jobs of 16 nodes on a pool with 2 nodes free, half of them reclaimed
    down to 15: the kind of instance that took CP-SAT seconds to prove optimal under
    bench/agents_load.py (many equivalent answers, an LP bound 1e-4 above the optimum)."""
    table = ScalabilityTable(points=tuple(
        ScalabilityPoint(model="benchnet", nodes=n, samples_per_s=100 * n**0.9)
        for n in (1, 2, 4, 8, 16, 32)))  # fmt: skip
    held = [16 - (j % 2) for j in range(jobs)]
    names = iter(f"n{i}" for i in range(sum(held) + 2))
    job_list = tuple(
        Job(job_id=f"j{j}", model="benchnet", min_nodes=1, max_nodes=32, samples_remaining=1e12,
            nodes=tuple(next(names) for _ in range(h)), rescale_up_s=18, rescale_down_s=12)
        for j, h in enumerate(held))  # fmt: skip
    return Problem(idle_nodes=tuple(f"n{i}" for i in range(sum(held) + 2)), jobs=job_list,
                   scalability=table, horizon_s=300)  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_backend_stops_within_the_gap(backend: str) -> None:
    problem = symmetric_problem(40)
    options = build_options(problem)
    chosen, price = greedy_choice(options, len(problem.idle_nodes))
    assert price is not None  # the solver must run
    module = importlib.import_module(f"interstice.optimizer.{backend}")
    values = {}
    for gap in (0.0, 1e-3):
        answer = module.solve(options, len(problem.idle_nodes), 60.0, chosen, gap)
        assert answer.status == "optimal"
        values[gap] = options.value[chosen_options(options, answer.values)].sum()
    assert (1 - 1e-3) * values[0.0] <= values[1e-3] <= values[0.0]
