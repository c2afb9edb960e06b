"""One tiny instance whose optimum is worked out by hand."""

import pytest
from interstice.optimizer import (
    BACKENDS,
    Job,
    Problem,
    ScalabilityPoint,
    ScalabilityTable,
    Weights,
    equal_share,
    greedy,
    solve,
)

# Model "m" runs 100 samples/s on 1 node, 180 on 2, 300 on 4 (3 nodes interpolate to 240).
# Four idle nodes n1..n4, horizon H = 100 s, every growth costs rescale_up_s = 10 s, so a
# grown job runs 90 s: goodput = 90 x rate.
#   job a: 1..4 nodes, holds none:   1 -> 9000, 2 -> 16200, 3 -> 21600, 4 -> 27000 samples.
#   job b: exactly 3 nodes, holds n4 (it must grow to 3): 3 -> 21600 samples.
# Allocations within 4 nodes: a=4, b=0: 27000; a=1, b=3: 30600; a=3, b=0: 21600;
# a=0, b=3: 21600. The optimum is a=1, b=3 with objective 30600.
# The greedy (the LP relaxation's order) takes a's steps of 9000 and 7200 per node first
# (b's 7200 per node ties with a's second step; job order breaks it), then cannot fit b's
# 3 nodes in the 2 left: the LP optimum is fractional, so a solver must run. Its final pass
# gives a the 4 nodes: 27000, 12 % short of the optimum.
# Names: b keeps n4; the free nodes n1, n2, n3 go in job order: a takes n1, b takes n2, n3.
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
        Job(job_id="b", model="m", min_nodes=3, max_nodes=3, nodes=("n4",),
            samples_remaining=1e9, rescale_up_s=10.0),
    ),
    scalability=TABLE,
    weights=Weights(node_seconds=False),  # worked in samples
    horizon_s=100.0,
)  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_find_the_hand_worked_optimum(backend: str) -> None:
    allocation = solve(PROBLEM, backend=backend)
    assert (allocation.status, allocation.backend) == ("optimal", backend)
    assert allocation.termination != "lp-integral"  # the solver ran
    assert allocation.objective == pytest.approx(30600.0)
    assert PROBLEM.evaluate(allocation) == pytest.approx(30600.0)
    a, b = allocation.jobs
    assert (a.node_names, b.node_names) == (("n1",), ("n2", "n3", "n4"))
    assert (a.samples_per_s, a.goodput, a.rescaled) == (100.0, 9000.0, True)
    assert (b.samples_per_s, b.goodput, b.rescaled) == (240.0, 21600.0, True)


def test_greedy_falls_short_and_equal_share_drops_the_job_that_needs_more_than_a_share() -> None:
    shortfall = greedy(PROBLEM)
    assert [j.node_count for j in shortfall.jobs] == [4, 0]
    assert shortfall.objective == pytest.approx(27000.0)
    # Equal share: 2 nodes each; b needs 3 > 2, so it gets none and a gets all 4.
    shares = equal_share(PROBLEM)
    assert [j.node_count for j in shares.jobs] == [4, 0]
    assert shares.objective == pytest.approx(PROBLEM.evaluate(shares))


def test_same_problem_same_answer_and_unknown_backend_named() -> None:
    for backend in BACKENDS:
        first, again = solve(PROBLEM, backend=backend), solve(PROBLEM, backend=backend)
        assert first.jobs == again.jobs
    with pytest.raises(ValueError, match="backend 'glpk' is not one of cbc, cpsat"):
        solve(PROBLEM, backend="glpk")


def test_backend_names_a_solver_only_when_one_ran() -> None:
    nothing = PROBLEM.model_copy(update={"jobs": ()})
    assert (solve(nothing, "cbc").backend, solve(nothing, "cbc").termination) == ("none", "trivial")
    # Five nodes: the greedy takes a to 2, then b to 3, which fills the pool exactly; a's next
    # step is refused with no node left, so the LP optimum is integral and no solver runs.
    roomy = PROBLEM.model_copy(update={"idle_nodes": ("n1", "n2", "n3", "n4", "n5")})
    proven = solve(roomy, "cpsat")
    assert (proven.status, proven.backend, proven.termination) == (
        "optimal",
        "greedy",
        "lp-integral",
    )
