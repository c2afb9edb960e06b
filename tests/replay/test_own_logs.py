"""What would interstice harvest here: a centre's own Slurm records converted, replayed, and
the report's trace figures (idle node-hours per day, hole lengths) worked by hand."""

import json
from pathlib import Path

import numpy as np
import pytest
from interstice.replay import idle
from interstice.replay.trace import load_trace
from replay_inputs import TINY_JOBS, TINY_TABLE
from typer.testing import CliRunner

from interstice import data
from interstice.cli import app

runner = CliRunner()

# Two hours across midnight; c restates its state at 01:00 (no change).
HAND_TRACE = """timestamp,node,state
2026-11-01T22:00:00,a,idle
2026-11-01T22:00:00,b,busy
2026-11-01T22:00:00,c,idle
2026-11-01T23:00:00,a,busy
2026-11-01T23:30:00,b,idle
2026-11-02T00:30:00,b,busy
2026-11-02T01:00:00,a,idle
2026-11-02T01:00:00,c,idle
2026-11-02T01:10:00,c,busy
2026-11-02T02:00:00,c,busy
"""


def test_idle_hours_per_day_and_holes_by_hand(tmp_path: Path):
    path = tmp_path / "hand.csv"
    path.write_text(HAND_TRACE)
    trace = load_trace(path)
    window = trace.window(0, trace.duration_s)
    # 11-01, 22:00-24:00: a 1 h, b 0.5 h, c 2 h. 11-02, 00:00-02:00: a 1 h (01-02),
    # b 0.5 h (00:00-00:30), c 1 h 10 min.
    assert idle.idle_node_hours_by_day(window) == [
        {"day": "2026-11-01", "hours": 2.0, "idle_node_hours": pytest.approx(3.5)},
        {"day": "2026-11-02", "hours": 2.0, "idle_node_hours": pytest.approx(2 + 2 / 3)},
    ]
    # a 22:00-23:00, b 23:30-00:30, c 22:00-01:10 (the restating row splits nothing); a's
    # hole from 01:00 is still open at the end.
    lengths_s, still_open = idle.hole_lengths(window)
    assert lengths_s.tolist() == [3600, 3600, 11400] and still_open == 1
    np.testing.assert_array_equal(lengths_s, np.sort(trace.idle_intervals()[1]))
    # A later window counts a hole from when it opened, before the window.
    later = trace.window(1800, trace.duration_s)
    assert idle.hole_lengths(later)[0].tolist() == [3600, 3600, 11400]
    assert [day["idle_node_hours"] for day in idle.idle_node_hours_by_day(later)] == [
        pytest.approx(3.5 - 2 * 0.5),
        pytest.approx(2 + 2 / 3),
    ]


def test_holes_quantiles_as_published():
    assert idle.quantiles(np.array([3600.0, 3600.0, 9000.0])) == {
        "p50_s": 3600.0,
        "p90_s": pytest.approx(3600 + 0.8 * 5400),
        "p99_s": pytest.approx(3600 + 0.98 * 5400),
        "mean_s": 5400.0,
    }
    assert set(idle.quantiles(np.array([])).values()) == {None}


def test_summit_reference_gives_the_published_quantiles(real_inputs, bftrainer_dir: Path):
    reference = idle.reference_holes((bftrainer_dir / data.TRACE_FILE, real_inputs.trace))
    assert reference.name == "summit"
    figures = idle.quantiles(reference.lengths_s)
    assert [figures["p50_s"], figures["p90_s"], figures["p99_s"]] == [475.0, 3269.0, 9246.0]


SACCT = """\
JobID|NodeList|Start|End|State|Partition
1|n1|2026-11-01T23:00:00|2026-11-02T01:00:00|COMPLETED|batch
1.batch|n1|2026-11-01T23:00:00|2026-11-02T01:00:00|COMPLETED|
2|n2|2026-11-01T21:00:00|2026-11-01T23:30:00|CANCELLED by 0|batch
3|n[2-3]|2026-11-02T00:30:00|Unknown|RUNNING|batch
4|n3|2026-11-01T22:00:00|2026-11-02T00:00:00|PREEMPTED|scavenger
5|None assigned|Unknown|Unknown|PENDING|batch
"""
"""Window 22:00-02:00 on n[1-3]. n1: job 1 23:00-01:00; n2: job 2 to 23:30, job 3 from 00:30
(running); n3: job 3 from 00:30, job 4 a scavenger placeholder (idle)."""


def test_converted_sacct_replays_with_trace_figures_by_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # No real data: the reference is the synthetic trace, and nothing reads the Summit trace.
    monkeypatch.setenv("INTERSTICE_DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setenv("INTERSTICE_AGENT_CONF", str(tmp_path / "absent.conf"))
    files = {"sacct": "jobs.txt", "jobs": "jobs.csv", "table": "table.csv"}
    paths = {key: tmp_path / name for key, name in files.items()}
    for key, text in (("sacct", SACCT), ("jobs", TINY_JOBS), ("table", TINY_TABLE)):
        paths[key].write_text(text)
    trace = tmp_path / "mine.csv.gz"
    window = ["--start", "2026-11-01T22:00:00", "--end", "2026-11-02T02:00:00", "--tz", "UTC"]
    result = runner.invoke(
        app,
        ["trace", "from-slurm", str(paths["sacct"]), "--nodes", "n[1-3]", *window]
        + ["--exclude-partition", "scavenger", "--out", str(trace)],
    )
    assert result.exit_code == 0, result.output
    out = tmp_path / "report"
    result = runner.invoke(
        app,
        ["replay", "--trace", str(trace), "--jobs", str(paths["jobs"])]
        + ["--scalability", str(paths["table"]), "--rigid-nodes", "1", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    offered = report["trace"]
    # 11-01, 22:00-24:00: n1 1 h, n2 0.5 h, n3 2 h; 11-02, 00:00-02:00: n1 1 h (01-02),
    # n2 and n3 0.5 h each (to 00:30).
    assert offered["by_day"] == [
        {"day": "2026-11-01", "hours": 2.0, "idle_node_hours": pytest.approx(3.5)},
        {"day": "2026-11-02", "hours": 2.0, "idle_node_hours": pytest.approx(2.0)},
    ]
    assert offered["idle_node_hours"] == pytest.approx(5.5)
    assert offered["idle_node_hours_per_day"] == pytest.approx(5.5 * 6)  # 4 h is 1/6 day
    assert offered["idle_share"] == pytest.approx(5.5 / 12)
    # n1 22:00-23:00, n2 23:30-00:30, n3 22:00-00:30; n1's hole from 01:00 is open.
    assert offered["holes"] == {
        "completed": 3,
        "open_at_end": 1,
        "p50_s": 3600.0,
        "p90_s": pytest.approx(3600 + 0.8 * 5400),
        "p99_s": pytest.approx(3600 + 0.98 * 5400),
        "mean_s": 5400.0,
    }
    reference = offered["reference"]
    assert reference["name"] == "synthetic" and reference["trace"].endswith(
        data.SYNTHETIC_TRACE.name
    )
    assert reference["published"] == {"p50_s": 475.0, "p90_s": 3269.0, "p99_s": 9246.0}
    policies = report["policies"]
    assert list(policies) == ["milp", "greedy", "equal-share", "rigid"]
    for figures in policies.values():
        assert figures["idle_node_hours"] == pytest.approx(5.5)
        assert 0 < figures["harvest"] <= figures["utilization"] <= 1
        assert figures["harvested_node_hours"] == pytest.approx(figures["harvest"] * 5.5)
        per_day = figures["harvested_node_hours"] * 6
        assert figures["harvested_node_hours_per_day"] == pytest.approx(per_day)
    assert policies["milp"]["jct_mean_s"] is not None  # job B (50,000 samples) finishes
    assert "5.5 node-h" in result.output and "synthetic trace" in result.output
    for png in ("report.png", "summary.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
