"""Properties on random small problems (hypothesis drives :mod:`random_instances`).

For every problem and weights: each backend's answer is worth at least the greedy's under
the same weights, and every answer (both backends, greedy, equal share) respects min/max,
capacity, held nodes (reclaimed ones are simply absent from the idle pool), and the
parallelism/depth rules. Where the instance is tiny the backends also match the
exhaustive optimum.
"""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from interstice.optimizer import BACKENDS, equal_share, greedy, solve
from random_instances import assert_rules_hold, exhaustive_optimum, job_options, random_problem

BRUTE_FORCE_LIMIT = 20_000
"""Largest number of (count, depth) combinations enumerated exhaustively."""


@settings(max_examples=150, deadline=None, derandomize=True)
@given(rng=st.randoms(use_true_random=False))
def test_milp_is_at_least_the_greedy_and_every_answer_keeps_the_rules(rng) -> None:
    problem = random_problem(rng)
    baseline = greedy(problem)
    assert_rules_hold(problem, baseline)
    assert_rules_hold(problem, equal_share(problem))
    slack = 1e-7 * max(1.0, abs(baseline.objective))  # CP-SAT's integer scaling
    answers = {backend: solve(problem, backend=backend) for backend in BACKENDS}
    for answer in answers.values():
        assert answer.status == "optimal"
        assert_rules_hold(problem, answer)
        assert answer.objective >= baseline.objective - slack
    sizes = [len(job_options(problem, job)) for job in problem.jobs]
    if math.prod(sizes) <= BRUTE_FORCE_LIMIT:
        optimum = exhaustive_optimum(problem)
        for answer in answers.values():
            assert answer.objective == pytest.approx(optimum, rel=1e-7, abs=1e-6)
