"""Forecast coverage (:mod:`interstice.optimizer.coverage`): the share of the newest ended holes
whose end had been forecast, what a solve is told while too few have ended, and the rule that
a solve uses the forecasts only while it is unknown or at least
``Problem.forecast_min_coverage``."""

from __future__ import annotations

import pytest
from interstice.optimizer import BACKENDS, greedy, solve
from interstice.optimizer.coverage import (
    COVERAGE_HOLES,
    MIN_COVERAGE_HOLES,
    CoverageMeter,
    forecast_coverage,
    solve_coverage,
)
from test_forecasts import grow_problem


def test_coverage_is_unknown_below_the_minimum_and_counts_only_the_newest_holes() -> None:
    assert forecast_coverage([True] * (MIN_COVERAGE_HOLES - 1)) is None
    assert forecast_coverage([True, False] * (MIN_COVERAGE_HOLES // 2)) == 0.5
    # newest first: the 200 newest were forecast, the older 100 not
    assert forecast_coverage([True] * COVERAGE_HOLES + [False] * 100) == 1.0
    meter = CoverageMeter()
    for _ in range(100):
        meter.ended(False)
    assert meter.coverage == 0.0
    for _ in range(150):
        meter.ended(True)  # now the newest 200: 150 forecast, 50 not
    assert meter.coverage == 150 / COVERAGE_HOLES


def test_a_solve_is_told_the_idle_nodes_share_until_enough_holes_have_ended() -> None:
    idle = ("n1", "n2", "n3", "n4")
    assert solve_coverage(None, {"n1": 5.0, "n2": 9.0, "n3": 1.0}, idle) == 0.75
    assert solve_coverage(None, {n: 5.0 for n in idle}, idle) == 1.0
    assert solve_coverage(0.5, {n: 5.0 for n in idle}, idle) == 0.5  # measured: it wins
    assert solve_coverage(None, {}, idle) is None
    assert solve_coverage(None, None, idle) is None


# grow_problem (test_forecasts): job a holds n1, n2; n3 is free. Told that n3 leaves in 30 s,
# every policy keeps a on n1, n2 (60,000 samples over the horizon); told nothing, a grows onto
# n3 (84,000, as the model counts it without forecasts).
@pytest.mark.parametrize(
    ("coverage", "min_coverage", "used"),
    [(None, 0.9, True), (0.95, 0.9, True), (0.9, 0.9, True), (0.5, 0.9, False), (0.0, 0.0, True)],
)
def test_below_the_minimum_coverage_every_answer_is_the_one_without_forecasts(
    coverage, min_coverage, used
) -> None:
    told = grow_problem({"n3": 30.0}).model_copy(
        update={"forecast_coverage": coverage, "forecast_min_coverage": min_coverage}
    )
    assert told.forecasts_used is used
    assert (told.lives is not None) is used
    untold = grow_problem(None)
    for policy in [lambda p, b=b: solve(p, b) for b in BACKENDS] + [greedy]:
        answer, without = policy(told), policy(untold)
        if used:
            assert answer.jobs[0].node_names == ("n1", "n2")
            assert answer.objective == pytest.approx(60000.0)
        else:
            assert answer.jobs[0].node_names == without.jobs[0].node_names == ("n1", "n2", "n3")
            assert answer.objective == pytest.approx(without.objective)


def test_no_forecast_is_never_used_and_a_bad_coverage_is_named() -> None:
    assert not grow_problem(None).forecasts_used
    with pytest.raises(ValueError, match="forecast_coverage"):
        grow_problem({"n3": 30.0}).model_validate(
            grow_problem({"n3": 30.0}).model_dump() | {"forecast_coverage": 1.5}
        )
