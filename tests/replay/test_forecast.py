"""Idle-hole forecasts through the replay (``--forecast``), on a hand-made trace whose every
figure is worked out in comments.

Trace: n1 and n2 idle for the whole 200 s window (busy at 600 s, past it and the horizon:
``exact`` knows every idle node's end, so the solves use the forecasts from the first,
:func:`~interstice.optimizer.coverage.solve_coverage`); n3 idle from 0 s and busy again at
25 s.
Table: model ``m`` at 100 samples/s per node (1, 2, 4 nodes measured; 3 interpolate to 300).
One job A (1..3 nodes, rescale_up_s 20, rescale_down_s 5, more samples than it can train)
under the MILP (CP-SAT) at H = 300 s.

- ``none``: at 0 s A starts on n1..n3 (3 nodes earn 300 x 280 = 84,000 over H, 2 nodes
  56,000): paused to 20 s, 300/s on 20..25 = 1,500; n3 is reclaimed at 25 s, paused to 30 s,
  200/s on 30..200 = 34,000. Goodput 35,500; dedicated 300 x 25 + 200 x 175 = 42,500.
- ``exact``: at 0 s the optimizer is told n3 leaves in 25 s. On 3 nodes A would earn 1,500,
  then 200/s on 30..300 = 54,000: 55,500, less than 56,000 on n1, n2 alone; so A starts on
  n1, n2: 200/s on 20..200 = 36,000, no reclaim. Goodput 36,000; dedicated 200 x 200.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from interstice.optimizer import ScalabilityTable, solve
from interstice.replay.forecast import ForecastSettings, HoleForecasts
from interstice.replay.horizon import FixedHorizon
from interstice.replay.jobs import JobSpec
from interstice.replay.report import summarize
from interstice.replay.simulator import ReplayOptions, replay
from interstice.replay.trace import load_trace
from replay_inputs import TINY_TABLE
from typer.testing import CliRunner

from interstice.cli import app

TRACE = """timestamp,node,state
2021-02-01T00:00:00,n1,idle
2021-02-01T00:00:00,n2,idle
2021-02-01T00:00:00,n3,idle
2021-02-01T00:00:25,n3,busy
2021-02-01T00:10:00,n1,busy
2021-02-01T00:10:00,n2,busy
"""
JOB = JobSpec(job_id="A", model="m", submit_offset_s=0.0, min_nodes=1, max_nodes=3,
              total_samples=1e9, rescale_up_s=20.0, rescale_down_s=5.0)  # fmt: skip


@pytest.fixture
def trace(tmp_path: Path):
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    return load_trace(path)


def run(trace, settings: ForecastSettings):
    holes = None
    if settings.mode != "none":
        holes = HoleForecasts(trace, 0.0, None, settings).remaining_s
    table = ScalabilityTable.from_csv(TINY_TABLE)
    result = replay(trace.window(0, 200), [JOB], table, lambda p: solve(p, "cpsat"),
                    horizon=FixedHorizon(300), name="milp", forecast=holes)  # fmt: skip
    return result, summarize(result)


def test_an_exact_forecast_keeps_the_job_off_the_node_that_is_reclaimed(trace) -> None:
    result, figures = run(trace, ForecastSettings("none"))
    (a,) = result.jobs
    assert a.goodput == pytest.approx(1500 + 34000)
    assert a.dedicated_samples == pytest.approx(42500)
    assert (a.preemptions, a.pause_loss) == (1, pytest.approx({"start": 6000, "reclaim": 1000}))

    result, figures = run(trace, ForecastSettings("exact"))
    (a,) = result.jobs
    assert a.goodput == pytest.approx(36000)
    assert a.dedicated_samples == pytest.approx(200 * 200)
    assert (a.preemptions, a.pause_loss) == (0, pytest.approx({"start": 4000}))
    assert figures["efficiency"] == pytest.approx(36000 / 40000)
    assert figures["efficiency_loss"]["reclaim"] == 0


def test_a_plan_that_knows_no_hole_replays_as_none(trace) -> None:
    _, none = run(trace, ForecastSettings("none"))
    _, unknown = run(trace, ForecastSettings("plan", coverage=0.0, error=1.0))
    for key in ("goodput_samples", "dedicated_samples", "efficiency_loss", "rescales"):
        assert unknown[key] == none[key]


def test_hole_ends_exact_and_planned(trace, tmp_path: Path) -> None:
    idle = np.array([0, 1, 2])
    exact = HoleForecasts(trace, 0.0, None, ForecastSettings("exact"))
    # n1, n2 go busy at 600 s, n3 at 25 s.
    assert exact.remaining_s(0.0, idle) == {0: 600.0, 1: 600.0, 2: 25.0}
    assert exact.remaining_s(10.0, idle) == {0: 590.0, 1: 590.0, 2: 15.0}
    # A node that never goes busy again has no end to forecast.
    path = tmp_path / "endless.csv"
    path.write_text(TRACE.replace("2021-02-01T00:10:00,n2,busy\n", ""))
    endless = HoleForecasts(load_trace(path), 0.0, None, ForecastSettings("exact"))
    assert endless.remaining_s(0.0, idle) == {0: 600.0, 2: 25.0}
    # A window from 10 s on (its clock starts there) and only n3 replayed (window id 0).
    assert HoleForecasts(trace, 10.0, np.array([2]), ForecastSettings("exact")).remaining_s(
        5.0, np.array([0])
    ) == {0: 10.0}
    # Reported late by a factor 1 + u F, u in [0, 1) drawn once per hole: the same factor at
    # every time, so the forecast shrinks to the truth as the hole closes.
    late = HoleForecasts(trace, 0.0, None, ForecastSettings("plan", coverage=1.0, error=2.0))
    factor = late.remaining_s(0.0, idle)[2] / 25.0
    assert 1.0 <= factor < 3.0 and factor != 1.0
    assert late.remaining_s(20.0, idle)[2] == pytest.approx(5.0 * factor)
    again = HoleForecasts(trace, 0.0, None, ForecastSettings("plan", coverage=1.0, error=2.0))
    assert again.remaining_s(0.0, idle) == late.remaining_s(0.0, idle)  # seeded
    unknown = HoleForecasts(trace, 0.0, None, ForecastSettings("plan", coverage=0.0))
    assert unknown.remaining_s(0.0, idle) == {}


def test_plan_coverage_and_error_on_the_real_trace(real_inputs) -> None:
    """Over the real trace's holes the share known is about P and every known end is late by
    a factor in [1, 1 + F); a subset of nodes gets the same draws as the whole trace."""
    trace = real_inputs.trace
    settings = ForecastSettings("plan", coverage=0.25, error=0.5, seed=3)
    start_s = 3 * 86400.0
    window = trace.window(start_s, start_s + 1)
    idle = np.flatnonzero(window.initial_idle)
    exact = HoleForecasts(trace, start_s, None, ForecastSettings("exact")).remaining_s(0.0, idle)
    plan = HoleForecasts(trace, start_s, None, settings).remaining_s(0.0, idle)
    assert set(plan) <= set(exact) and 0.2 < len(plan) / len(exact) < 0.3
    factors = np.array([plan[i] / exact[i] for i in plan])
    assert factors.min() >= 1.0 and factors.max() < 1.5 and factors.std() > 0.1
    some = np.sort(np.random.default_rng(0).choice(len(trace.node_names), 500, replace=False))
    subset = HoleForecasts(trace, start_s, some, settings).remaining_s(0.0, np.arange(500))
    assert {int(some[i]): s for i, s in subset.items()} == {
        i: s for i, s in plan.items() if i in set(some.tolist())
    }


def test_the_forecast_options_reach_the_report(tiny_files, tmp_path) -> None:
    args = [item for option, path in tiny_files.items() for item in (option, str(path))]
    runner = CliRunner()
    for extra, recorded in (
        ([], {"forecast": "none", "forecast_coverage": None, "forecast_error": None}),
        (
            ["--forecast", "exact"],
            {
                "forecast": "exact",
                "forecast_coverage": None,
                "forecast_classes": 1,
                "forecast_min_coverage": 0.9,
            },
        ),
        (
            ["--forecast", "plan", "--forecast-coverage", "0.25", "--forecast-error", "1"],
            {"forecast": "plan", "forecast_coverage": 0.25, "forecast_error": 1.0},
        ),
        (
            ["--forecast", "exact", "--forecast-classes", "6", "--forecast-min-coverage", "0"],
            {"forecast_classes": 6, "forecast_min_coverage": 0.0},
        ),
    ):
        out = tmp_path / "-".join(extra or ["none"])
        result = runner.invoke(app, ["replay", *args, "--no-baselines", "--out", str(out), *extra])
        assert result.exit_code == 0, result.stderr
        settings = json.loads((out / "report.json").read_text())["settings"]
        assert {key: settings[key] for key in recorded} == recorded
    for extra, message in (
        (["--forecast", "oracle"], "--forecast must be one of none, exact, plan, got 'oracle'"),
        (["--forecast-coverage", "1.5"], "--forecast-coverage must be within [0, 1], got 1.5"),
        (["--forecast-error", "-1"], "--forecast-error must be a finite number >= 0, got -1.0"),
        (["--forecast-classes", "0"], "--forecast-classes must be >= 1, got 0"),
        (
            ["--forecast-min-coverage", "2"],
            "--forecast-min-coverage must be within [0, 1], got 2.0",
        ),
    ):
        result = runner.invoke(app, ["replay", *args, "--out", str(tmp_path), *extra])
        assert result.exit_code == 2
        assert result.stderr.count("\n") == 1 and message in result.stderr


PLANNED = """timestamp,node,state
2021-02-01T00:00:00,n1,idle
2021-02-01T00:00:00,n2,idle
2021-02-01T00:00:00,n3,idle
2021-02-01T00:00:00,n4,busy
2021-02-01T00:06:30,n4,idle
2021-02-01T00:06:40,n3,busy
2021-02-01T00:20:00,n1,busy
2021-02-01T00:20:00,n2,busy
2021-02-01T00:20:00,n4,busy
"""


@pytest.mark.parametrize(
    ("mode", "loss_s", "goodput", "preemptions", "causes"),
    [
        ("exact", 60.0, 136_000, 0, {"start", "shrink", "grow"}),
        ("exact", 0.0, 138_000, 1, {"start", "grow"}),
        ("none", 60.0, 124_500, 1, {"start", "reclaim"}),
    ],
)
def test_a_planned_shrink_before_a_forecast_reclaim(
    tmp_path: Path, mode: str, loss_s: float, goodput: float, preemptions: int, causes: set
) -> None:
    # n3 is reclaimed at 400 s, beyond H = 300 s at the start, so A starts on n1..n3; n4
    # turns idle at 390 s (an event, so a solve); n1, n2, n4 are reclaimed at 1,200 s, past
    # the window and the horizon. Window 0..500, job A as above (up 20 s, down 5 s), a
    # reclaim losing loss_s more than a shrink.
    # - exact, 60 s: at 390 s keeping n3 is worth 300 x 10 + 200 x (690 - 465) = 48,000,
    #   shedding it now 200 x 295 = 59,000: a planned shrink, paused to 395 s. At 400 s A
    #   grows onto n4 (84,000 over H against 60,000), paused to 420 s. Goodput 300 x 370 +
    #   200 x 5 + 300 x 80 = 136,000.
    # - exact, 0 s: keeping n3 is worth 3,000 + 200 x 285 = 60,000 > 59,000: A keeps it to
    #   its reclaim at 400 s and grows onto n4 then: 300 x 380 + 300 x 80 = 138,000 (the
    #   grow's pause, to 420 s, outlasts the reclaim's, so the pause counts as the grow's).
    # - none, 60 s: the reclaim at 400 s pauses A to 465 s, past the grow's 420 s:
    #   114,000 + 300 x 35 = 124,500.
    path = tmp_path / "planned.csv"
    path.write_text(PLANNED)
    planned = load_trace(path)
    holes = None
    if mode != "none":
        holes = HoleForecasts(planned, 0.0, None, ForecastSettings(mode)).remaining_s
    table = ScalabilityTable.from_csv(TINY_TABLE)
    result = replay(planned.window(0, 500), [JOB], table, lambda p: solve(p, "cpsat"),
                    horizon=FixedHorizon(300), options=ReplayOptions(reclaim_loss_s=loss_s),
                    name="milp", forecast=holes)  # fmt: skip
    (a,) = result.jobs
    assert a.goodput == pytest.approx(goodput)
    assert a.preemptions == preemptions
    assert {cause for cause, lost in a.pause_loss.items() if lost > 0} == causes


# Coverage: 60 short holes (h01..h60, idle 0..1 s) end before job A (as above) arrives at 2 s;
# n1, n2 stay idle and n3's hole ends at 27 s. A forecast that tells n3's end (25 s left at
# 2 s) and, with `tell_short`, the short holes' ends. At 2 s the solve has seen 60 ended
# holes: coverage 1.0 if their ends were told, else 0.0; n3's told end makes it 1/61 after.
# - forecasts used: A starts on n1, n2 only (the first test's `exact`, 2 s later): paused to
#   22 s, 200/s on 22..202 = 36,000.
# - not used (coverage 0.0 < 0.9): A starts on n1..n3 as without forecasts: paused to 22 s,
#   300/s on 22..27 = 1,500, n3 reclaimed at 27 s, paused to 32 s, 200/s on 32..202 = 34,000.
COVERED = (
    "timestamp,node,state\n"
    + "".join(
        f"2021-02-01T00:00:00,h{i:02d},idle\n2021-02-01T00:00:01,h{i:02d},busy\n"
        for i in range(1, 61)
    )
    + "".join(f"2021-02-01T00:00:00,{n},idle\n" for n in ("n1", "n2", "n3"))
)
COVERED += "2021-02-01T00:00:27,n3,busy\n"


@pytest.mark.parametrize(
    ("tell_short", "min_coverage", "coverage", "goodput"),
    [(True, 0.9, 1.0, 36_000), (False, 0.9, 1 / 61, 35_500), (False, 0.0, 1 / 61, 36_000)],
)
def test_forecasts_are_used_only_at_the_minimum_coverage(
    tmp_path: Path, tell_short: bool, min_coverage: float, coverage: float, goodput: float
) -> None:
    path = tmp_path / "covered.csv"
    path.write_text(COVERED)
    window = load_trace(path).window(0, 202)
    ids = {name: i for i, name in enumerate(window.node_names.tolist())}

    def told(now_s: float, idle: np.ndarray) -> dict[int, float]:
        ends = {ids["n3"]: 27.0} | (
            {ids[f"h{i:02d}"]: 1.0 for i in range(1, 61)} if tell_short else {}
        )
        return {i: ends[i] - now_s for i in idle.tolist() if i in ends and ends[i] > now_s}

    late = JobSpec(**{**JOB.__dict__, "submit_offset_s": 2.0})
    table = ScalabilityTable.from_csv(TINY_TABLE)
    options = ReplayOptions(forecast_min_coverage=min_coverage)
    result = replay(window, [late], table, lambda p: solve(p, "cpsat"), horizon=FixedHorizon(300),
                    options=options, name="milp", forecast=told)  # fmt: skip
    (a,) = result.jobs
    assert result.forecast_coverage == pytest.approx(coverage)
    assert a.goodput == pytest.approx(goodput)
    # Solves at 0 s (no job yet; no hole ended, so the idle nodes' share stands for the
    # coverage: 61 of 63 told with tell_short, 1 of 63 without), at 2 s (the 60 ended holes'
    # coverage) and at 27 s (no forecast left).
    assert (result.solves, result.forecast_solves) == (3, 2 if goodput == 36_000 else 0)
    assert summarize(result)["forecast_solves"] == result.forecast_solves
