"""SPB's statistical effect on digits: each depth's progress_per_sample, measured."""

import math

from interstice.models.progress import measure_progress, samples_to_reach


def test_measure_progress_returns_fractions_for_every_depth() -> None:
    results = measure_progress((0, 3), steps=8, seeds=(0,), eval_every=2)
    assert [r.spb_depth for r in results] == [0, 3]
    assert results[0].progress_per_sample == 1.0
    for r in results:
        assert 0 < r.progress_per_sample <= 1
        assert 0 <= r.accuracy <= 1 and r.final_loss > 0
        assert r.samples == 8 * 4 * 16


def test_samples_to_reach_interpolates_the_running_minimum() -> None:
    samples, losses = [0, 10, 20, 30], [2.0, 1.0, 1.5, 0.5]
    assert samples_to_reach(samples, losses, 1.5) == 5.0  # halfway from 2.0 to 1.0
    assert samples_to_reach(samples, losses, 0.75) == 25.0  # 1.5 is ignored: minimum is 1.0
    assert samples_to_reach(samples, losses, 3.0) == 0.0
    assert math.isinf(samples_to_reach(samples, losses, 0.1))
