"""Replays of short real windows: the accounting identities hold for every policy."""

import numpy as np
import pytest
from interstice.optimizer import equal_share, greedy, solve
from interstice.replay.horizon import FixedHorizon
from interstice.replay.simulator import ReplayOptions, replay

POLICIES = {"milp": solve, "greedy": greedy, "equal-share": equal_share}
MAX_ACTIVE_JOBS = 10


def seconds_after_start(trace, iso: str) -> float:
    return float((np.datetime64(iso) - trace.start) / np.timedelta64(1, "s"))


@pytest.fixture(scope="module")
def window_run(real_inputs):
    """3 h from 2021-02-17T00:00 on 300 nodes drawn with seed 0, every policy, 60 s horizon
    (the CLI's default)."""
    trace = real_inputs.trace
    start_s = seconds_after_start(trace, "2021-02-17T00:00:00")
    ids = np.sort(np.random.default_rng(0).choice(len(trace.node_names), 300, replace=False))
    window = trace.window(start_s, start_s + 3 * 3600, ids)
    horizon = FixedHorizon(60)
    results = {
        name: replay(
            window, real_inputs.jobs, real_inputs.table, policy, horizon=horizon, name=name
        )
        for name, policy in POLICIES.items()
    }
    return window, results


def idle_integral(window) -> float:
    """Node-seconds idle over the window, replaying its events independently of the loop."""
    idle = window.initial_idle.copy()
    bounds = [0.0, *window.event_time_s.tolist(), window.duration_s]
    total = 0.0
    for event in range(len(bounds) - 1):
        total += np.count_nonzero(idle) * (bounds[event + 1] - bounds[event])
        if event < len(window.event_time_s):
            nodes, to_idle = window.changes(event)
            idle[nodes] = to_idle
    return total


@pytest.mark.parametrize("name", POLICIES)
def test_accounting_identities(window_run, name):
    window, results = window_run
    result = results[name]
    assert result.solves > 10 and result.idle_node_s > 0
    assert result.idle_node_s == pytest.approx(idle_integral(window))
    assert np.all(np.array(result.timeline_allocated) <= np.array(result.timeline_idle))
    assert result.allocated_node_s <= result.idle_node_s + 1e-6
    goodput = sum(rec.goodput for rec in result.jobs)
    assert 0 < goodput <= sum(rec.dedicated_samples for rec in result.jobs)
    for rec in result.jobs:
        assert rec.goodput <= rec.dedicated_samples + 1e-6
        assert rec.goodput <= rec.spec.total_samples
        assert (rec.finished_s is not None) == (rec.goodput == rec.spec.total_samples)
    assert result.timeline_goodput[-1] == pytest.approx(goodput)


@pytest.mark.parametrize("name", POLICIES)
def test_admission_first_come_first_served_at_most_k(window_run, name):
    _, results = window_run
    jobs = results[name].jobs
    admitted = [rec for rec in jobs if rec.admitted_s is not None]
    assert admitted == jobs[: len(admitted)]  # in arrival order, no one skipped
    for rec in admitted:
        running = [
            other
            for other in admitted
            if other.admitted_s <= rec.admitted_s
            and (other.finished_s is None or other.finished_s > rec.admitted_s)
        ]
        assert len(running) <= MAX_ACTIVE_JOBS


def test_milp_trains_at_least_as_many_samples_as_equal_share(window_run):
    _, results = window_run
    milp = sum(rec.samples for rec in results["milp"].jobs)
    assert milp >= sum(rec.samples for rec in results["equal-share"].jobs)


@pytest.mark.parametrize("name", POLICIES)
def test_skipping_saturated_solves_changes_nothing(real_inputs, name):
    # 3 jobs of at most 64 nodes and about 750 idle nodes: every job sits at its maximum and
    # most trace events only move free nodes, so rule (ii) of the simulator skips solves.
    trace = real_inputs.trace
    start_s = seconds_after_start(trace, "2021-02-17T03:00:00")
    ids = np.sort(np.random.default_rng(1).choice(len(trace.node_names), 1000, replace=False))
    window = trace.window(start_s, start_s + 1800, ids)
    runs = [
        replay(
            window,
            real_inputs.jobs,
            real_inputs.table,
            POLICIES[name],
            horizon=FixedHorizon(300),
            options=ReplayOptions(max_active_jobs=3, skip_equivalent=skip),
        )
        for skip in (True, False)
    ]
    assert runs[0].skipped_solves > 0 and runs[1].skipped_solves == 0
    for with_skip, without in zip(runs[0].jobs, runs[1].jobs, strict=True):
        assert with_skip.goodput == pytest.approx(without.goodput, rel=1e-9)
        assert (with_skip.rescales, with_skip.preemptions) == (
            without.rescales,
            without.preemptions,
        )
        assert with_skip.nodes == without.nodes
