"""Both backends against exhaustive enumeration (:mod:`random_instances`) on many small
random instances."""

import importlib
import random
from collections import Counter

import pytest
from interstice.optimizer import BACKENDS, equal_share, greedy, solve
from interstice.optimizer.formulation import build_options
from interstice.optimizer.solve import LP_INTEGRAL, chosen_options
from random_instances import assert_rules_hold, exhaustive_optimum, random_problem

INSTANCES = 60


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
