"""A generation that never makes a step (workers hung before their first step) is released
after ``generation_start_timeout_s`` so that the next solve starts a new one; the failure is
counted toward ``max_command_failures``."""

from __future__ import annotations

from datetime import timedelta

from api_helpers import Api, beat, start_job
from interstice.api.control import stalls
from interstice.api.store.tables import Rescale, utcnow
from sqlalchemy import update


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
