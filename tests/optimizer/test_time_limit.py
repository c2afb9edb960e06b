"""A time limit that ends without a proof still answers: incumbent, else greedy fallback."""

import numpy as np
import pulp
import pytest
from interstice.optimizer import BACKENDS, ScalabilityTable, solve
from interstice.optimizer import cbc as cbc_backend
from interstice.optimizer import cpsat as cpsat_backend
from interstice.optimizer.answer import BackendAnswer
from interstice.optimizer.formulation import build_options
from interstice.optimizer.solve import chosen_options
from interstice.optimizer.synthetic import random_problem, with_synthetic_depths

from interstice import data


@pytest.fixture(scope="module")
def large_table(bftrainer_dir) -> ScalabilityTable:
    table = ScalabilityTable.from_csv((bftrainer_dir / data.SCALABILITY_FILE).read_text())
    return with_synthetic_depths(table, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiny_limit_on_a_large_instance_answers_validly(large_table, backend: str) -> None:
    # Every job wants 64 nodes: 12,800 > 10,000, so the solver must run (no LP shortcut).
    problem = random_problem(large_table, jobs=200, nodes=10_000, seed=3, time_limit_s=1e-3,
                             max_nodes_range=(64, 64), samples_remaining=(1e9, 1e11))  # fmt: skip
    allocation = solve(problem, backend=backend)
    assert allocation.termination != "lp-integral"
    assert allocation.status in ("optimal", "feasible", "fallback")
    if allocation.status == "fallback":
        assert allocation.backend == "greedy"
    assert problem.evaluate(allocation) == pytest.approx(allocation.objective)
    assert sum(a.node_count for a in allocation.jobs) > 0


@pytest.mark.parametrize("module", [cbc_backend, cpsat_backend])
def test_no_incumbent_falls_back_to_greedy(large_table, monkeypatch, module) -> None:
    def no_incumbent(options, capacity, time_limit_s, hint, relative_gap):
        return BackendAnswer(values=None, status=None, termination="UNKNOWN")

    monkeypatch.setattr(module, "solve", no_incumbent)
    problem = random_problem(large_table, jobs=20, nodes=100, seed=4)  # capacity binds
    allocation = solve(problem, backend=module.__name__.rsplit(".", 1)[1])
    assert (allocation.status, allocation.backend) == ("fallback", "greedy")
    assert allocation.termination == "UNKNOWN"
    assert problem.evaluate(allocation) == pytest.approx(allocation.objective)
    assert sum(a.node_count for a in allocation.jobs) > 0


@pytest.mark.parametrize("module", [cbc_backend, cpsat_backend])
def test_an_incumbent_worse_than_greedy_is_not_applied(large_table, monkeypatch, module) -> None:
    # At its time limit a solver may hold an incumbent worse than the greedy it started
    # from: the answer must never be worth less than the greedy one.
    def all_zero(options, capacity, time_limit_s, hint, relative_gap):
        values = np.zeros(len(options.count))
        values[options.start[:-1]] = 1.0  # every job at its first (zero-node) option
        return BackendAnswer(values=values, status="feasible", termination="FEASIBLE")

    monkeypatch.setattr(module, "solve", all_zero)
    problem = random_problem(large_table, jobs=20, nodes=100, seed=4)  # capacity binds
    allocation = solve(problem, backend=module.__name__.rsplit(".", 1)[1])
    assert (allocation.status, allocation.backend) == ("fallback", "greedy")
    assert allocation.termination == "FEASIBLE"
    assert sum(a.node_count for a in allocation.jobs) > 0
    assert problem.evaluate(allocation) == pytest.approx(allocation.objective)


def test_cbc_that_fails_to_run_falls_back_and_says_why(large_table, monkeypatch) -> None:
    def broken(self, solver=None, **kwargs):
        raise pulp.PulpSolverError("Pulp: cannot execute cbc")

    monkeypatch.setattr(pulp.LpProblem, "solve", broken)
    problem = random_problem(large_table, jobs=20, nodes=100, seed=6)  # capacity binds
    allocation = solve(problem, backend="cbc")
    assert (allocation.status, allocation.backend) == ("fallback", "greedy")
    assert allocation.termination == "error: Pulp: cannot execute cbc"
    assert problem.evaluate(allocation) == pytest.approx(allocation.objective)


def test_a_solver_answer_breaking_constraint_1_is_refused(large_table) -> None:
    problem = random_problem(large_table, jobs=3, nodes=50, seed=6)
    options = build_options(problem)
    two_for_the_first_job = np.zeros(len(options.count))
    two_for_the_first_job[[0, 1]] = 1.0
    two_for_the_first_job[options.start[1:-1]] = 1.0
    with pytest.raises(ValueError, match="constraint \\(1\\)"):
        chosen_options(options, two_for_the_first_job)
