"""``interstice replay`` end to end: the report it writes, and one line and exit 2 on bad input."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from interstice.cli import app

runner = CliRunner()


def args_of(files: dict[str, Path]) -> list[str]:
    return [item for option, path in files.items() for item in (option, str(path))]


def test_tiny_replay_writes_report_and_png(tiny_files: dict[str, Path], tmp_path: Path):
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["replay", *args_of(tiny_files), "--horizon", "300", "--out", str(out)]
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert list(report["policies"]) == ["milp", "greedy", "equal-share", "rigid"]
    assert set(report["ratios"]) == {"milp/greedy", "milp/equal-share", "milp/rigid"}
    milp = report["policies"]["milp"]
    # The trace holds 4 nodes for 300 s: idle n1..n3 0-60, n1..n4 60-100, n2..n4 100-300.
    assert milp["idle_node_s"] == pytest.approx(3 * 60 + 4 * 40 + 3 * 200)
    assert 0 < milp["efficiency"] <= 1 and 0 < milp["utilization"] <= 1
    assert milp["statuses"] and milp["solve_time_s"]["p50"] is not None
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_baselines_replays_one_policy(tiny_files: dict[str, Path], tmp_path: Path):
    result = runner.invoke(
        app,
        [
            "replay",
            *args_of(tiny_files),
            "--policy",
            "greedy",
            "--no-baselines",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert list(report["policies"]) == ["greedy"] and report["ratios"] == {}


def test_early_finish_weight_reaches_the_objective(tiny_files: dict[str, Path], tmp_path: Path):
    # A capped at 2 nodes leaves room for B (min 2, 30,000 samples) to be admitted at 30 s;
    # at H = 300 s B can finish within the horizon, so term (g) changes the allocations:
    # the bare cap (0) trained 62,000 samples, the default 0.9 71,000.
    jobs = tiny_files["--jobs"]
    jobs.write_text(
        jobs.read_text()
        .replace("A,m,2021-01-01T00:00:00,1,4,", "A,m,2021-01-01T00:00:00,1,2,")
        .replace(",2,4,50000,", ",2,4,30000,")
    )
    goodput = {}
    for beta in ("0", "0.9"):
        out = tmp_path / beta
        args = ["--horizon", "300", "--no-baselines", "--early-finish", beta, "--out", str(out)]
        result = runner.invoke(app, ["replay", *args_of(tiny_files), *args])
        assert result.exit_code == 0, result.stderr
        report = json.loads((out / "report.json").read_text())
        assert report["settings"]["weights"]["early_finish"] == float(beta)
        assert report["settings"]["weights"]["completion_s"] == 100_000.0  # the default
        goodput[beta] = report["policies"]["milp"]["goodput_samples"]
    assert goodput["0"] < goodput["0.9"]


def test_real_window_with_default_paths(bftrainer_dir: Path, tmp_path: Path):
    result = runner.invoke(
        app,
        [
            "replay",
            "--start",
            "2021-02-17T02:00:00",
            "--hours",
            "1",
            "--nodes",
            "200",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["settings"]["nodes"] == 200
    assert report["settings"]["window_start"] == "2021-02-17T02:00:00"
    assert report["policies"]["equal-share"]["idle_node_s"] > 0


BAD_ARGS = [
    (["--hours", "0"], "--hours must be > 0"),
    (["--hours", "-2"], "--hours must be > 0"),
    (["--policy", "fifo"], "--policy must be one of milp, greedy, equal-share"),
    (["--backend", "gurobi"], "--backend must be cbc or cpsat"),
    (["--horizon", "soon"], "--horizon must be a number of seconds > 0 or auto"),
    (["--horizon", "-10"], "--horizon must be a number of seconds > 0 or auto"),
    (["--max-active-jobs", "0"], "--max-active-jobs must be >= 1"),
    (["--min-solve-interval", "-1"], "--min-solve-interval must be >= 0"),
    (["--start", "tuesday"], "--start must be an ISO 8601 time"),
    (["--start", "2020-01-01T00:00:00"], "--start 2020-01-01T00:00:00 is outside the trace"),
    (["--nodes", "5"], "--nodes must be within 1..4"),
    (["--nodes", "0"], "--nodes must be within 1..4"),
    (["--early-finish", "2"], "--early-finish must be within [0, 1]"),
    (["--early-finish", "-0.1"], "--early-finish must be within [0, 1]"),
    (["--completion-s", "-1"], "--completion-s must be a finite number >= 0"),
    (["--reclaim-loss-s", "nan"], "--reclaim-loss-s must be a finite number >= 0"),
    (["--objective", "joy"], "--objective must be one of throughput, speedup, node-seconds"),
    (["--fairness", "-1"], "--fairness must be a finite number >= 0"),
    (["--churn", "inf"], "--churn must be a finite number >= 0"),
    (["--priority-weight", "-1"], "--priority-weight must be a finite number >= 0"),
    (["--rate-error", "-0.5"], "--rate-error must be a finite number >= 0"),
    (["--rigid-nodes", "0"], "--rigid-nodes must be >= 1"),
    (["--checkpoint-interval-s", "0"], "--checkpoint-interval-s must be > 0"),
    (["--hours", "1", "--end", "2021-02-01T00:02:00"], "--hours and --end both set"),
    (["--end", "noon"], "--end must be an ISO 8601 time"),
    (["--end", "2021-02-01T00:00:00"], "--end 2021-02-01T00:00:00 must lie after"),
    (["--end", "2021-03-01T00:00:00"], "--end 2021-03-01T00:00:00 must lie after"),
    (["--nodes", "2", "--nodes-file", "x"], "--nodes and --nodes-file both choose"),
    (["--nodes-file", "/nonexistent/nodes.txt"], "--nodes-file: no such file"),
]


@pytest.mark.parametrize(("extra", "message"), BAD_ARGS)
def test_bad_option_exits_2_with_one_line(tiny_files, tmp_path, extra, message):
    result = runner.invoke(app, ["replay", *args_of(tiny_files), *extra, "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert message in result.stderr
    assert not (tmp_path / "report.json").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# none\n\n", "no node names"),
        ("n1\nn9\n", "node 'n9' is not in the trace"),
        ("n1\nn2 # twice\nn1\n", "a node is listed twice"),
    ],
)
def test_bad_nodes_file_exits_2_with_one_line(tiny_files, tmp_path, text, message):
    nodes = tmp_path / "nodes.txt"
    nodes.write_text(text)
    args = ["replay", *args_of(tiny_files), "--nodes-file", str(nodes), "--out", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr


def test_nodes_file_end_and_weights_reach_the_replay(tiny_files, tmp_path):
    # n4 is left out and the window ends at 150 s: idle node-seconds are
    # n1..n3 0-60 s, n1..n3 60-100 s, n2..n3 100-150 s.
    nodes = tmp_path / "nodes.txt"
    nodes.write_text("# replay these\nn3\nn1\nn2\n")
    args = ["--nodes-file", str(nodes), "--end", "2021-02-01T00:02:30", "--churn", "0.2"]
    args += ["--fairness", "0.5", "--objective", "speedup", "--priority-weight", "0"]
    out = tmp_path / "out"
    result = runner.invoke(app, ["replay", *args_of(tiny_files), *args, "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["nodes"] == 3 and report["settings"]["window_hours"] == 150 / 3600
    weights = report["settings"]["weights"]
    assert (weights["speedup"], weights["fairness"], weights["churn"]) == (True, 0.5, 0.2)
    assert (weights["priority"], weights["early_finish"]) == (0.0, 0.9)
    assert report["policies"]["greedy"]["idle_node_s"] == pytest.approx(3 * 100 + 2 * 50)


def test_rate_error_and_learning_reach_the_settings(tiny_files, tmp_path):
    args = ["--rate-error", "0.5", "--rate-seed", "3", "--learn", "--policy", "greedy"]
    result = runner.invoke(
        app, ["replay", *args_of(tiny_files), *args, "--no-baselines", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.stderr
    settings = json.loads((tmp_path / "report.json").read_text())["settings"]
    assert (settings["rate_error"], settings["rate_seed"], settings["learn"]) == (0.5, 3, True)


def test_bad_priority_column_exits_2_naming_the_line(tiny_files, tmp_path):
    jobs = tiny_files["--jobs"]
    lines = jobs.read_text().splitlines()
    rows = [lines[0] + ",priority", lines[1] + ",2", lines[2] + ",0"]
    jobs.write_text("\n".join(rows) + "\n")
    result = runner.invoke(app, ["replay", *args_of(tiny_files), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert (
        result.stderr.count("\n") == 1 and "line 3: priority must be a number > 0" in result.stderr
    )


@pytest.mark.parametrize(
    ("option", "text", "message"),
    [
        ("--trace", None, "--trace: no such file"),
        ("--trace", "timestamp,node\n2021-02-01T00:00:00,a\n", "header must be"),
        ("--trace", "timestamp,node,state\n2021-02-01T00:00:00,a,up\n", "line 2: state 'up'"),
        ("--jobs", None, "--jobs: no such file"),
        ("--jobs", "job_id,model\nA,m\n", "missing column(s) max_nodes"),
        ("--scalability", "model,nodes\nm,1\n", "missing column(s) samples_per_s"),
    ],
)
def test_bad_file_exits_2_with_one_line(tiny_files, tmp_path, option, text, message):
    bad = tmp_path / "bad.csv"
    if text is not None:
        bad.write_text(text)
    files = {**tiny_files, option: bad}
    result = runner.invoke(app, ["replay", *args_of(files), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr


def test_jobs_with_a_model_missing_from_the_table_exit_2(tiny_files, tmp_path):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(tiny_files["--jobs"].read_text().replace("A,m,", "A,vgg19,"))
    result = runner.invoke(app, ["replay", *args_of({**tiny_files, "--jobs": jobs})])
    assert result.exit_code == 2
    assert "model 'vgg19' is not in the scalability table" in result.stderr
