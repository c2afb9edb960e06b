"""Idle-hole forecasts (coefficient (h) and constraints (3) of the formulation): hand-worked
instances, the node classes, and random instances against exhaustive enumeration.

The hand-worked instances use model ``m`` at 100 samples/s per node (1-4 nodes), H = 300 s,
objective in samples (``Weights(node_seconds=False)``), no early-finish cap (remaining
samples 1e9). A node without a forecast stays through the horizon.
"""

import random
from collections import Counter

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
from interstice.optimizer.forecast import node_lives
from interstice.optimizer.formulation import build_options
from interstice.optimizer.solve import LP_INTEGRAL
from random_instances import (
    assert_rules_hold,
    exhaustive_forecast_optimum,
    forecast_share,
    forecast_trained,
    forecast_worst,
    random_forecast_problem,
    random_problem,
)

TABLE = ScalabilityTable(
    points=tuple(ScalabilityPoint(model="m", nodes=n, samples_per_s=100.0 * n) for n in range(1, 5))
)


def job(job_id: str, nodes: tuple[str, ...], up_s: float, down_s: float, **more) -> Job:
    return Job(job_id=job_id, model="m", min_nodes=1, max_nodes=3, nodes=nodes,
               samples_remaining=1e9, rescale_up_s=up_s, rescale_down_s=down_s, **more)  # fmt: skip


def problem(idle: int, jobs: tuple[Job, ...], forecast: dict[str, float] | None) -> Problem:
    return Problem(idle_nodes=tuple(f"n{i}" for i in range(1, idle + 1)), jobs=jobs,
                   scalability=TABLE, weights=Weights(node_seconds=False), horizon_s=300.0,
                   idle_forecast_s=forecast)  # fmt: skip


def every_answer(instance: Problem) -> list:
    """Both backends, the greedy and equal share, each checked by evaluate."""
    answers = [solve(instance, backend) for backend in BACKENDS]
    answers += [greedy(instance), equal_share(instance)]
    for answer in answers:
        assert instance.evaluate(answer) == pytest.approx(answer.objective)
    return answers


# A grow refused onto a node forecast to leave before the grow pays back.
# Job a holds n1, n2 (no forecast), may grow to 3; rescale_up_s 20, rescale_down_s 5. n3 is
# free and forecast to leave after T seconds.
#   stay on 2:  200/s x 300 s                                   = 60,000
#   grow to 3:  paused to 20 s, 300/s on 20..T, n3 leaves at T: paused to T + 5,
#               200/s on T+5..300: 300 (T - 20) + 200 (295 - T) = 100 T + 53,000
# The grow pays back iff 100 T + 53,000 > 60,000, i.e. T > 70 s. Without a forecast
# (T = H = 300) it is 300/s x 280 s = 84,000. So T = 30: stay (60,000); T = 71: grow (60,100).
def grow_problem(forecast: dict[str, float] | None) -> Problem:
    return problem(3, (job("a", ("n1", "n2"), up_s=20, down_s=5),), forecast)


@pytest.mark.parametrize(
    ("forecast", "nodes", "objective"),
    [
        (None, ("n1", "n2", "n3"), 84000.0),
        ({"n3": 30.0}, ("n1", "n2"), 60000.0),
        ({"n3": 69.0}, ("n1", "n2"), 60000.0),
        ({"n3": 71.0}, ("n1", "n2", "n3"), 60100.0),
    ],
)
def test_a_grow_is_refused_onto_a_node_that_leaves_before_the_grow_pays_back(
    forecast, nodes, objective
) -> None:
    instance = grow_problem(forecast)
    *policies, shares = every_answer(instance)
    for answer in policies:  # both backends and the greedy
        assert answer.jobs[0].node_names == nodes
        assert answer.objective == pytest.approx(objective)
    # Equal share ignores the objective: it gives a its max_nodes whatever they earn
    # (100 T + 53,000 at T = 30 or 69).
    assert shares.jobs[0].node_names == ("n1", "n2", "n3")
    leaves_s = (forecast or {"n3": 310.0})["n3"]
    assert shares.objective == pytest.approx(min(100 * leaves_s + 53000, 84000))


# The long-lived node goes to the job with the costlier rescale.
# a holds n1, n2 and b holds n3, n4; each may grow to 3 (rescale_up_s 10 s); a's
# rescale_down_s is 2 s, b's 60 s. Free: n5 (no forecast) and n6 (forecast 100 s).
#   grow onto n5:  paused to 10, 300/s on 10..300                              = 87,000
#   a onto n6:     300/s on 10..100 = 27,000; paused to 102, 200/s on 102..300 = 39,600
#                  total 66,600
#   b onto n6:     27,000; paused to 160, 200/s on 160..300 = 28,000: 55,000, below
#                  staying (60,000), so b never grows onto n6.
# a on n6 and b on n5: 66,600 + 87,000 = 153,600; a on n5 and b staying: 87,000 + 60,000
# = 147,000. The optimum gives the long-lived n5 to b. The greedy takes a's step first (equal
# gains per node, job order) and gives it the longest-lived node left, n5; b's step, onto
# n6 only, is worth less than staying, and is refused: 147,000. Equal share gives each job 3
# nodes and the placement gives n5 to b, whose rescales cost more: 153,600.
COSTLY = problem(
    6,
    (job("a", ("n1", "n2"), up_s=10, down_s=2), job("b", ("n3", "n4"), up_s=10, down_s=60)),
    {"n6": 100.0},
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_long_lived_node_goes_to_the_job_with_the_costlier_rescale(backend: str) -> None:
    answer = solve(COSTLY, backend)
    assert (answer.status, answer.backend) == ("optimal", backend)  # a solver ran
    assert [a.node_names for a in answer.jobs] == [("n1", "n2", "n6"), ("n3", "n4", "n5")]
    assert answer.objective == pytest.approx(153600.0)
    assert COSTLY.evaluate(answer) == pytest.approx(153600.0)
    assert [a.goodput for a in answer.jobs] == pytest.approx([66600.0, 87000.0])


def test_the_greedy_spends_the_long_lived_node_first_and_equal_share_places_it_by_cost() -> None:
    shortfall = greedy(COSTLY)
    assert [a.node_names for a in shortfall.jobs] == [("n1", "n2", "n5"), ("n3", "n4")]
    assert shortfall.objective == pytest.approx(147000.0)
    shares = equal_share(COSTLY)
    assert [a.node_names for a in shares.jobs] == [("n1", "n2", "n6"), ("n3", "n4", "n5")]
    assert shares.objective == pytest.approx(153600.0)


# A job that must shrink keeps its longest-lived node. a holds n1 (forecast 50 s) and n2
# (no forecast) but may run on 1 node only (max_nodes 1). Keeping n2: 100/s, paused 5 s by
# the shrink: 100 x 295 = 29,500. Keeping n1 (by name, as without forecasts): 100 x 45 =
# 4,500, then a stops at 50 s.
def test_a_shrinking_job_keeps_its_longest_lived_node() -> None:
    instance = Problem(
        idle_nodes=("n1", "n2"),
        jobs=(job("a", ("n1", "n2"), up_s=10, down_s=5).model_copy(update={"max_nodes": 1}),),
        scalability=TABLE, weights=Weights(node_seconds=False), horizon_s=300.0,
        idle_forecast_s={"n1": 50.0},
    )  # fmt: skip
    for answer in every_answer(instance):
        assert answer.jobs[0].node_names == ("n2",)
        assert answer.objective == pytest.approx(29500.0)
    kept_n1 = solve(instance).model_copy(
        update={"jobs": (forecast_share(instance, instance.jobs[0], ["n1"], 0),)}
    )
    assert instance.evaluate(kept_n1) == pytest.approx(4500.0)


def test_a_forecast_beyond_the_horizon_changes_no_count_and_none_changes_nothing() -> None:
    for seed in range(20):
        base = random_problem(random.Random(seed))
        fields = {name: getattr(base, name) for name in Problem.model_fields}
        empty = Problem(**{**fields, "idle_forecast_s": {}})
        beyond = Problem(
            **{**fields, "idle_forecast_s": {n: base.horizon_s + 1.0 for n in base.idle_nodes}}
        )
        for backend in BACKENDS:
            answer = solve(base, backend)
            assert solve(empty, backend).jobs == answer.jobs  # names included
            other = solve(beyond, backend)
            assert [a.node_count for a in other.jobs] == [a.node_count for a in answer.jobs]
            assert other.objective == answer.objective
            assert beyond.evaluate(other) == pytest.approx(answer.objective)


def test_node_classes_by_forecast_life() -> None:
    nodes = [f"n{i}" for i in range(8)]
    forecast = {"n0": 10.0, "n1": 10.0, "n2": 20.0, "n3": 40.0, "n4": 80.0, "n5": 500.0}
    lives = node_lives(nodes, forecast, horizon_s=300.0, max_classes=8)
    assert lives.life_s.tolist() == [10.0, 20.0, 40.0, 80.0]  # each distinct life a class
    assert [lives.node_class[n] for n in nodes] == [1, 1, 2, 3, 4, 5, 5, 5]
    # Two classes: 5 short-lived nodes split by count, each class at its shortest life:
    # lives 10, 10 (0 and 1 shorter) -> group 0; 20 (2 shorter: 2*2//5 = 0) -> 0;
    # 40 (3 shorter: 6//5 = 1) -> 1; 80 (4 shorter: 8//5 = 1) -> 1.
    lives = node_lives(nodes, forecast, horizon_s=300.0, max_classes=2)
    assert lives.life_s.tolist() == [10.0, 40.0]
    assert [lives.node_class[n] for n in nodes] == [1, 1, 1, 2, 2, 3, 3, 3]
    assert lives.keep_order(["n6", "n0", "n5", "n3"]) == ["n5", "n6", "n3", "n0"]
    assert node_lives(nodes, None, 300.0, 8) is None and node_lives(nodes, {}, 300.0, 8) is None
    assert node_lives(nodes, {"n0": 300.0}, 300.0, 8).classes == 0


def test_by_default_the_short_lived_nodes_are_one_class_at_the_shortest_life() -> None:
    # forecast_classes = 1: nodes leaving within H (n1, n2, n3) are class 1 at life 10 s;
    # n4 (beyond H) and n5 (unknown) stay through the horizon, class 2.
    lives = problem(5, (), {"n1": 10.0, "n2": 120.0, "n3": 290.0, "n4": 900.0}).lives
    assert lives.life_s.tolist() == [10.0]
    assert [lives.node_class[f"n{i}"] for i in range(1, 6)] == [1, 1, 1, 2, 2]


@pytest.mark.parametrize(
    ("forecast", "message"),
    [
        ({"n9": 10.0}, "idle_forecast_s: node 'n9' is not idle"),
        ({"n1": -1.0}, "node 'n1' has -1.0 s left"),
        ({"n1": float("inf")}, "node 'n1' has inf s left"),
    ],
)
def test_a_bad_forecast_is_named(forecast, message) -> None:
    with pytest.raises(ValueError, match=message):
        grow_problem(forecast)


INSTANCES = 60


@pytest.mark.parametrize("seed", range(INSTANCES))
def test_backends_reach_the_exhaustive_optimum_with_forecasts(seed: int) -> None:
    instance = random_forecast_problem(random.Random(seed))
    optimum, witness = exhaustive_forecast_optimum(instance)
    close = pytest.approx(optimum, rel=1e-7, abs=1e-6)
    for backend in BACKENDS:
        answer = solve(instance, backend=backend)
        assert answer.status == "optimal"
        assert_rules_hold(instance, answer)
        assert answer.objective == close
    for policy in (greedy, equal_share):
        answer = policy(instance)
        assert_rules_hold(instance, answer)
        assert answer.objective <= optimum + 1e-6 * max(1.0, abs(optimum))
    # The scorer against coefficient (h) written out, on every answer's nodes.
    for answer in (witness, solve(instance), greedy(instance), equal_share(instance)):
        for one, share in zip(instance.jobs, answer.jobs, strict=True):
            value, goodput = forecast_worst(instance, one, share.node_names, share.spb_depth)
            assert share.goodput == pytest.approx(goodput, rel=1e-9, abs=1e-6)
            score = instance.score(one, share.node_names, share.spb_depth)[3]
            assert score == pytest.approx(value, rel=1e-9, abs=1e-6)


def test_forecast_instances_take_every_path_of_solve() -> None:
    """Forecasts within the horizon bind (3) in many instances, so a solver runs; in others
    the relaxation's answer satisfies (3) and is optimal at once."""
    instances = [random_forecast_problem(random.Random(seed)) for seed in range(INSTANCES)]
    assert sum(p.lives.classes > 0 for p in instances) >= INSTANCES * 3 // 4
    terminations = Counter(solve(p, backend="cpsat").termination for p in instances)
    assert terminations["OPTIMAL"] >= 10
    assert terminations[LP_INTEGRAL] >= 10
    levels = Counter(int(level) for p in instances for level in build_options(p).level)
    assert len(levels) >= 4  # options at no new node (0) and at several levels


def test_the_schedule_written_out_by_hand() -> None:
    # forecast_trained itself, on the grow of the first instance: 100 T + 53,000 at T = 30.
    instance = grow_problem({"n3": 30.0})
    trained = forecast_trained(instance, instance.jobs[0], ["n1", "n2", "n3"], 0, level=1)
    assert trained == pytest.approx(56000.0)


# The guaranteed value of a level (the envelope of (h)). Model "dip" runs 100 samples/s on
# 1 node and only 60 on 2; a fairness weight of 1 (u = 100 x 300 = 30,000 samples) makes a
# second node worth having anyway. Job a holds n1 (no forecast), may run on 1..2 nodes;
# rescale_up_s 10, rescale_down_s 1. n2 is free.
#   stay on 1:          100 x 300 + 30,000 log2(2)                            = 60,000
#   n2 stays (level 2): 60 x 290 + 30,000 log2(3) = 17,400 + 47,548.875       = 64,948.875
#   n2 leaves at 100 s (level 1): 60 x 90 + (paused to 101) 100 x 199 + 47,548.875
#                       = 72,848.875: more, because the job runs faster without n2.
# Level 1 means "new nodes of class 1 or longer-lived", so it is worth the least of both:
# 64,948.875, and every answer on n2 is worth that whether n2 leaves at 100 s or stays.
def test_a_level_is_worth_the_least_that_its_node_sets_earn() -> None:
    dip = ScalabilityTable.from_csv("model,nodes,samples_per_s\ndip,1,100\ndip,2,60\n")
    one = Job(job_id="a", model="dip", min_nodes=1, max_nodes=2, nodes=("n1",),
              samples_remaining=1e9, rescale_up_s=10.0, rescale_down_s=1.0)  # fmt: skip
    for forecast in ({"n2": 100.0}, {"n2": 400.0}):
        instance = Problem(idle_nodes=("n1", "n2"), jobs=(one,), scalability=dip,
                           weights=Weights(node_seconds=False, fairness=1.0), horizon_s=300.0,
                           idle_forecast_s=forecast)  # fmt: skip
        assert instance.score(one, ("n1", "n2"), 0)[3] == pytest.approx(64948.875)
        for answer in every_answer(instance):
            assert answer.jobs[0].node_names == ("n1", "n2")
            assert answer.objective == pytest.approx(64948.875)
        if instance.lives.classes:  # n2 leaves at 100 s: the samples behind 72,848.875
            trained = forecast_trained(instance, one, ["n1", "n2"], 0, level=1)
            assert trained == pytest.approx(60 * 90 + 100 * 199)


@pytest.mark.parametrize(("loss_s", "kept", "value"), [(60.0, 2, 59_000.0), (0.0, 3, 60_000.0)])
def test_a_planned_shrink_before_a_forecast_reclaim_pays_where_a_reclaim_costs_more(
    loss_s: float, kept: int, value: float
) -> None:
    # Job a holds n1..n3 (down 5 s); n3 is forecast to leave at 10 s. Keeping it: 3 nodes
    # for 10 s (3,000 samples), then the reclaim pauses a to 10 + 5 + loss_s and it goes on
    # on 2 nodes: 3,000 + 200 (285 - loss_s). A planned shrink now: paused to 5 s, then 2
    # nodes, 200 x 295 = 59,000. With a reclaim that loses 60 s more than a shrink, keeping
    # is worth 48,000 and a sheds n3 now; with none (the replay's default), 60,000: a keeps
    # it until the reclaim. The shrink pays once loss_s > 5 s.
    lossy = job("a", ("n1", "n2", "n3"), up_s=10, down_s=5, reclaim_loss_s=loss_s)
    instance = problem(3, (lossy,), {"n3": 10.0})
    for answer in [solve(instance, backend) for backend in BACKENDS] + [greedy(instance)]:
        assert instance.evaluate(answer) == pytest.approx(answer.objective)
        assert answer.jobs[0].node_names == ("n1", "n2", "n3")[:kept]
        assert answer.objective == pytest.approx(value)
