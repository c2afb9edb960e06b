"""``interstice solve``: JSON out for a valid snapshot; exit code 2 and one line otherwise."""

import json
from pathlib import Path

import pytest
import typer
from interstice.optimizer import Job, Problem, ScalabilityPoint, ScalabilityTable, Weights
from typer.testing import CliRunner

from interstice.solve_cli import solve

app = typer.Typer()
app.command()(solve)
runner = CliRunner()

# 3 nodes, H = 60 s, 10 samples/s per node. a: 1 -> 600, 2 -> 1200 samples; b (exactly 2,
# 6 s to start): 2 -> 20 x 54 = 1080. The greedy takes a's 2 nodes (600 per node before b's
# 540) and cannot fit b: the LP is fractional, so the solver runs and finds a=1, b=2: 1680.
PROBLEM = Problem(
    idle_nodes=("n1", "n2", "n3"),
    jobs=(
        Job(job_id="a", model="m", min_nodes=1, max_nodes=2, samples_remaining=1e6),
        Job(
            job_id="b", model="m", min_nodes=2, max_nodes=2, samples_remaining=1e6, rescale_up_s=6.0
        ),
    ),
    scalability=ScalabilityTable(
        points=(ScalabilityPoint(model="m", nodes=2, samples_per_s=20.0),)
    ),
    weights=Weights(node_seconds=False),  # worked in samples
    horizon_s=60.0,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "snapshot.json"
    path.write_text(text)
    return path


def snapshot_with(**job_fields) -> str:
    document = json.loads(PROBLEM.model_dump_json())
    document["jobs"][0].update(job_fields)
    return json.dumps(document)


@pytest.mark.parametrize("backend", ["cbc", "cpsat"])
def test_valid_snapshot_prints_the_allocation(tmp_path: Path, backend: str) -> None:
    path = write(tmp_path, PROBLEM.model_dump_json())
    result = runner.invoke(app, [str(path), "--backend", backend, "--time-limit", "5"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["status"] == "optimal"
    assert answer["backend"] == backend
    assert answer["objective"] == pytest.approx(1680.0)
    names = [(j["job_id"], j["node_names"]) for j in answer["jobs"]]
    assert names == [("a", ["n1"]), ("b", ["n2", "n3"])]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (snapshot_with(min_nodes=3), "jobs[0]: job 'a': min_nodes 3 > max_nodes 2"),
        (snapshot_with(model="x"), "job 'a': model 'x' is not in the scalability table"),
        (snapshot_with(min_nodes=-1), "jobs[0].min_nodes: Input should be greater than or"),
        (snapshot_with(samples_remaining=-5), "jobs[0].samples_remaining: Input should be"),
        ('{"idle_nodes": [', "snapshot: Invalid JSON"),
        ("{}", "idle_nodes: Field required (and 3 more)"),
    ],
)
def test_bad_snapshot_exits_2_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    result = runner.invoke(app, [str(write(tmp_path, text))])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: ")
    assert message in result.stderr


def test_missing_file_and_bad_time_limit_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, [str(tmp_path / "absent.json")])
    assert result.exit_code == 2
    assert "absent.json: cannot read the snapshot" in result.stderr
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    result = runner.invoke(app, [str(binary)])
    assert result.exit_code == 2
    assert "binary.json: the snapshot is not UTF-8 text" in result.stderr
    path = write(tmp_path, PROBLEM.model_dump_json())
    result = runner.invoke(app, [str(path), "--time-limit", "0"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: --time-limit must be > 0, got 0.0"


# The same snapshot with n3 forecast to leave 3 s from now. b (exactly 2 nodes, 6 s to
# start) on n3 would lose it while still paused and stop: 0; a on n3 trains 10 x 3 = 30, then
# stops. So a=2 on n1, n2 (20 x 60 = 1,200) beats a=1 and b=2 with n3 in either (1,110 at
# best).
@pytest.mark.parametrize("backend", ["cbc", "cpsat"])
def test_a_snapshot_with_forecasts_is_solved_with_them(tmp_path: Path, backend: str) -> None:
    document = json.loads(PROBLEM.model_dump_json())
    path = write(tmp_path, json.dumps({**document, "idle_forecast_s": {"n3": 3.0}}))
    result = runner.invoke(app, [str(path), "--backend", backend])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["objective"] == pytest.approx(1200.0)
    names = [(j["job_id"], j["node_names"]) for j in answer["jobs"]]
    assert names == [("a", ["n1", "n2"]), ("b", [])]
    path = write(tmp_path, json.dumps({**document, "idle_forecast_s": {"n9": 3.0}}))
    result = runner.invoke(app, [str(path)])
    assert result.exit_code == 2
    assert "idle_forecast_s: node 'n9' is not idle" in result.stderr
