"""Users in the replay: the jobs file's ``user`` column, fair admission between users, the
per-user figures of the report, and each solve told whose each job is."""

from dataclasses import replace
from pathlib import Path

import pytest
from interstice.replay.horizon import FixedHorizon
from interstice.replay.jobs import load_jobs
from interstice.replay.report import by_user, summarize
from interstice.replay.simulator import ReplayOptions, replay
from tiny_replay import run, spec, take_all


def test_the_user_column_is_optional(inputs, tmp_path: Path) -> None:
    _, table = inputs
    path = tmp_path / "jobs.csv"
    path.write_text(
        "job_id,model,submit_time,min_nodes,max_nodes,total_samples,rescale_up_s,"
        "rescale_down_s,user\n"
        "A,m,2021-01-01T00:00:00,1,4,1000,10,5,alice\n"
        "B,m,2021-01-01T00:00:30,1,4,1000,10,5,\n"
    )
    assert [job.user for job in load_jobs(path, table)] == ["alice", None]


def test_a_user_with_many_queued_jobs_does_not_keep_another_users_job_waiting(inputs) -> None:
    # One-node jobs: alice's A0..A3 arrive at 0..3 s, bob's B at 4 s; 3 nodes are idle until
    # n4 comes at 60 s. First come first served admits A0, A1, A2 on arrival (their usable
    # nodes sum to 3) and the next at 60 s: A3, with bob's B last. Fair between users, at 60 s
    # bob (no job admitted) comes before alice (three): B is admitted, A3 still waits.
    jobs = [spec(f"A{k}", 1e9, offset_s=k, max_nodes=1) for k in range(4)]
    jobs.append(spec("B", 1e9, offset_s=4, max_nodes=1))
    fcfs = run(inputs, jobs)
    assert [j.admitted_s for j in fcfs.jobs] == [0.0, 1.0, 2.0, 60.0, None]
    users = [replace(job, user="alice") for job in jobs[:4]] + [replace(jobs[4], user="bob")]
    fair = run(inputs, users)
    assert [j.admitted_s for j in fair.jobs] == [0.0, 1.0, 2.0, None, 60.0]
    figures = summarize(fair)["by_user"]
    assert (figures["alice"]["jobs_arrived"], figures["bob"]["jobs_arrived"]) == (4, 1)
    # take_all: B runs on n4 from 60 s, paused 10 s: 100 samples/s over 140 s of 200.
    assert figures["bob"]["goodput_samples"] == pytest.approx(100 * 130)
    assert figures["bob"]["wait_mean_s"] == 56.0
    total = sum(part["harvest"] for part in figures.values())
    assert total == pytest.approx(summarize(fair)["harvest"])
    assert by_user(fcfs) == {}


def test_each_solve_is_told_the_jobs_users(inputs) -> None:
    trace, table = inputs
    seen: list[tuple[str | None, ...]] = []

    def record(problem):  # type: ignore[no-untyped-def]
        seen.append(tuple(job.user for job in problem.jobs))
        return take_all(problem)

    jobs = [replace(spec("A", 1e9, max_nodes=1), user="alice"), spec("B", 1e9, max_nodes=1)]
    replay(trace.window(0, 50.0), jobs, table, record, horizon=FixedHorizon(300),
           options=ReplayOptions(), name="record")  # fmt: skip
    assert seen and set(seen) == {("alice", None)}
