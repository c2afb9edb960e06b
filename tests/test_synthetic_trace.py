"""The synthetic node-state trace the package ships: its figures match the Summit trace's
published ones, it is what its generator makes, and the demo can replay it."""

import gzip

import numpy as np
import pytest
from interstice.replay.trace import NodeTrace, load_trace

from interstice import synthetic_trace
from interstice.data import SYNTHETIC_TRACE
from interstice.demo.plan import plan_replay

QUANTILE_TOLERANCE = 0.10
"""Largest relative gap between a shipped idle quantile and the published one. The Weibull
fit alone is within 3.5 %; a finite sample, and the intervals cut off at the trace's ends
(long ones more often), take the rest."""
SHARE_TOLERANCE = 0.005
"""Largest gap between the shipped idle share and the published 8.3 %."""


@pytest.fixture(scope="module")
def shipped():
    return load_trace(SYNTHETIC_TRACE)


def test_the_fit_reproduces_the_published_quantiles() -> None:
    idle = synthetic_trace.fit_idle()
    for p, target_s in synthetic_trace.IDLE_QUANTILES_S.items():
        assert idle.quantile(p) == pytest.approx(target_s, rel=0.035)
    busy = synthetic_trace.fit_busy(idle)
    share = idle.mean_s / (idle.mean_s + busy.mean_s)
    assert share == pytest.approx(synthetic_trace.IDLE_SHARE)


def test_the_shipped_trace_matches_the_published_figures(shipped) -> None:
    figures = synthetic_trace.measure(shipped)
    for p, target_s in synthetic_trace.IDLE_QUANTILES_S.items():
        got_s = figures.idle_quantiles_s[p]
        assert got_s == pytest.approx(target_s, rel=QUANTILE_TOLERANCE), f"p{p}"
    assert figures.idle_share == pytest.approx(synthetic_trace.IDLE_SHARE, abs=SHARE_TOLERANCE)
    assert figures.idle_intervals > 5000  # enough for the 99th percentile to mean something


def test_measure_counts_the_idle_share_by_time() -> None:
    # Two nodes over 100 s: a idle 0-40 s, b idle 50-100 s (and a repeated state): 90/200.
    start = np.datetime64("2021-02-01T00:00:00")
    trace = NodeTrace(
        start=start,
        end=start + np.timedelta64(100, "s"),
        node_names=np.array(["a", "b"]),
        initial_idle=np.array([True, False]),
        change_time_s=np.array([40, 50, 70], dtype=np.int64),
        change_node=np.array([0, 1, 1], dtype=np.int32),
        change_idle=np.array([False, True, True]),
    )
    figures = synthetic_trace.measure(trace)
    assert figures.idle_share == pytest.approx(0.45)
    assert figures.idle_intervals == 1 and figures.idle_quantiles_s[0.5] == 40


def test_regenerating_gives_the_same_trace(tmp_path) -> None:
    text = synthetic_trace.generate()
    assert gzip.decompress(SYNTHETIC_TRACE.read_bytes()).decode() == text
    assert synthetic_trace.generate(seed=1) != text
    first, second = tmp_path / "a.csv.gz", tmp_path / "b.csv.gz"
    synthetic_trace.write(first, text)
    synthetic_trace.write(second, text)
    assert first.read_bytes() == second.read_bytes()


def test_the_shipped_trace_is_small_labelled_and_in_the_real_layout(shipped) -> None:
    assert SYNTHETIC_TRACE.stat().st_size < 200_000
    assert "synthetic" in SYNTHETIC_TRACE.name
    assert "synthetic" in (SYNTHETIC_TRACE.parent / "README.md").read_text().lower()
    assert len(shipped.node_names) == synthetic_trace.NODES
    assert all(name.startswith("synth") for name in shipped.node_names)
    assert shipped.duration_s == synthetic_trace.DAYS * 86400


@pytest.mark.parametrize(("agents", "duration_s"), [(4, 90), (4, 300), (16, 300)])
def test_the_demo_finds_nodes_to_lend_and_reclaim_in_it(shipped, agents, duration_s) -> None:
    # The demo's own settings (interstice.demo.session): 60x, 20 s idle to train, 19 s tail.
    plan = plan_replay(shipped, agents, duration_s, 60, min_idle_s=20, tail_s=19)
    assert plan.usable_reclaims >= agents
    assert any(plan.initial_idle.values())  # a job can start at once


def test_generate_refuses_an_empty_trace() -> None:
    with pytest.raises(ValueError, match="nodes and days"):
        synthetic_trace.generate(nodes=0)
