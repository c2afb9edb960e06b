"""The automatic forecast horizon: mean residual life of the observed idle intervals."""

import pytest
from interstice.optimizer import expected_remaining_idle_s, pool_remaining_idle_s
from interstice.optimizer.horizon import DEFAULT_HORIZON_S


def test_mean_residual_life_by_hand() -> None:
    intervals = [100.0, 200.0, 300.0, 600.0]
    # Age 0: every interval is longer; the mean is 300.
    assert expected_remaining_idle_s(intervals, 0.0, min_intervals=1) == pytest.approx(300.0)
    # Age 150: 200, 300 and 600 are longer; mean 366.67, minus 150.
    assert expected_remaining_idle_s(intervals, 150.0, min_intervals=1) == pytest.approx(
        1100 / 3 - 150
    )
    # Age 400: only 600 is longer: 200 s remain.
    assert expected_remaining_idle_s(intervals, 400.0, min_intervals=1) == pytest.approx(200.0)


def test_default_until_enough_intervals() -> None:
    assert expected_remaining_idle_s([]) == DEFAULT_HORIZON_S == 475.0
    assert expected_remaining_idle_s([10.0] * 29) == 475.0
    assert expected_remaining_idle_s([10.0] * 30) == pytest.approx(10.0)
    assert expected_remaining_idle_s([10.0] * 30, 10.0, default_s=60.0) == 60.0


@pytest.mark.parametrize(
    ("intervals", "elapsed_s", "default_s", "message"),
    [([-1.0], 0.0, 475.0, "negative"), ([], -1.0, 475.0, "elapsed_s"), ([], 0.0, 0.0, "default_s")],
)
def test_bad_input_raises(intervals, elapsed_s, default_s, message) -> None:
    with pytest.raises(ValueError, match=message):
        expected_remaining_idle_s(intervals, elapsed_s, default_s=default_s)


def test_the_pool_is_as_old_as_its_median_node() -> None:
    intervals = [100.0, 200.0, 600.0]
    # ages 0, 100, 300, 500: median 200 -> intervals longer than 200: 600, residual 400
    assert pool_remaining_idle_s(intervals, [0.0, 100.0, 300.0, 500.0]) == pytest.approx(
        expected_remaining_idle_s(intervals, 200.0)
    )
    assert expected_remaining_idle_s(intervals, 200.0, min_intervals=1) == pytest.approx(400.0)
    # an empty pool, or ages below 0 (clock skew), is at age 0
    assert pool_remaining_idle_s(intervals, []) == expected_remaining_idle_s(intervals, 0.0)
    assert pool_remaining_idle_s(intervals, [-5.0]) == expected_remaining_idle_s(intervals, 0.0)
