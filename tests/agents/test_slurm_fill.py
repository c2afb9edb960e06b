"""``interstice slurm fill`` against stand-in sinfo/squeue/sbatch executables (the real Slurm
run is in tests/agents/test_slurm_real.py): one placeholder per usable node, counted by job
name, and one-line errors."""

from pathlib import Path
from typing import Any

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
    """sinfo prints $tmp/sinfo.out, squeue $tmp/squeue.out (squeue --start $tmp/start.out),
    scontrol no reservation; sbatch saves its stdin and args."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "sinfo": f'echo "$*" > {tmp_path}/sinfo.args; cat {tmp_path}/sinfo.out',
        "squeue": (
            f'if [ "$1" = --start ]; then cat {tmp_path}/start.out; exit; fi; '
            f'echo "$*" > {tmp_path}/squeue.args; cat {tmp_path}/squeue.out'
        ),
        "scontrol": "echo No reservations in the system",
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


def test_fill_leaves_out_a_bad_node_list_with_a_warning(fake_slurm: Path) -> None:
    (fake_slurm / "sinfo.out").write_text("n[3-1]\nn[1-2]\n")
    (fake_slurm / "squeue.out").write_text("")
    result = runner.invoke(app, ["slurm", "fill", "--once"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "warning: sinfo: left out 'n[3-1]': range '3-1' ends below its start in 'n[3-1]'",
        "partition scavenger: 2 usable nodes, 0 placeholders queued or running, submitted 2 "
        "(100, 101), Slurm lines left out: 1",
    ]


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


class FakeClient:
    """A service client whose nodes n1 and n2 are idle, n1 with a forecast an earlier fill
    process posted; it records the posted events. Its first ``call`` fails as nothing
    foreseen would (a KeyError)."""

    def __init__(self, servers: list[str], token: str) -> None:
        self.calls = 0
        self.untils: dict[str, str | None] = {"n1": "2026-11-28T10:05:00Z"}

    def call(self, method: str, path: str, json: Any = None, **_: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise KeyError("data")
        if method == "GET":
            data = [{"name": n, "state": "idle", "until": self.untils.get(n)} for n in ("n1", "n2")]
            return {"data": data, "count": 2, "next_cursor": None}
        for event in json["events"]:
            self.untils[event["node"]] = event["until"]
        return {"data": [{"applied": True} for _ in json["events"]]}


def test_fill_loop_outlives_hostile_lines_and_withdraws_an_earlier_processs_forecast(
    fake_slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 20-digit StartTime, a node list of 10^12 names and a start after 2100 are left out
    with a warning each, pass after pass (the pass's line counts them); an unforeseen fault
    fails one pass only; the first pass that reaches the service withdraws n1's forecast,
    which the plan no longer gives."""
    (fake_slurm / "sinfo.out").write_text("n[1-2]\n")
    (fake_slurm / "squeue.out").write_text("7\n8\n")
    (fake_slurm / "start.out").write_text(
        f"20 {'9' * 20} n1\n21 1999999999 r[1-999999]n[1-999999]\n22 4294967295 n2\n"
    )
    clients: list[FakeClient] = []
    monkeypatch.setattr(
        "interstice.agents.client.ServiceClient",
        lambda *a: clients.append(FakeClient(*a)) or clients[-1],
    )
    monkeypatch.setenv("INTERSTICE_SCHEDULER_TOKEN", "t")
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr("interstice.agents.slurm.cli.sleep", sleep)
    result = runner.invoke(app, ["slurm", "fill", "--server", "http://service"])
    assert len(sleeps) == 3, result.output
    lines = result.output.splitlines()
    placeholders = "partition scavenger: 2 usable nodes, 2 placeholders queued or running, "
    assert lines.count(placeholders + "submitted 0") == 3
    assert lines.count("error: KeyError('data')") == 1
    warnings = [line for line in lines if line.startswith("warning: squeue --start: left out")]
    assert len(warnings) == 6  # the first pass failed before it reported them
    assert lines[-4:] == [
        *warnings[-3:],
        "forecasts: 0 nodes wanted back by Slurm's plan, posted 0, withdrawn 0, "
        "Slurm lines left out: 3",
    ]
    forecasts = [line for line in lines if line.startswith("forecasts:")]
    assert forecasts[0].startswith(
        "forecasts: 0 nodes wanted back by Slurm's plan, posted 0, withdrawn 1,"
    )
    assert clients[0].untils == {"n1": None}
