"""A generation that never makes a step (workers hung before their first step) is released
after ``generation_start_timeout_s``, and one that stepped and then makes no progress after
its progress bound (``progress_timeout_s``, else derived from the job's report interval), so
that the next solve starts a new one; the failure is counted toward
``max_command_failures``."""

from __future__ import annotations

from datetime import timedelta

from api_helpers import Api, beat, start_job
from interstice.api.control import stalls
from interstice.api.store.tables import Job, JobMetric, Rescale, utcnow
from sqlalchemy import select, update


def _age_generation(api: Api, job_id: str, generation: int, seconds: float) -> None:
    """Make the rescale that started ``generation`` of ``job_id`` ``seconds`` old."""
    number = int(job_id.removeprefix("j-"))
    with api.app.state.service.db.write() as session:
        session.execute(
            update(Rescale)
            .where(Rescale.job_id == number, Rescale.generation == generation)
            .values(at=utcnow() - timedelta(seconds=seconds))
        )


def test_a_generation_without_a_step_is_released_and_started_again(api: Api) -> None:
    agents, job, _ = start_job(api, ["n1"])
    j = job["job_id"]
    service = api.app.state.service
    timeout_s = service.settings.generation_start_timeout_s
    _age_generation(api, j, 1, timeout_s - 5)
    assert stalls.sweep(service) == 0  # not yet
    _age_generation(api, j, 1, timeout_s + 5)
    assert stalls.sweep(service) == 1
    api.wait_for(lambda: api.job(j)["generation"] == 3)  # released (2), started anew (3)
    shown = api.job(j)
    assert (shown["state"], shown["nodes"], shown["error"]) == ("running", ["n1"], None)
    reasons = [(e["generation"], e["reason"], e["to_nodes"]) for e in shown["rescales"]]
    assert reasons[-2:] == [(2, "stalled", []), (3, "allocation", ["n1"])]
    kinds = [(c["kind"], c["rendezvous_id"]) for c in api.poll(agents["n1"], wait=0)]
    assert kinds == [("stop", f"{j}-g2"), ("start", f"{j}-g3")]  # the hung workers stop


def test_a_generation_that_reported_a_step_is_left_alone(api: Api) -> None:
    agents, job, _ = start_job(api, ["n1"])
    j = job["job_id"]
    beat(api, agents["n1"], job_id=j, rendezvous_id=f"{j}-g1", step=1)
    _age_generation(api, j, 1, 10 * api.app.state.service.settings.generation_start_timeout_s)
    assert stalls.sweep(api.app.state.service) == 0
    assert api.job(j)["generation"] == 1


def test_a_report_of_an_older_generation_does_not_count(api: Api) -> None:
    agents, job, _ = start_job(api, ["n1"])
    j = job["job_id"]
    service = api.app.state.service
    beat(api, agents["n1"], job_id=j, rendezvous_id=f"{j}-g0", step=7)
    _age_generation(api, j, 1, service.settings.generation_start_timeout_s + 1)
    assert stalls.sweep(service) == 1


def test_stalls_count_toward_max_command_failures(make_api) -> None:
    with make_api(max_command_failures=2) as api:
        _, job, _ = start_job(api, ["n1"])
        j = job["job_id"]
        service = api.app.state.service
        timeout_s = service.settings.generation_start_timeout_s
        _age_generation(api, j, 1, timeout_s + 1)
        assert stalls.sweep(service) == 1
        api.wait_for(lambda: api.job(j)["generation"] == 3)
        _age_generation(api, j, 3, timeout_s + 1)
        assert stalls.sweep(service) == 1
        shown = api.job(j)
        assert shown["state"] == "failed"
        assert shown["error"].startswith("2 failures; the last, generation 3 made no step in")


def test_a_timeout_of_0_turns_the_sweep_off(make_api) -> None:
    with make_api(generation_start_timeout_s=0) as api:
        _, job, _ = start_job(api, ["n1"])
        _age_generation(api, job["job_id"], 1, 10**6)
        assert stalls.sweep(api.app.state.service) == 0


# -- generations that stepped, then stopped making progress --------------------------------


def _age_progress(api: Api, job_id: str, seconds: float, interval_s: float | None = None) -> None:
    """Make ``job_id``'s current generation start, and its last progress, ``seconds`` old;
    with ``interval_s``, its progress reports ``interval_s`` apart, the newest at that age."""
    number = int(job_id.removeprefix("j-"))
    at = utcnow() - timedelta(seconds=seconds)
    with api.app.state.service.db.write() as session:
        job = session.get_one(Job, number)
        job.last_progress_at = at
        session.execute(
            update(Rescale)
            .where(Rescale.job_id == number, Rescale.generation == job.generation)
            .values(at=at - timedelta(seconds=1))
        )
        metrics = session.scalars(
            select(JobMetric).where(JobMetric.job_id == number).order_by(JobMetric.id.desc())
        ).all()
        for age, metric in enumerate(metrics):
            metric.at = at - timedelta(seconds=age * (interval_s or 0))


def _stepping(api: Api, *steps: int) -> tuple[dict[str, str], str]:
    """A one-node job whose generation 1 reported ``steps``."""
    agents, job, _ = start_job(api, ["n1"])
    j = job["job_id"]
    for step in steps:
        beat(api, agents["n1"], job_id=j, rendezvous_id=f"{j}-g1", step=step, job_state="running")
    return agents, j


def test_a_generation_that_stops_progressing_is_released_and_started_again(api: Api) -> None:
    # Steps 1..3 reported, then nothing (a worker hung in a collective, or its launcher's
    # rendezvous failed after its ack): past the floor (reports closer than floor / 20)
    # the job is released and the next solve starts a new generation from its checkpoint.
    agents, j = _stepping(api, 1, 2, 3)
    service = api.app.state.service
    floor_s = service.settings.progress_timeout_floor_s
    _age_progress(api, j, floor_s - 5, interval_s=1)
    assert stalls.sweep(service) == 0  # not yet
    _age_progress(api, j, floor_s + 5, interval_s=1)
    assert stalls.sweep(service) == 1
    api.wait_for(lambda: api.job(j)["generation"] == 3)
    shown = api.job(j)
    assert (shown["state"], shown["nodes"], shown["error"]) == ("running", ["n1"], None)
    reasons = [(e["generation"], e["reason"], e["to_nodes"]) for e in shown["rescales"]]
    assert reasons[-2:] == [(2, "stalled", []), (3, "allocation", ["n1"])]
    kinds = [(c["kind"], c["rendezvous_id"]) for c in api.poll(agents["n1"], wait=0)]
    assert kinds == [("stop", f"{j}-g2"), ("start", f"{j}-g3")]


def test_a_generation_whose_launcher_ended_after_its_ack_is_released(make_api) -> None:
    # The start was acked ok (its workers joined), the workers stepped, then the launcher
    # exited without a verdict (a rendezvous that failed after the join): the agent's
    # heartbeats still name the generation, with its last step and no job_state. No failed
    # ack and no rescale come; the progress bound releases the job from its node.
    with make_api(progress_timeout_s=60) as api:
        agents, j = _stepping(api, 1, 2)
        _age_progress(api, j, 61)
        beat(api, agents["n1"], job_id=j, rendezvous_id=f"{j}-g1", step=2)
        assert api.job(j)["state"] == "running"
        assert stalls.sweep(api.app.state.service) == 1
        shown = api.job(j)
        assert shown["rescales"][-1]["reason"] == "stalled"
        assert [c["kind"] for c in api.poll(agents["n1"], wait=0)][0] == "stop"


def test_the_bound_follows_the_jobs_own_report_interval(api: Api) -> None:
    # Reports 100 s apart: the bound is 20 x 100 s = 2000 s, above the 900 s floor.
    _, j = _stepping(api, 1, 2, 3, 4)
    service = api.app.state.service
    with service.db.read() as session:
        job = session.get_one(Job, int(j.removeprefix("j-")))
        assert stalls.progress_bound_s(session, job, service.settings)[0] == 900
    _age_progress(api, j, 1500, interval_s=100)
    with service.db.read() as session:
        job = session.get_one(Job, int(j.removeprefix("j-")))
        assert stalls.progress_bound_s(session, job, service.settings)[0] == 2000
    assert stalls.sweep(service) == 0
    _age_progress(api, j, 2100, interval_s=100)
    assert stalls.sweep(service) == 1
    assert api.job(j)["rescales"][-1]["reason"] == "stalled"


def test_progress_and_a_new_generation_each_restart_the_clock(api: Api) -> None:
    agents, j = _stepping(api, 1, 2)
    service = api.app.state.service
    floor_s = service.settings.progress_timeout_floor_s
    _age_progress(api, j, floor_s + 5)
    beat(api, agents["n1"], job_id=j, rendezvous_id=f"{j}-g1", step=3)  # progress: now
    assert stalls.sweep(service) == 0
    _age_progress(api, j, floor_s + 5)
    beat(api, agents["n1"], job_id=j, rendezvous_id=f"{j}-g1", step=3)  # a repeat: no progress
    assert stalls.sweep(service) == 1
    # The new generation's first step (a repeat from its checkpoint) starts its clock anew,
    # though the job's last step stays ahead of it.
    api.wait_for(lambda: api.job(j)["generation"] == 3)
    (start,) = [c for c in api.poll(agents["n1"], wait=0) if c["kind"] == "start"]
    api.ack_all(agents["n1"], [start])
    beat(api, agents["n1"], job_id=j, rendezvous_id=f"{j}-g3", step=2)
    assert stalls.sweep(service) == 0
    assert api.job(j)["generation"] == 3


def test_no_progress_counts_toward_max_command_failures(make_api) -> None:
    with make_api(max_command_failures=1, progress_timeout_s=60) as api:
        _, j = _stepping(api, 1, 2)
        _age_progress(api, j, 61)
        assert stalls.sweep(api.app.state.service) == 1
        shown = api.job(j)
        assert (shown["state"], shown["nodes"]) == ("failed", [])
        assert shown["error"].startswith(
            "1 failures; the last, generation 1 made no progress in 60 s (progress_timeout_s; "
            "last at step 2, "
        )
        assert shown["rescales"][-1]["reason"] == "failed"


def test_a_progress_timeout_of_0_turns_the_progress_sweep_off(make_api) -> None:
    with make_api(progress_timeout_s=0) as api:
        _, j = _stepping(api, 1, 2)
        _age_progress(api, j, 10**6)
        assert stalls.sweep(api.app.state.service) == 0
