"""``interstice demo``: the trace plan on a hand-made trace, the trace it falls back to, job
files and ``--keep``, bad flags, and one whole run on this machine (slow): it must rescale a
job, honour a reclaim within its grace period, keep the job folders where asked and leave no
process behind."""

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import numpy as np
import psutil
import pytest
import typer
from interstice.replay.trace import NodeTrace

from interstice import data
from interstice.data import SYNTHETIC_TRACE, TRACE_FILE, data_dir, demo_trace
from interstice.demo.cli import job_files, keep_folder
from interstice.demo.jobs import ExampleJobs
from interstice.demo.plan import plan_replay
from interstice.demo.session import EXAMPLES, DemoOptions, keep_job_folders, trace_lines

INTERSTICE = [sys.executable, "-c", "from interstice.cli import app; app()"]
DIGITS = (EXAMPLES / "digits.toml").read_text()
MARKER = "DEMO_TEST_MARKER"  # not INTERSTICE_*: the agents pass it on to their workers


def trace_of(initial_idle: list[bool], changes: list[tuple[int, int, bool]], end_s: int):
    """A NodeTrace of nodes ``a``, ``b``, ... from ``(time_s, node, idle)`` changes."""
    changes = sorted(changes)
    start = np.datetime64("2021-02-01T00:00:00")
    return NodeTrace(
        start=start,
        end=start + np.timedelta64(end_s, "s"),
        node_names=np.array([chr(ord("a") + i) for i in range(len(initial_idle))]),
        initial_idle=np.array(initial_idle),
        change_time_s=np.array([c[0] for c in changes], dtype=np.int64),
        change_node=np.array([c[1] for c in changes], dtype=np.int32),
        change_idle=np.array([c[2] for c in changes]),
    )


def test_plan_prefers_long_idle_spans_reclaimed_at_new_moments() -> None:
    # One hour at 60x = 60 real s; usable: idle >= 10 real s (600 trace s), reclaimed by 50 s.
    trace = trace_of(
        [True, True, True, True],
        [
            (1200, 0, False),  # a: idle 20 s, reclaimed at 20 s: usable
            (1200, 1, False),  # b: the same moment as a (one big job took both back)
            (1260, 2, False),  # c: idle 21 s, reclaimed at 21 s: 1 s after a, same moment
            (1800, 2, True),
            (2400, 2, False),  # c again at 40 s: a new moment
            (300, 3, False),  # d: idle 5 s only: not usable
            (600, 3, True),
            (3300, 3, False),  # d: idle 45 s but reclaimed at 55 s, after the tail
        ],
        end_s=3600,
    )
    plan = plan_replay(trace, 2, duration_s=60, speedup=60, min_idle_s=10, tail_s=10)
    assert plan.nodes == ("c", "a")  # c: two usable reclaims; then a (or b): one more moment
    assert plan.usable_reclaims == 2  # a's reclaim falls at c's first one
    assert plan.initial_idle == {"c": True, "a": True}
    assert [(c.at_s, c.node, c.idle) for c in plan.changes] == [
        (20.0, "a", False),
        (21.0, "c", False),
        (30.0, "c", True),
        (40.0, "c", False),
    ]


def test_plan_avoids_flickering_nodes() -> None:
    # Both are reclaimed once after >= 10 real s idle; a is idle longer in all but flickers
    # (idle 1 s, twice), which would restart a job's workers twice for nothing.
    trace = trace_of(
        [True, True],
        [(1500, 0, False), (1560, 0, True), (1620, 0, False), (1680, 0, True), (1740, 0, False)]
        + [(2400, 0, True), (1200, 1, False)],
        end_s=3600,
    )
    plan = plan_replay(trace, 1, duration_s=60, speedup=60, min_idle_s=10, tail_s=10)
    assert plan.nodes == ("b",)


def test_a_finished_example_is_submitted_again_while_the_run_has_time_for_it() -> None:
    submitted: list[str] = []

    def submit(name: str) -> str:
        submitted.append(name)
        return f"j-{len(submitted)}"

    jobs = ExampleJobs(submit, duration_s=100)
    jobs.start(["digits", "charlm", "digits"])  # j-1, j-2, j-3 at 0 s: digits twice at a time
    assert jobs.update([{"job_id": "j-1", "state": "running"}], 10) == []
    # j-1 took 30 s and 70 s are left: again (j-4); j-2 and j-3 still running
    state = {"j-1": "finished", "j-2": "running", "j-3": "running"}
    added = jobs.update([{"job_id": k, "state": v} for k, v in state.items()], 30)
    assert [(c.job_id, c.name, c.stream, c.submitted_s) for c in added] == [
        ("j-4", "digits", 0, 30)
    ]
    # j-2 took 60 s with 40 s left: not again; j-4 took 30 s with 40 s left: again (j-5);
    # j-3, the second digits, took 60 s: not again
    state.update({"j-2": "finished", "j-3": "finished", "j-4": "finished"})
    added = jobs.update([{"job_id": k, "state": v} for k, v in state.items()], 60)
    assert [c.job_id for c in added] == ["j-5"]
    # a failed copy is not replaced; an old finished copy is not counted twice
    state.update({"j-5": "failed"})
    assert jobs.update([{"job_id": k, "state": v} for k, v in state.items()], 65) == []
    assert submitted == ["digits", "charlm", "digits", "digits", "digits"]
    assert jobs.names == {f"j-{n}": name for n, name in enumerate(submitted, 1)}


def test_plan_refuses_a_window_longer_than_the_trace() -> None:
    trace = trace_of([True], [(60, 0, False)], end_s=600)
    with pytest.raises(ValueError, match="exceed"):
        plan_replay(trace, 1, duration_s=60, speedup=60, min_idle_s=10, tail_s=10)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--agents", "0"], "--agents must be in 1..16"),
        (["--speedup", "fast"], "--speedup must be a number"),
        (["--jobs", "nosuchjob"], "no example job 'nosuchjob'"),
        (["--jobs", "digits,/nonexistent/job.toml"], "--jobs: no job file /nonexistent/job.toml"),
        (["--trace", "/nonexistent/trace.csv.gz"], "trace /nonexistent/trace.csv.gz is absent"),
        (["--keep", "/dev/null"], "--keep /dev/null: not a folder"),
    ],
)
def test_bad_flags_exit_2_with_one_line(flags: list[str], message: str) -> None:
    done = subprocess.run(
        [*INTERSTICE, "demo", *flags], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr
    assert done.stdout == ""


def test_without_the_real_trace_the_demo_replays_the_synthetic_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INTERSTICE_DATA_DIR", raising=False)
    monkeypatch.setattr(data, "data_dir", lambda: tmp_path)
    assert demo_trace() == SYNTHETIC_TRACE
    (tmp_path / TRACE_FILE).write_bytes(b"")
    assert demo_trace() == tmp_path / TRACE_FILE


def test_a_data_folder_given_without_the_trace_is_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERSTICE_DATA_DIR", str(tmp_path))
    assert demo_trace() == tmp_path / TRACE_FILE  # the demo says it is absent


def test_the_first_lines_say_which_trace_and_how_to_give_the_real_one() -> None:
    options = DemoOptions(4, 60, 90, 0, (), 0, 0, 15, str(SYNTHETIC_TRACE), synthetic=True)
    first, then = trace_lines(options)
    assert "SYNTHETIC" in first and str(SYNTHETIC_TRACE) in first
    assert TRACE_FILE in then and "--trace" in then and "$INTERSTICE_DATA_DIR" in then
    real = DemoOptions(4, 60, 90, 0, (), 0, 0, 15, f"/data/{TRACE_FILE}")
    assert trace_lines(real) == [
        f"Trace: Summit's, real (BFTrainer's public replay data): /data/{TRACE_FILE}"
    ]
    given = DemoOptions(4, 60, 90, 0, (), 0, 0, 15, "/data/mine.csv")
    assert trace_lines(given) == ["Trace: /data/mine.csv"]


def test_jobs_take_example_names_and_job_files(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text((EXAMPLES / "digits.toml").read_text())
    assert job_files(f" digits , {mine}") == (str(EXAMPLES / "digits.toml"), str(mine))


def errors_of(call, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``call()`` printed on stderr as it exited with code 2."""
    with pytest.raises(typer.Exit) as exited:
        call()
    assert exited.value.exit_code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("command = [", "mine.toml: "),  # not TOML
        (DIGITS.replace("min_nodes = 1", "min_nodes = 0"), "--jobs mine.toml: min_nodes:"),
        (DIGITS + "surprise = 1\n", "--jobs mine.toml: surprise: unknown key"),
    ],
)
def test_a_bad_job_file_exits_2_with_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    content: str,
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("mine.toml").write_text(content)
    assert message in errors_of(lambda: job_files("mine.toml"), capsys)


def test_jobs_refuse_a_folder_and_an_empty_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "is not a file" in errors_of(lambda: job_files(f"{tmp_path}/"), capsys)
    assert "names no job" in errors_of(lambda: job_files(" , "), capsys)


def test_keep_takes_a_new_or_empty_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert keep_folder(tmp_path / "new" / "runs") == tmp_path / "new" / "runs"
    assert (tmp_path / "new" / "runs").is_dir()
    assert keep_folder(tmp_path / "new" / "runs") == tmp_path / "new" / "runs"  # empty: fine
    (tmp_path / "new" / "runs" / "j-1").mkdir()
    assert "not empty" in errors_of(lambda: keep_folder(tmp_path / "new" / "runs"), capsys)
    (tmp_path / "file").write_text("")
    assert "not a folder" in errors_of(lambda: keep_folder(tmp_path / "file"), capsys)
    below_a_file = tmp_path / "file" / "runs"
    assert "--keep" in errors_of(lambda: keep_folder(below_a_file), capsys)


def test_kept_job_folders_move_whole(tmp_path: Path) -> None:
    root, keep = tmp_path / "checkpoints", tmp_path / "keep"
    (root / "j-1" / "final").mkdir(parents=True)
    (root / "j-1" / "final" / "model.pt").write_bytes(b"weights")
    (root / "j-2" / "logs").mkdir(parents=True)
    keep.mkdir()
    keep_job_folders(root, keep)
    assert (keep / "j-1" / "final" / "model.pt").read_bytes() == b"weights"
    assert (keep / "j-2" / "logs").is_dir()
    assert list(root.iterdir()) == []
    keep_job_folders(tmp_path / "none", keep)  # a run that made no job: nothing to move


def processes_marked(marker: str) -> list[str]:
    """Processes of this user whose environment holds ``MARKER=marker``."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if process.environ().get(MARKER) == marker:
                found.append(f"{process.pid} {' '.join(process.info['cmdline'] or [])[:200]}")
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    return found


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_demo_rescales_honours_reclaims_and_stops_everything(tmp_path: Path) -> None:
    """With the real trace; one of the jobs from a job file of the user's, the job folders
    kept."""
    if not (data_dir() / TRACE_FILE).is_file():
        pytest.skip(f"the Summit trace {data_dir() / TRACE_FILE} is absent")
    mine = tmp_path / "my-charlm.toml"  # the example, its workdir made absolute
    text = (EXAMPLES / "charlm.toml").read_text()
    mine.write_text(text.replace('workdir = ".."', f"workdir = {json.dumps(str(EXAMPLES.parent))}"))
    assert tomllib.loads(mine.read_text())["workdir"] == str(EXAMPLES.parent)
    keep = tmp_path / "kept"
    marker = uuid.uuid4().hex
    done = subprocess.run(
        ["nice", "-n", "10", *INTERSTICE, "demo", "--duration-s", "50"]
        + ["--jobs", f"digits,{mine}", "--keep", str(keep)],
        capture_output=True,
        text=True,
        timeout=1100,  # the start on a loaded 2-core machine is slow; the replay is 50 s
        env={**os.environ, MARKER: marker},
    )
    output = f"--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode == 0, output
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["demo"] == "summary" and summary["error"] is None, output
    assert summary["rescales"] >= 1, output
    assert summary["reclaims_within_grace"] >= 1, output
    assert summary["idle_node_s"] > 0 and summary["harvested_node_s"] > 0, output
    assert processes_marked(marker) == []
    assert summary["synthetic_trace"] is False, output
    assert {job["name"] for job in summary["jobs"]} == {"digits", "my-charlm"}, output
    assert summary["job_folders"] == str(keep), output
    assert f"kept in {keep}" in done.stdout, output
    assert sorted(p.name for p in keep.iterdir()) == sorted(j["job_id"] for j in summary["jobs"])
    for job in summary["jobs"]:
        if job["samples_done"] > 0:  # it ran: its logs are kept
            assert any((keep / job["job_id"] / "logs").iterdir()), job
        if job["state"] == "finished":
            assert any((keep / job["job_id"] / "final").iterdir()), job


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ctrl_c_stops_everything_and_prints_the_summary() -> None:
    """A terminal's Ctrl-C (SIGINT to the whole foreground process group) once the jobs are
    submitted: the run ends cleanly, exit code 0, the summary last, nothing left running."""
    if not (data_dir() / TRACE_FILE).is_file():
        pytest.skip(f"the Summit trace {data_dir() / TRACE_FILE} is absent")
    marker = uuid.uuid4().hex
    demo = subprocess.Popen(
        ["nice", "-n", "10", *INTERSTICE, "demo", "--duration-s", "300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, MARKER: marker},
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    head = []
    try:
        assert demo.stdout is not None
        for line in demo.stdout:  # the start takes minutes on a loaded 2-core machine
            head.append(line)
            if line.startswith("Submitted"):
                break
        time.sleep(5)
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGINT)
        stdout, stderr = demo.communicate(timeout=300)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    output = f"--- stdout\n{''.join(head)}{stdout[-6000:]}\n--- stderr\n{stderr[-3000:]}"
    assert any(line.startswith("Submitted") for line in head), output
    assert demo.returncode == 0, output
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["demo"] == "summary" and summary["error"] is None, output
    assert summary["duration_s"] < 300, output
    assert processes_marked(marker) == []
