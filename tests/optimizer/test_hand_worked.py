"""One tiny instance whose optimum is worked out by hand."""

import pytest
from interstice.optimizer import (
    BACKENDS,
    Job,
    Problem,
    ScalabilityPoint,
    ScalabilityTable,
    equal_share,
    greedy,
    solve,
)

# Model "m" runs 100 samples/s on 1 node, 180 on 2, 300 on 4 (3 nodes interpolate to 240).
# Four idle nodes n1..n4, horizon H = 100 s, every growth costs rescale_up_s = 10 s, so a
# grown job runs 90 s: goodput = 90 x rate.
#   job a: 1..4 nodes, holds none:   1 -> 9000, 2 -> 16200, 3 -> 21600, 4 -> 27000 samples.
#   job b: exactly 2 nodes, holds n4 (it must grow to 2): 2 -> 16200 samples.
# Allocations within 4 nodes: a=4, b=0: 27000; a=3, b=0: 21600; a=2, b=2: 32400;
# a=1, b=2: 25200; a=0, b=2: 16200. The optimum is a=2, b=2 with objective 32400.
# Names: b keeps n4; the free nodes n1, n2, n3 go in job order: a takes n1, n2, b takes n3.
TABLE = ScalabilityTable(
    points=(
        ScalabilityPoint(model="m", nodes=1, samples_per_s=100.0),
        ScalabilityPoint(model="m", nodes=2, samples_per_s=180.0),
        ScalabilityPoint(model="m", nodes=4, samples_per_s=300.0),
    )
)
PROBLEM = Problem(
    idle_nodes=("n1", "n2", "n3", "n4"),
    jobs=(
        Job(job_id="a", model="m", min_nodes=1, max_nodes=4, samples_remaining=1e9,
            rescale_up_s=10.0),
        Job(job_id="b", model="m", min_nodes=2, max_nodes=2, nodes=("n4",),
            samples_remaining=1e9, rescale_up_s=10.0),
    ),
    scalability=TABLE,
    horizon_s=100.0,
)  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_find_the_hand_worked_optimum(backend: str) -> None:
    allocation = solve(PROBLEM, backend=backend)
    assert allocation.status == "optimal"
    assert allocation.backend == backend
    assert allocation.objective == pytest.approx(32400.0)
    assert PROBLEM.evaluate(allocation) == pytest.approx(32400.0)
    a, b = allocation.jobs
    assert (a.node_names, b.node_names) == (("n1", "n2"), ("n3", "n4"))
    assert (a.samples_per_s, a.goodput, a.rescaled) == (180.0, 16200.0, True)


def test_greedy_finds_it_and_equal_share_splits_evenly() -> None:
    assert greedy(PROBLEM).objective == pytest.approx(32400.0)
    shares = equal_share(PROBLEM)
    assert [j.node_count for j in shares.jobs] == [2, 2]
    assert shares.objective == pytest.approx(PROBLEM.evaluate(shares))


def test_same_problem_same_answer_and_unknown_backend_named() -> None:
    for backend in BACKENDS:
        first, again = solve(PROBLEM, backend=backend), solve(PROBLEM, backend=backend)
        assert first.jobs == again.jobs
    with pytest.raises(ValueError, match="backend 'glpk' is not one of cbc, cpsat"):
        solve(PROBLEM, backend="glpk")
