"""The solver-free policies: equal share by water-filling, greedy marginal gain."""

import pytest
from interstice.optimizer import (
    Job,
    Problem,
    ScalabilityPoint,
    ScalabilityTable,
    Weights,
    equal_share,
    greedy,
    solve,
)

TABLE = ScalabilityTable(
    points=(
        ScalabilityPoint(model="m", nodes=1, samples_per_s=10.0),
        ScalabilityPoint(model="m", nodes=16, samples_per_s=150.0),
        ScalabilityPoint(model="m", nodes=16, samples_per_s=180.0, spb_depth=1,
                         progress_per_sample=0.9),
    )
)  # fmt: skip


def job(job_id: str, min_nodes: int, max_nodes: int, **fields) -> Job:
    return Job(job_id=job_id, model="m", min_nodes=min_nodes, max_nodes=max_nodes,
               samples_remaining=1e9, **fields)  # fmt: skip


def test_equal_share_water_fills_within_bounds() -> None:
    # 11 nodes, 4 jobs: the share 11 // 4 = 2 caps a at its max 2; 9 nodes are left for b, c,
    # d: the share 3 is below d's min 5, so d gets 0; b and c split 9: 4 each, and the one
    # node left goes to the first, b.
    jobs = (job("a", 1, 2), job("b", 1, 16), job("c", 2, 16), job("d", 5, 16))
    problem = Problem(idle_nodes=tuple(f"n{i:02d}" for i in range(11)), jobs=jobs,
                      scalability=TABLE, horizon_s=100.0)  # fmt: skip
    allocation = equal_share(problem)
    assert [a.node_count for a in allocation.jobs] == [2, 5, 4, 0]
    assert {a.spb_depth for a in allocation.jobs} == {0}
    assert (allocation.backend, allocation.status) == ("equal_share", "feasible")
    assert problem.evaluate(allocation) == pytest.approx(allocation.objective)


def test_greedy_is_valid_and_never_beats_the_milp() -> None:
    jobs = tuple(job(f"j{i}", 1 + i % 3, 16, nodes=(f"n{i:02d}",) if i < 3 else (),
                     rescale_up_s=20.0, rescale_down_s=5.0) for i in range(6))  # fmt: skip
    problem = Problem(idle_nodes=tuple(f"n{i:02d}" for i in range(40)), jobs=jobs,
                      scalability=TABLE, horizon_s=200.0,
                      weights=Weights(fairness=0.3, churn=0.05))  # fmt: skip
    answer = greedy(problem)
    assert (answer.backend, answer.status) == ("greedy", "feasible")
    assert problem.evaluate(answer) == pytest.approx(answer.objective)
    assert sum(a.node_count for a in answer.jobs) == 40
    assert answer.objective <= solve(problem).objective * (1 + 1e-9)


def test_no_jobs_or_no_nodes_is_trivial() -> None:
    empty = Problem(idle_nodes=("n1",), jobs=(), scalability=TABLE, horizon_s=10.0)
    answer = solve(empty, backend="cpsat")
    assert (answer.status, answer.termination, answer.jobs) == ("optimal", "trivial", ())
    no_nodes = Problem(idle_nodes=(), jobs=(job("a", 1, 4),), scalability=TABLE, horizon_s=10.0)
    for policy in (solve, greedy, equal_share):
        answer = policy(no_nodes)
        assert [(a.node_count, a.node_names) for a in answer.jobs] == [(0, ())]
        assert no_nodes.evaluate(answer) == 0.0
