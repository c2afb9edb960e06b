"""`interstice profile`: a measured table the optimizer reads, SPB rows derived for Summit's."""

from pathlib import Path

from interstice.models.profiler import SPB_RATIOS_FILE, read_ratios
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
        "model,nodes,samples_per_s,spb_depth,progress_per_sample,derived"
    )


def test_extend_derives_spb_rows_for_the_summit_table(bftrainer_dir: Path, tmp_path: Path) -> None:
    ratios = tmp_path / "ratios.csv"
    ratios.write_text(
        "model,spb_depth,throughput_ratio,progress_per_sample\nresnet18,1,1.5,0.8\nnotinit,1,2,0.5\n"
    )
    out = tmp_path / "extended.csv"
    result = runner.invoke(
        app,
        [
            "profile",
            "--extend",
            str(bftrainer_dir / "imagenet-scalability.csv"),
            "--ratios",
            str(ratios),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    table = ScalabilityTable.from_csv(out.read_text())
    summit = ScalabilityTable.from_csv((bftrainer_dir / "imagenet-scalability.csv").read_text())
    assert table.depths("resnet18") == (0, 1)
    assert table.depths("vgg16") == (0,)
    for nodes in (1, 8, 64):
        expected = 1.5 * summit.samples_per_s("resnet18", nodes)
        assert abs(table.samples_per_s("resnet18", nodes, 1) - expected) < 0.2
    assert table.progress_per_sample("resnet18", 1) == 0.8
    derived = [line for line in out.read_text().splitlines() if line.endswith(",true")]
    assert len(derived) == 8 and all(line.startswith("resnet18,") for line in derived)


def test_the_shipped_ratios_cover_the_scalability_table_models() -> None:
    ratios = read_ratios(SPB_RATIOS_FILE.read_text())
    models = {m for m, _ in ratios}
    assert {"AlexNet", "resnet18", "vgg16", "shufflenet"} <= models
    assert all(r > 0 and 0 < p <= 1 for r, p in ratios.values())


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, message in [
        (["--model", "nope"], "--model 'nope' is unknown"),
        (["--model", "tinycnn", "--device", "cuda"], "--device cuda"),
        (["--model", "tinycnn", "--spb-depths", "4"], "has 4 blocks"),
        (["--model", "tinycnn", "--nodes", "two"], "--nodes 'two'"),
        (["--extend", str(tmp_path / "missing.csv")], "cannot read"),
    ]:
        result = runner.invoke(app, ["profile", *args])
        assert result.exit_code == 2, args
        assert message in result.output and len(result.output.strip().splitlines()) == 1, (
            result.output
        )
