"""``interstice demo``: the trace plan on a hand-made trace, bad flags, and one whole run on
this machine (slow): it must rescale a job, honour a reclaim within its grace period and
leave no process behind."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import psutil
import pytest
from interstice.replay.trace import NodeTrace

from interstice.data import TRACE_FILE, data_dir
from interstice.demo.jobs import ExampleJobs
from interstice.demo.plan import plan_replay

INTERSTICE = [sys.executable, "-c", "from interstice.cli import app; app()"]
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
        (["--trace", "/nonexistent/trace.csv.gz"], "trace /nonexistent/trace.csv.gz is absent"),
    ],
)
def test_bad_flags_exit_2_with_one_line(flags: list[str], message: str) -> None:
    done = subprocess.run(
        [*INTERSTICE, "demo", *flags], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr
    assert done.stdout == ""


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
def test_demo_rescales_honours_reclaims_and_stops_everything() -> None:
    if not (data_dir() / TRACE_FILE).is_file():
        pytest.skip(f"the Summit trace {data_dir() / TRACE_FILE} is absent")
    marker = uuid.uuid4().hex
    done = subprocess.run(
        ["nice", "-n", "10", *INTERSTICE, "demo", "--duration-s", "60"],
        capture_output=True,
        text=True,
        timeout=1100,  # the start on a loaded 2-core machine is slow; the replay is 60 s
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
