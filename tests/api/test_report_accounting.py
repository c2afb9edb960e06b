"""What the service takes from a heartbeat's report for a job's record: a rescale's cost ends
when the workers say they first stepped beyond their first step (``resumed_at``), not when
the report arrives; the generation's first step is the one the workers say; and a job that
ended (cancelled) still takes its workers' last sample count, and nothing else."""

from datetime import datetime, timedelta

from api_helpers import beat, start_job


def test_a_rescale_cost_ends_at_the_workers_resumed_at(api) -> None:
    agents, job, _ = start_job(api, ["n1"])
    rescale = api.job(job["job_id"])["rescales"][0]
    resumed = datetime.fromisoformat(rescale["at"]) + timedelta(seconds=2.5)
    report = {"job_id": job["job_id"], "rendezvous_id": f"{job['job_id']}-g1", "first_step": 4}
    # the first report received is already beyond the first step: it ends the cost
    beat(api, agents["n1"], **report, step=9, samples_done=288, resumed_at=resumed.isoformat())
    assert api.job(job["job_id"])["rescales"][0]["cost_s"] == 2.5


def test_without_resumed_at_the_cost_ends_at_the_arrival_of_a_later_step(api) -> None:
    agents, job, _ = start_job(api, ["n1"])
    report = {"job_id": job["job_id"], "rendezvous_id": f"{job['job_id']}-g1"}
    beat(api, agents["n1"], **report, step=4, samples_done=128)  # an older agent's
    assert api.job(job["job_id"])["rescales"][0]["cost_s"] is None
    beat(api, agents["n1"], **report, step=9, samples_done=288)
    assert api.job(job["job_id"])["rescales"][0]["cost_s"] >= 0.0


def test_a_cancelled_job_takes_its_workers_last_samples_and_nothing_else(api) -> None:
    agents, job, _ = start_job(api, ["n1"])
    report = {"job_id": job["job_id"], "rendezvous_id": f"{job['job_id']}-g1"}
    beat(api, agents["n1"], **report, step=4, samples_done=128, loss=2.0)
    assert api.call("DELETE", f"/v1/jobs/{job['job_id']}", "user").status_code == 200
    # the workers' report after their stop: the samples of their final checkpoint
    beat(api, agents["n1"], **report, step=7, samples_done=224, loss=1.0, job_state="finished")
    shown = api.job(job["job_id"])
    assert (shown["state"], shown["samples_done"]) == ("cancelled", 224)
    assert shown["last_loss"] == 2.0  # the rest of an ended job's report is not recorded
    beat(api, agents["n1"], **report, step=7, samples_done=96)  # fewer: the largest is kept
    assert api.job(job["job_id"])["samples_done"] == 224
