"""Eq. (g), the early-finish term, on an instance worked out by hand."""

import importlib

import pytest
from interstice.optimizer import (
    BACKENDS,
    Job,
    Problem,
    ScalabilityPoint,
    ScalabilityTable,
    Weights,
    greedy,
    solve,
)
from interstice.optimizer.formulation import build_options
from interstice.optimizer.solve import chosen_options

# Model "m" runs 100 samples/s per node, linearly, measured on 1, 2 and 4 nodes. Horizon
# H = 100 s, no rescale cost, so n nodes train 10,000 n samples over the horizon.
#   job f: 1..4 nodes, 5,000 samples left: finishes within H on any count. Goodput (a) is
#          5,000 on every count; (g) adds beta (10,000 n - 5,000) = 4,500, 13,500, 22,500,
#          31,500 for n = 1..4 (beta = 0.9): v_f(n) = 9,500, 18,500, 27,500, 36,500.
#   job g: 1..4 nodes, 1e9 samples left: v_g(n) = 10,000 n, nothing beyond (g never finishes).
# Alone on four idle nodes, f takes all four (the cap alone: one node, three left idle).
# With g on six idle nodes: g's goodput comes first, f gets the two g cannot use:
#   g=4, f=2: 58,500;  g=3, f=3: 57,500;  g=2, f=4: 56,500;  g=4, f=1: 49,500.
# With beta = 0 (the bare cap of (a)) f is worth 5,000 on any count, so it keeps one node:
# alone [1] (5,000), and with g [1, 4] (45,000), one node left idle.
TABLE = ScalabilityTable(
    points=tuple(ScalabilityPoint(model="m", nodes=n, samples_per_s=100.0 * n) for n in (1, 2, 4))
)
FINISHING = Job(job_id="f", model="m", min_nodes=1, max_nodes=4, samples_remaining=5000.0)
LONG = Job(job_id="g", model="m", min_nodes=1, max_nodes=4, samples_remaining=1e9)
SAMPLES = Weights(node_seconds=False)  # the values above are worked in samples
ALONE = Problem(
    idle_nodes=("n1", "n2", "n3", "n4"),
    jobs=(FINISHING,),
    scalability=TABLE,
    weights=SAMPLES,
    horizon_s=100.0,
)
SHARED = Problem(
    idle_nodes=tuple(f"n{i}" for i in range(1, 7)),
    jobs=(FINISHING, LONG),
    scalability=TABLE,
    weights=SAMPLES,
    horizon_s=100.0,
)
BARE_CAP = Weights(node_seconds=False, early_finish=0.0)


def test_the_worked_values_use_the_documented_weight() -> None:
    assert ALONE.weights.early_finish == Weights().early_finish == 0.9
    options = build_options(ALONE)
    # Every count is kept: each is worth strictly more than the fewer counts.
    assert options.count.tolist() == [0, 1, 2, 3, 4]
    assert options.value.tolist() == pytest.approx([0.0, 9500.0, 18500.0, 27500.0, 36500.0])
    assert options.goodput.tolist() == pytest.approx([0.0] + [5000.0] * 4)


def test_the_bare_cap_keeps_only_the_fewest_nodes_that_finish() -> None:
    options = build_options(ALONE.model_copy(update={"weights": BARE_CAP}))
    # Counts 2..4 are worth no more than 1 (5,000 each), so the reduction drops them.
    assert options.count.tolist() == [0, 1]
    assert options.value.tolist() == pytest.approx([0.0, 5000.0])


@pytest.mark.parametrize(
    ("problem", "counts", "objective"),
    [
        (ALONE, [4], 36500.0),
        (SHARED, [2, 4], 58500.0),
        (ALONE.model_copy(update={"weights": BARE_CAP}), [1], 5000.0),
        (SHARED.model_copy(update={"weights": BARE_CAP}), [1, 4], 45000.0),
    ],
    ids=[
        "finishable-job-takes-spare-nodes",
        "goodput-job-served-first",
        "bare-cap-alone",
        "bare-cap-shared",
    ],
)
def test_every_solver_allocates_as_worked_out(problem: Problem, counts: list, objective: float):
    options = build_options(problem)
    capacity = len(problem.idle_nodes)
    for backend in BACKENDS:
        allocation = solve(problem, backend=backend)
        assert [a.node_count for a in allocation.jobs] == counts
        assert allocation.objective == pytest.approx(objective)
        assert problem.evaluate(allocation) == pytest.approx(objective)
        assert allocation.jobs[0].goodput == pytest.approx(5000.0)  # reported goodput: capped
        # The backend itself, from every job at its zero option.
        module = importlib.import_module(f"interstice.optimizer.{backend}")
        answer = module.solve(options, capacity, 10.0, options.start[:-1])
        assert answer.status == "optimal"
        assert options.count[chosen_options(options, answer.values)].tolist() == counts
    assert [a.node_count for a in greedy(problem).jobs] == counts
