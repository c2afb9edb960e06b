"""`interstice profile`: a measured table the optimizer reads; bad input in one line."""

from pathlib import Path

from interstice.optimizer.problem import ScalabilityTable
from typer.testing import CliRunner

from interstice.cli import app

runner = CliRunner()


def test_profile_writes_a_table_the_optimizer_reads(tmp_path: Path) -> None:
    out = tmp_path / "tiny.csv"
    result = runner.invoke(
        app,
        [
            "profile",
            "--model",
            "tinycnn",
            "--nodes",
            "2",
            "--spb-depths",
            "0,1",
            "--steps",
            "2",
            "--progress-steps",
            "6",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    table = ScalabilityTable.from_csv(out.read_text())
    assert table.depths("tinycnn") == (0, 1)
    assert table.samples_per_s("tinycnn", 2, 0) > 0
    assert table.samples_per_s("tinycnn", 2, 1) > 0
    assert table.progress_per_sample("tinycnn", 0) == 1.0
    assert 0 < table.progress_per_sample("tinycnn", 1) <= 1
    assert out.read_text().splitlines()[0] == (
        "model,nodes,samples_per_s,spb_depth,progress_per_sample"
    )


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, message in [
        (["--model", "nope"], "--model 'nope' is unknown"),
        (["--model", "tinycnn", "--device", "cuda"], "--device cuda"),
        (["--model", "tinycnn", "--spb-depths", "4"], "has 4 blocks"),
        (["--model", "tinycnn", "--nodes", "two"], "--nodes 'two'"),
        ([], "--model is required"),
    ]:
        result = runner.invoke(app, ["profile", *args])
        assert result.exit_code == 2, args
        assert message in result.output and len(result.output.strip().splitlines()) == 1, (
            result.output
        )
