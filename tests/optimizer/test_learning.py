"""Throughput curves: the default one, and the fit to reported rates."""

import csv

import numpy as np
import pytest
from interstice.optimizer import Job, Problem, ScalabilityPoint, ScalabilityTable, solve
from interstice.optimizer.learning import (
    DEFAULT_EXPONENT,
    DEFAULT_ONE_NODE_SAMPLES_PER_S,
    RateObservation,
    default_curve,
    fit_curve,
)

from interstice import data


def rates_of(points, depth=0) -> list[tuple[int, float]]:
    return [(p.nodes, p.samples_per_s) for p in points if p.spb_depth == depth]


def test_default_curve_is_the_median_power_law_at_powers_of_two_and_max() -> None:
    curve = default_curve(48)
    assert [p.nodes for p in curve] == [1, 2, 4, 8, 16, 32, 48]
    assert curve[0].samples_per_s == DEFAULT_ONE_NODE_SAMPLES_PER_S
    assert curve[-1].samples_per_s == pytest.approx(3039.9 * 48**0.9475)
    assert [p.nodes for p in default_curve(1)] == [1]
    with pytest.raises(ValueError, match="max_nodes must be >= 1, got 0"):
        default_curve(0)


def test_default_constants_are_the_summit_tables_medians() -> None:
    path = data.data_dir() / data.SCALABILITY_FILE
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    rows = list(csv.DictReader(path.open()))
    exponents, one_node = [], []
    for model in sorted({r["model"] for r in rows}):
        mine = [(int(r["nodes"]), float(r["samples_per_s"])) for r in rows if r["model"] == model]
        n, rate = np.array([m for m in mine if m[0] > 0]).T
        exponents.append(np.polyfit(np.log(n), np.log(rate), 1)[0])
        one_node.append(rate[n == 1][0])
    assert np.median(exponents) == pytest.approx(DEFAULT_EXPONENT, abs=1e-4)
    assert np.median(one_node) == DEFAULT_ONE_NODE_SAMPLES_PER_S


PRIOR = (
    ScalabilityPoint(model="m", nodes=1, samples_per_s=100.0),
    ScalabilityPoint(model="m", nodes=4, samples_per_s=300.0),
    ScalabilityPoint(model="m", nodes=1, samples_per_s=150.0, spb_depth=1,
                     progress_per_sample=0.7),
    ScalabilityPoint(model="m", nodes=4, samples_per_s=400.0, spb_depth=1,
                     progress_per_sample=0.7),
)  # fmt: skip


def test_no_observation_gives_the_prior_unchanged() -> None:
    assert fit_curve(PRIOR, [], max_nodes=8) == PRIOR
    assert fit_curve(None, [], max_nodes=8) == default_curve(8)


def test_many_reports_recover_a_power_law_and_leave_other_depths_alone() -> None:
    true = [RateObservation(nodes=n, samples_per_s=50.0 * n**0.6, weight=10) for n in (1, 2, 8)]
    fitted = fit_curve(PRIOR, true * 5, max_nodes=8)
    depth0 = rates_of(fitted)
    assert [n for n, _ in depth0] == [1, 2, 4, 8]
    # 150 observations' weight against the prior's 1: within 1 % of the true curve.
    for n, rate in depth0:
        assert rate == pytest.approx(50.0 * n**0.6, rel=0.01)
    assert [p for p in fitted if p.spb_depth == 1] == list(PRIOR[2:])
    assert all(p.model == "m" for p in fitted)


def test_one_count_observed_keeps_the_priors_shape_at_the_jobs_level() -> None:
    # Observed 2x the prior at 4 nodes (many reports): the slope comes from the prior's two
    # points (b = log 3 / log 4), the level from the report.
    fitted = rates_of(fit_curve(PRIOR, [RateObservation(nodes=4, samples_per_s=600.0,
                                                        weight=1000)], max_nodes=4))  # fmt: skip
    assert fitted[-1][1] == pytest.approx(600.0, rel=1e-3)
    assert fitted[0][1] == pytest.approx(200.0, rel=1e-3)


def test_the_fit_is_monotone_and_concave_even_on_rates_that_are_not() -> None:
    # Rates that fall with the count would give a negative exponent: clipped to 0 (flat).
    falling = [RateObservation(nodes=n, samples_per_s=1000.0 / n, weight=100) for n in (1, 8)]
    flat = rates_of(fit_curve(None, falling, max_nodes=8))
    assert np.all(np.diff([r for _, r in flat]) >= 0)
    # Superlinear rates would give an exponent above 1: clipped to 1 (linear).
    steep = [RateObservation(nodes=n, samples_per_s=10.0 * n**2, weight=100) for n in (1, 8)]
    linear = rates_of(fit_curve(None, steep, max_nodes=8))
    per_node = [r / n for n, r in linear]
    assert np.allclose(per_node, per_node[0])


def test_observations_at_a_depth_the_prior_lacks_are_not_used() -> None:
    report = RateObservation(nodes=2, spb_depth=3, samples_per_s=500.0)
    assert fit_curve(PRIOR, [report], max_nodes=4) == PRIOR


def test_rate_observation_validates_its_fields() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        RateObservation(nodes=0, samples_per_s=1.0)
    with pytest.raises(ValueError, match="greater than 0"):
        RateObservation(nodes=1, samples_per_s=0.0)


TABLE = ScalabilityTable(points=(ScalabilityPoint(model="known", nodes=4, samples_per_s=400.0),))


def test_a_job_with_rates_is_scheduled_though_its_model_is_not_in_the_table() -> None:
    job = Job(job_id="a", model="mine", min_nodes=1, max_nodes=8, samples_remaining=1e12,
              rates=default_curve(8))  # fmt: skip
    problem = Problem(idle_nodes=tuple(f"n{i}" for i in range(8)), jobs=(job,),
                      scalability=TABLE, horizon_s=100.0)  # fmt: skip
    allocation = solve(problem)
    assert allocation.jobs[0].node_count == 8
    assert allocation.jobs[0].samples_per_s == pytest.approx(3039.9 * 8**0.9475)
    assert problem.evaluate(allocation) == pytest.approx(allocation.objective)


def test_rates_replace_the_table_row_and_bad_rates_or_no_rates_are_named() -> None:
    own = (ScalabilityPoint(model="x", nodes=2, samples_per_s=10.0),)
    job = Job(job_id="a", model="known", min_nodes=1, max_nodes=8, samples_remaining=1e12,
              rates=own)  # fmt: skip
    problem = Problem(idle_nodes=("n1", "n2", "n3"), jobs=(job,), scalability=TABLE,
                      horizon_s=100.0)  # fmt: skip
    assert problem.max_count(job, 0) == 2  # its curve ends at 2 nodes, the table's at 4
    assert solve(problem).jobs[0].samples_per_s == 10.0
    twice = own * 2
    with pytest.raises(ValueError, match="job 'a': rates: .*duplicate row"):
        Job(job_id="a", model="known", min_nodes=1, max_nodes=8, samples_remaining=1.0,
            rates=twice)  # fmt: skip
    with pytest.raises(ValueError, match="model 'mine' is not in the scalability table and"):
        Problem(idle_nodes=("n1",), scalability=TABLE, horizon_s=1.0,
                jobs=(Job(job_id="a", model="mine", min_nodes=1, max_nodes=1,
                          samples_remaining=1.0),))  # fmt: skip
