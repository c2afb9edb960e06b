"""Eqs. (c)-(f), the admin weights, each on an instance worked out by hand.

Every instance is checked three ways: ``solve`` on both backends, each backend's own model
from every job at its zero option (so the solver runs even where the greedy proves the
answer), and the greedy policy. Horizon H = 100 s and no rescale cost unless stated, so a
job on n nodes of a model running r(n) samples/s trains 100 r(n) samples over the horizon;
values are in samples (``node_seconds=False``) unless a test sets a normalisation.
"""

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


def table(**rates: tuple[float, ...]) -> ScalabilityTable:
    """Model name -> samples/s on 1, 2, ... nodes."""
    return ScalabilityTable(
        points=tuple(
            ScalabilityPoint(model=model, nodes=n, samples_per_s=rate)
            for model, curve in rates.items()
            for n, rate in enumerate(curve, start=1)
        )
    )


def job(job_id: str, model: str, max_nodes: int, **fields) -> Job:
    return Job(job_id=job_id, model=model, min_nodes=1, max_nodes=max_nodes,
               samples_remaining=1e12, **fields)  # fmt: skip


def problem(jobs: tuple[Job, ...], rates: ScalabilityTable, nodes: int, **weights) -> Problem:
    return Problem(idle_nodes=tuple(f"n{i}" for i in range(1, nodes + 1)), jobs=jobs,
                   scalability=rates, weights=Weights(**{"node_seconds": False, **weights}),
                   horizon_s=100.0)  # fmt: skip


def assert_every_solver_gives(instance: Problem, counts: list[int], objective: float) -> None:
    options = build_options(instance)
    for backend in BACKENDS:
        allocation = solve(instance, backend=backend)
        assert [a.node_count for a in allocation.jobs] == counts, backend
        assert allocation.objective == pytest.approx(objective)
        assert instance.evaluate(allocation) == pytest.approx(objective)
        module = importlib.import_module(f"interstice.optimizer.{backend}")
        answer = module.solve(options, len(instance.idle_nodes), 10.0, options.start[:-1])
        assert answer.status == "optimal"
        assert options.count[chosen_options(options, answer.values)].tolist() == counts
    assert [a.node_count for a in greedy(instance).jobs] == counts


# Fairness (d): a runs 100 samples/s per node, b 90 (linear), both 1..4 nodes, 4 idle nodes.
# Without fairness a's nodes are worth more: a=4, b=0: 40,000 (a=3, b=1: 39,000).
# With w_f = 1 each job adds u_j log2(1 + n), u_a = 100 x 100 = 10,000, u_b = 9,000:
#   a=4, b=0: 40,000 + 10,000 log2 5 = 63,219;   a=3, b=1: 39,000 + 20,000 + 9,000 = 68,000;
#   a=2, b=2: 38,000 + 19,000 log2 3 = 68,115;   a=1, b=3: 37,000 + 10,000 + 18,000 = 65,000.
# The optimum is the even split a=2, b=2.
FAIR = (table(fast=(100, 200, 300, 400), slow=(90, 180, 270, 360)),
        (job("a", "fast", 4), job("b", "slow", 4)))  # fmt: skip


def test_fairness_spreads_the_nodes() -> None:
    rates, jobs = FAIR
    assert_every_solver_gives(problem(jobs, rates, 4), [4, 0], 40000.0)
    assert_every_solver_gives(
        problem(jobs, rates, 4, fairness=1.0), [2, 2], 38000 + 19000 * 1.5849625007211563
    )


# Churn (e): a runs 100 samples/s per node (linear), holds n1, n2, may grow to 3 of the 3 idle
# nodes. Growing gains 10,000 samples and costs w_c u_a = w_c x 10,000:
#   w_c = 0.5: grow, 30,000 - 5,000 = 25,000 > 20,000;   w_c = 1.5: stay, 20,000 > 15,000.
# Stopping counts as a rescale too. Add b (150 samples/s per node, exactly 3 nodes, u_b =
# 15,000): b can only run if a stops, 45,000 samples less w_c (u_a + u_b) = w_c x 25,000:
#   w_c = 1.5: b=3: 45,000 - 37,500 = 7,500 < a staying at 2: 20,000 (a grown: 15,000);
#   w_c = 0.1: b=3: 45,000 - 2,500 = 42,500 > a grown: 29,000.
CHURN_RATES = table(m=(100, 200, 300), big=(150, 300, 450))
HOLDER = job("a", "m", 3, nodes=("n1", "n2"))


@pytest.mark.parametrize(
    ("jobs", "churn", "counts", "objective"),
    [
        ((HOLDER,), 0.5, [3], 25000.0),
        ((HOLDER,), 1.5, [2], 20000.0),
        ((HOLDER, Job(job_id="b", model="big", min_nodes=3, max_nodes=3, samples_remaining=1e12)),
         1.5, [2, 0], 20000.0),
        ((HOLDER, Job(job_id="b", model="big", min_nodes=3, max_nodes=3, samples_remaining=1e12)),
         0.1, [0, 3], 42500.0),
    ],
    ids=["cheap-churn-grows", "dear-churn-stays", "dear-churn-keeps-the-runner",
         "cheap-churn-stops-it-for-a-better-job"],
)  # fmt: skip
def test_churn_prices_every_rescale(jobs, churn, counts, objective) -> None:
    assert_every_solver_gives(problem(jobs, CHURN_RATES, 3, churn=churn), counts, objective)


# Normalisation (f): a's model runs 1,000 samples/s on 1 node and 1,500 on 2 (poor scaling),
# b's 100 on 1 and 190 on 2, both 1..2 nodes, 2 idle nodes.
#   raw samples: a=2: 150,000; a=1, b=1: 110,000; b=2: 19,000 -> a=2, b=0.
#   speedup (÷ one-node rate 1,000 and 100): a=2: 150; a=1, b=1: 100 + 100 = 200; b=2: 190
#   -> a=1, b=1: the slow model is not starved.
#   node_seconds (÷ best per-node rate, here the one-node rates too): the same, 200.
NORMALISED = (table(fast=(1000, 1500), slow=(100, 190)), (job("a", "fast", 2), job("b", "slow", 2)))


@pytest.mark.parametrize(
    ("weights", "counts", "objective"),
    [({}, [2, 0], 150000.0), ({"speedup": True}, [1, 1], 200.0),
     ({"node_seconds": True}, [1, 1], 200.0)],
    ids=["raw-samples", "speedup", "node-seconds"],
)  # fmt: skip
def test_normalisation_weighs_models_alike(weights, counts, objective) -> None:
    rates, jobs = NORMALISED
    assert_every_solver_gives(problem(jobs, rates, 2, **weights), counts, objective)


def test_node_seconds_divides_by_the_best_rate_per_node_not_the_one_node_rate() -> None:
    # 100 samples/s on 1 node, 220 on 2 (superlinear, e.g. a cache effect): the best per node
    # is 110, so 2 nodes for 100 s are worth 22,000 / 110 = 200 node-seconds (speedup: 220).
    rates = table(m=(100, 220))
    assert rates.best_progress_per_node_s("m") == 110.0
    alone = (job("a", "m", 2),)
    assert solve(problem(alone, rates, 2, node_seconds=True)).objective == pytest.approx(200.0)
    assert solve(problem(alone, rates, 2, speedup=True)).objective == pytest.approx(220.0)
    # node_seconds is the default; speedup alone replaces it; both set is an error.
    assert Weights().node_seconds and not Weights().speedup
    assert not Weights(speedup=True).node_seconds
    with pytest.raises(ValueError, match="speedup and node_seconds exclude each other"):
        Weights(speedup=True, node_seconds=True)


# Priority (c): a runs 100 samples/s, b 90, each exactly 1 node, 1 idle node.
#   w_p = 0 (priorities ignored): a, 10,000 > 9,000;  w_p = 1 with q_b = 2: b, 18,000 > 10,000.
PRIORITY_RATES = table(fast=(100,), slow=(90,))
PRIORITY_JOBS = (job("a", "fast", 1), job("b", "slow", 1, priority=2.0))


@pytest.mark.parametrize(
    ("exponent", "counts", "objective"), [(0.0, [1, 0], 10000.0), (1.0, [0, 1], 18000.0)]
)
def test_priority_multiplies_a_jobs_term(exponent, counts, objective) -> None:
    instance = problem(PRIORITY_JOBS, PRIORITY_RATES, 1, priority=exponent)
    assert_every_solver_gives(instance, counts, objective)
