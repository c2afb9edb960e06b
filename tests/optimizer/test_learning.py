"""Throughput curves: the default one, and the fit to reported rates."""

import csv

import numpy as np
import pytest
from interstice.optimizer import Job, Problem, ScalabilityPoint, ScalabilityTable, Weights, solve
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


SAMPLES = Weights(node_seconds=False)
"""Raw samples: under the default node_seconds a job's level cancels out (its term is divided
by its own best rate per node), so only shape errors would matter."""


def learned_allocations(
    jobs: tuple[Job, ...], truth: dict, table: ScalabilityTable, solves: int
) -> list[list[int]]:
    """Counts per solve when each running job reports its true rate after every solve.

    Before each solve every job's curve is ``fit_curve`` of its prior (its table rows, or
    the default curve without one) and its reports so far (one report per solve it ran in,
    weight 10: ten progress reports of one solve interval).
    """
    reports: dict[str, list[RateObservation]] = {job.job_id: [] for job in jobs}
    pool = tuple(f"n{i:02d}" for i in range(16))
    history = []
    for _ in range(solves):
        fitted = []
        for job in jobs:
            prior = (
                tuple(p for p in table.points if p.model == job.model)
                if job.model in table.models
                else None
            )
            rates = fit_curve(prior, reports[job.job_id], job.max_nodes)
            fitted.append(job.model_copy(update={"rates": rates}))
        problem = Problem(idle_nodes=pool, jobs=tuple(fitted), scalability=table,
                          weights=SAMPLES, horizon_s=100.0)  # fmt: skip
        counts = [a.node_count for a in solve(problem).jobs]
        history.append(counts)
        for job, n in zip(jobs, counts, strict=True):
            if n:
                rate = truth[job.job_id](n)
                reports[job.job_id].append(RateObservation(nodes=n, samples_per_s=rate, weight=10))
    return history


def true_allocation(jobs: tuple[Job, ...], truth: dict, table: ScalabilityTable) -> list[int]:
    """The allocation with every job's true curve known, sampled at every count."""
    known = tuple(
        job.model_copy(
            update={
                "rates": tuple(
                    ScalabilityPoint(model="t", nodes=n, samples_per_s=truth[job.job_id](n))
                    for n in range(1, job.max_nodes + 1)
                )
            }
        )  # fmt: skip
        for job in jobs
    )
    pool = tuple(f"n{i:02d}" for i in range(16))
    problem = Problem(idle_nodes=pool, jobs=known, scalability=table, weights=SAMPLES,
                      horizon_s=100.0)  # fmt: skip
    return [a.node_count for a in solve(problem).jobs]


LINEAR = ScalabilityTable(
    points=tuple(
        ScalabilityPoint(model=model, nodes=n, samples_per_s=per_node * n)
        for model, per_node in (("m", 100.0), ("n", 40.0))
        for n in (1, 2, 4, 8, 16)
    )
)


@pytest.mark.parametrize(
    ("a_model", "a_truth", "b_truth"),
    [
        # The table says 100 per node, linear; a really scales as 100 n**0.6. b (40 per node,
        # at most 8 nodes) is what the table says. Believed: a=16, b=0. True: a=8, b=8.
        ("m", lambda n: 100.0 * n**0.6, lambda n: 40.0 * n),
        # The table overstates a's level (the replay's --rate-error): 100 per node, truly
        # 30, below b's 40. Believed: a=16, b=0. True: a=8, b=8.
        ("m", lambda n: 30.0 * n, lambda n: 40.0 * n),
        # a's model has no table row: the default curve (about 3,040 per node) against a
        # true 50 n**0.8, less per node than b beyond 1 node. Believed: a=16. True: 8, 8.
        ("unlisted", lambda n: 50.0 * n**0.8, lambda n: 40.0 * n),
    ],
    ids=["shape", "level", "default-curve"],
)
def test_a_job_whose_true_curve_differs_converges_within_two_solves(
    a_model, a_truth, b_truth
) -> None:
    jobs = (
        Job(job_id="a", model=a_model, min_nodes=1, max_nodes=16, samples_remaining=1e12),
        Job(job_id="b", model="n", min_nodes=1, max_nodes=8, samples_remaining=1e12),
    )
    truth = {"a": a_truth, "b": b_truth}
    target = true_allocation(jobs, truth, LINEAR)
    history = learned_allocations(jobs, truth, LINEAR, solves=6)
    assert history[0] != target  # the table (or the default curve) misleads the first solve
    assert history[1:] == [target] * 5  # from the second solve on: the true allocation
