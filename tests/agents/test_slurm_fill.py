"""``interstice slurm fill`` against stand-in sinfo/squeue/sbatch executables (the real Slurm
run is in tests/agents/test_slurm_real.py): one placeholder per usable node, counted by job
name, and one-line errors."""

from pathlib import Path

import pytest
from interstice.agents.slurm.fill import placeholders_missing
from typer.testing import CliRunner

from interstice.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("nodes", "queued", "max_jobs", "missing"),
    [(4, 0, None, 4), (4, 3, None, 1), (4, 4, None, 0), (4, 6, None, 0), (4, 0, 2, 2),
     (4, 2, 2, 0), (0, 0, None, 0), (4, 1, 0, 0)],
)  # fmt: skip
def test_placeholders_missing(nodes: int, queued: int, max_jobs: int | None, missing: int) -> None:
    assert placeholders_missing(nodes, queued, max_jobs) == missing


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """sinfo prints $tmp/sinfo.out, squeue $tmp/squeue.out; sbatch saves its stdin and args."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "sinfo": f'echo "$*" > {tmp_path}/sinfo.args; cat {tmp_path}/sinfo.out',
        "squeue": f'echo "$*" > {tmp_path}/squeue.args; cat {tmp_path}/squeue.out',
        "sbatch": (
            f"n=$(ls {tmp_path} | grep -c '^submitted'); cat > {tmp_path}/submitted.$n; "
            f'echo "$*" > {tmp_path}/sbatch.args; '
            f'if [ -e {tmp_path}/sbatch.fail ]; then echo "sbatch: error: invalid partition" >&2;'
            f" exit 1; fi; echo $((100 + n))"
        ),
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return tmp_path


def test_fill_submits_one_placeholder_per_uncovered_node(fake_slurm: Path) -> None:
    (fake_slurm / "sinfo.out").write_text("a01n[01-03]\nb02n05\n")
    (fake_slurm / "squeue.out").write_text("77\n")
    result = runner.invoke(app, ["slurm", "fill", "--once", "--partition", "idle"])
    assert result.exit_code == 0, result.output
    assert result.output == (
        "partition idle: 4 usable nodes, 1 placeholders queued or running, "
        "submitted 3 (100, 101, 102)\n"
    )
    assert "-p idle" in (fake_slurm / "sinfo.args").read_text()
    assert "-n interstice-placeholder" in (fake_slurm / "squeue.args").read_text()
    assert (fake_slurm / "sbatch.args").read_text().strip() == "--parsable"
    script = (fake_slurm / "submitted.0").read_text()
    assert "#SBATCH --partition=idle" in script and "#SBATCH --nodes=1" in script


def test_fill_respects_max_jobs(fake_slurm: Path) -> None:
    (fake_slurm / "sinfo.out").write_text("n[1-8]\n")
    (fake_slurm / "squeue.out").write_text("")
    result = runner.invoke(app, ["slurm", "fill", "--once", "--max-jobs", "2"])
    assert result.exit_code == 0, result.output
    assert "8 usable nodes, 0 placeholders queued or running, submitted 2" in result.output


def test_fill_reports_sbatch_failure_in_one_line(fake_slurm: Path) -> None:
    (fake_slurm / "sinfo.out").write_text("n1\n")
    (fake_slurm / "squeue.out").write_text("")
    (fake_slurm / "sbatch.fail").write_text("")
    result = runner.invoke(app, ["slurm", "fill", "--once"])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "error: sbatch --parsable failed: sbatch: error: invalid partition"
    ]


def test_fill_reports_a_bad_node_list(fake_slurm: Path) -> None:
    (fake_slurm / "sinfo.out").write_text("n[3-1]\n")
    (fake_slurm / "squeue.out").write_text("")
    result = runner.invoke(app, ["slurm", "fill", "--once"])
    assert result.exit_code == 2
    assert "range '3-1' ends below its start" in result.output


def test_fill_without_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = runner.invoke(app, ["slurm", "fill", "--once"])
    assert result.exit_code == 2
    assert result.output == "error: sinfo not found: is Slurm installed?\n"


def test_fill_loop_survives_a_failed_pass(
    fake_slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop reports a failed pass and goes on; the next pass submits."""
    (fake_slurm / "sinfo.out").write_text("n1\n")
    (fake_slurm / "squeue.out").write_text("")
    (fake_slurm / "sbatch.fail").write_text("")
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        (fake_slurm / "sbatch.fail").unlink(missing_ok=True)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr("interstice.agents.slurm.cli.sleep", sleep)
    result = runner.invoke(app, ["slurm", "fill", "--interval-s", "5"])
    assert sleeps == [5.0, 5.0]
    assert result.output.splitlines() == [
        "error: sbatch --parsable failed: sbatch: error: invalid partition",
        "partition scavenger: 1 usable nodes, 0 placeholders queued or running, submitted 1 (101)",
    ]
