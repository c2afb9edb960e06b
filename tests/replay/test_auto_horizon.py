"""``--horizon auto``: the residual idle time from the trace's past only, at the pool's age."""

from pathlib import Path

import pytest
from interstice.optimizer.horizon import DEFAULT_HORIZON_S
from interstice.replay.horizon import AutoHorizon, FixedHorizon
from interstice.replay.trace import load_trace


@pytest.fixture
def trace(tmp_path: Path):
    # x0..x39 idle from 0 s and busy at 100 s: 40 intervals of 100 s, known from 100 s on.
    # y idle from 150 s.
    rows = ["timestamp,node,state", "2021-02-01T00:00:00,y,busy"]
    rows += [f"2021-02-01T00:00:00,x{k},idle" for k in range(40)]
    rows += [f"2021-02-01T00:01:40,x{k},busy" for k in range(40)]
    rows += ["2021-02-01T00:02:30,y,idle", "2021-02-01T00:05:00,y,busy"]
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(rows) + "\n")
    return load_trace(path)


def test_only_intervals_ended_before_now_count(trace):
    window = trace.window(0, 1000)
    horizon = AutoHorizon(trace, 0)
    idle_since_s = window.initial_idle_since_s  # x0..x39 idle since 0 s, y busy
    assert horizon(50.0, idle_since_s) == DEFAULT_HORIZON_S  # nothing ended yet


def test_residual_at_the_median_idle_age(trace):
    window = trace.window(200, 1000)  # only y is idle, since 150 s: age 50 s at 200 s
    horizon = AutoHorizon(trace, 200)
    assert horizon(0.0, window.initial_idle_since_s) == pytest.approx(100 - 50)
    # 30 s later y is 80 s old: E[T - 80 | T > 80] = 20 s
    assert horizon(30.0, window.initial_idle_since_s) == pytest.approx(20)


def test_fixed_horizon_rejects_non_positive():
    assert FixedHorizon(60)(0.0, None) == 60.0
    with pytest.raises(ValueError, match="horizon must be > 0 s"):
        FixedHorizon(0)
