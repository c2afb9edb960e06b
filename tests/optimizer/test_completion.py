"""Term (i), the completion tilt, on instances worked out by hand.

Model "m" is linear, 100 samples/s per node on 1..4 nodes; model "c" is concave, 100, 200,
300 and 330 samples/s on 1..4 nodes. Horizon H = 100 s, no rescale cost, values in samples
(``node_seconds=False``), so a node earns 10,000 samples over H where the rate grows by 100.
Jobs e (submitted at 0 s) and l (submitted at 3,600 s), each 1..4 nodes, never finishing,
share 6 idle nodes: between them they want 8.

- Linear, tau = 36,000 s: k_e = 1, k_l = exp(-0.1) = 0.904837. Every split of the 6 nodes
  trains 60,000 samples; valued, e = 4, l = 2: 40,000 + 20,000 k_l = 58,096.7; (3, 3):
  57,145.1; (2, 4): 56,193.5. The earlier job finishes first.
- Concave: e's 4th node earns 3,000 samples, l's 3rd 10,000 k_l. At tau = 3,600 s (k_l =
  exp(-1) = 0.367879) it is 3,678.8 > 3,000: (3, 3), worth 30,000 + 30,000 k_l = 41,036.4.
  At tau = 1,800 s (k_l = exp(-2) = 0.135335) it is 1,353.4 < 3,000: (4, 2), worth 33,000 +
  20,000 k_l = 35,706.7. The tilt trades a node's worth, not only ties.
- tau = 0 weighs both jobs alike: every split of the linear case is worth 60,000.
"""

import math

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

RATES = {"m": (100, 200, 300, 400), "c": (100, 200, 300, 330)}
TABLE = ScalabilityTable(
    points=tuple(
        ScalabilityPoint(model=model, nodes=n, samples_per_s=float(rate))
        for model, rates in RATES.items()
        for n, rate in enumerate(rates, start=1)
    )
)


def problem(model: str, tau_s: float, shift_s: float = 0.0) -> Problem:
    jobs = tuple(
        Job(
            job_id=name,
            model=model,
            min_nodes=1,
            max_nodes=4,
            samples_remaining=1e9,
            submitted_s=shift_s + at_s,
        )  # fmt: skip
        for name, at_s in (("e", 0.0), ("l", 3600.0))
    )
    return Problem(
        idle_nodes=tuple(f"n{i}" for i in range(1, 7)),
        jobs=jobs,
        scalability=TABLE,
        weights=Weights(node_seconds=False, completion_s=tau_s),
        horizon_s=100.0,
    )


def counts(allocation) -> dict[str, int]:
    return {share.job_id: share.node_count for share in allocation.jobs}


@pytest.mark.parametrize(
    ("model", "tau_s", "expected", "value"),
    [
        ("m", 36_000.0, {"e": 4, "l": 2}, 40_000 + 20_000 * math.exp(-0.1)),
        ("c", 3_600.0, {"e": 3, "l": 3}, 30_000 + 30_000 * math.exp(-1)),
        ("c", 1_800.0, {"e": 4, "l": 2}, 33_000 + 20_000 * math.exp(-2)),
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_earlier_job_gets_the_scarce_nodes_while_they_are_worth_its_tilt(
    model: str, tau_s: float, expected: dict[str, int], value: float, backend: str
) -> None:
    allocation = solve(problem(model, tau_s), backend=backend)
    assert counts(allocation) == expected
    assert allocation.objective == pytest.approx(value, rel=1e-6)
    assert greedy(problem(model, tau_s)).objective <= allocation.objective + 1e-6


def test_the_tilt_is_the_same_whenever_the_jobs_were_submitted() -> None:
    # Only the difference of the submissions counts: a week later, the same answer and value.
    for tau_s in (1_800.0, 3_600.0):
        now, later = problem("c", tau_s), problem("c", tau_s, shift_s=7 * 86_400.0)
        assert counts(solve(later)) == counts(solve(now))
        assert solve(later).objective == pytest.approx(solve(now).objective, rel=1e-9)
        assert later.completion_tilt(later.jobs[1]) == pytest.approx(math.exp(-3600 / tau_s))


def test_tau_zero_weighs_every_job_alike() -> None:
    off = problem("m", 0.0)
    assert [off.completion_tilt(job) for job in off.jobs] == [1.0, 1.0]
    assert solve(off).objective == pytest.approx(60_000.0)


def test_a_job_submitted_long_after_still_gets_the_nodes_no_earlier_job_wants() -> None:
    # exp(-100) is no use as a weight; the floor keeps l's values positive, so it takes the
    # two nodes e cannot use.
    late = problem("m", 36.0)
    assert late.completion_tilt(late.jobs[1]) == 1e-6
    for backend in BACKENDS:
        assert counts(solve(late, backend=backend)) == {"e": 4, "l": 2}


def test_a_bad_tau_is_refused() -> None:
    with pytest.raises(ValueError, match="completion_s"):
        Weights(completion_s=-1.0)
    with pytest.raises(ValueError, match="completion_s"):
        Weights(completion_s=math.inf)
