"""State, report and save_final in one process (a world of one over an in-process store)."""

import importlib
import json
import os
import signal

import pytest
import torch

from interstice import elastic, wire


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A world of one with a job's INTERSTICE_* environment in ``tmp_path``."""
    elastic.shutdown()
    monkeypatch.setattr(importlib.import_module("interstice.elastic.report"), "_reporter", None)
    monkeypatch.setenv(wire.ENV_JOB_DIR, str(tmp_path / "job"))
    monkeypatch.setenv(wire.ENV_RUN_DIR, str(tmp_path / "run"))
    monkeypatch.setenv(wire.ENV_CHECKPOINT_DIR, str(tmp_path / "job" / "checkpoints"))
    monkeypatch.setenv(wire.ENV_TOTAL_SAMPLES, "40")
    (tmp_path / "run").mkdir()
    ctx = elastic.init()
    yield ctx
    elastic.shutdown()


def make_state(**extra):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    sampler = elastic.ElasticSampler(25, 10, seed=3)
    state = elastic.State(model=model, optimizer=optimizer, sampler=sampler, **extra)
    return state


def train(state, steps):
    data = torch.randn(25, 3)
    for _ in range(steps):
        indices = state.sampler.current_share()
        state.optimizer.zero_grad()
        loss_sum = state.model(data[[i for _, i in indices]]).square().sum()
        (loss_sum / 10).backward()
        state.optimizer.step()
        state.step(loss_sum=loss_sum)


def close(state):
    state._signals.restore()


def test_the_environment_of_a_job_is_read(job, tmp_path):
    assert (job.rank, job.world_size, job.device.type) == (0, 1, "cpu")
    assert job.job_dir == tmp_path / "job" and job.total_samples == 40


def test_a_saved_state_comes_back_whole(job):
    state = make_state(world_sizes=[1])
    assert state.load() is False
    train(state, 2)
    state.world_sizes.append(5)
    state.save()
    again = make_state(world_sizes=[])
    assert again.load() is True
    assert (again.steps, again.samples, again.world_sizes) == (2, 20, [1, 5])
    assert again.sampler.state_dict() == state.sampler.state_dict()
    for a, b in zip(again.model.parameters(), state.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert again.optimizer.state_dict()["state"][0]["step"] == 2
    assert not [p for p in job.checkpoint_dir.iterdir() if p.name.endswith(".tmp")]
    close(state), close(again)


def test_the_budget_stops_after_the_step_that_reaches_it(job):
    state = make_state()
    assert state.should_stop() is False
    train(state, 3)
    assert state.should_stop() is False  # 30 of 40 samples
    train(state, 1)
    assert state.should_stop() is True and state.stop_reason == "budget" and state.finished
    close(state)


def test_the_stop_file_and_sigterm_stop_every_rank_after_the_next_step(job):
    state = make_state(total_samples=1000)
    train(state, 1)
    wire.stop_path(job.run_dir).touch()
    assert state.should_stop() is False  # agreed at the step, before the file existed
    train(state, 1)  # its collective carries the wish...
    assert state.should_stop() is False
    train(state, 1)  # ...and is read after the next step
    assert state.should_stop() is True and state.stop_reason == "stop file"
    assert state.steps == 3
    os.unlink(wire.stop_path(job.run_dir))
    close(state)
    state = make_state(total_samples=1000)
    os.kill(os.getpid(), signal.SIGTERM)
    assert state.should_stop() is True and state.stop_reason == "signal"
    close(state)


def test_periodic_saves_follow_the_step_count(job):
    state = make_state(total_samples=1000, save_every_steps=2)
    train(state, 1)
    assert not state.checkpoint_path.exists()
    train(state, 1)
    assert torch.load(state.checkpoint_path, weights_only=False)["steps"] == 2
    close(state)


def test_the_loss_is_the_mean_over_the_global_batch(job):
    state = make_state(total_samples=30)
    state.step(loss_sum=torch.tensor(25.0))
    assert state.loss is None  # read with the next step
    state.step(loss_sum=torch.tensor(5.0))
    assert state.loss == 2.5
    state.step(loss_sum=torch.tensor(7.0))
    assert state.should_stop() and state.loss == 0.7  # the last step's, once stopping
    close(state)


def test_reports_reach_the_progress_file_and_the_metrics(job):
    assert elastic.report(step=1, samples=10, loss=0.5, lr=0.1) is True
    assert elastic.report(step=2, samples=20, loss=0.4) is False  # rate-limited
    assert elastic.report(step=3, samples=30, loss=float("nan"), state="finished") is True
    progress = json.loads(wire.progress_path(job.run_dir, 0).read_text())
    assert progress["step"] == 3 and progress["state"] == "finished" and progress["loss"] is None
    assert set(progress) >= {"rendezvous_id", "rank", "world_size", "nodes", "samples_per_s"}
    lines = [json.loads(x) for x in wire.metrics_path(job.job_dir).read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 3] and lines[0]["lr"] == 0.1
    with pytest.raises(ValueError, match="state"):
        elastic.report(step=4, samples=40, state="done")


def test_reporting_never_raises_on_io_trouble(tmp_path, monkeypatch, caplog):
    elastic.shutdown()
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(wire.ENV_RUN_DIR, str(blocker / "run"))  # under a file: unwritable
    monkeypatch.setenv(wire.ENV_JOB_DIR, str(blocker / "job"))
    elastic.init()
    assert elastic.report(step=1, samples=1, state="stopped") is True
    assert "could not write" in caplog.text
    elastic.shutdown()


def test_the_final_model_lands_in_the_job_dir(job):
    model = torch.nn.Linear(3, 2)
    path = elastic.save_final(model)
    assert path == job.job_dir / "final" / "model.pt"
    assert torch.equal(torch.load(path)["weight"], model.weight)


def test_save_final_without_any_folder_writes_nothing(monkeypatch, caplog):
    elastic.shutdown()
    for name in (wire.ENV_JOB_DIR, wire.ENV_CHECKPOINT_DIR):
        monkeypatch.delenv(name, raising=False)
    elastic.env.use_checkpoint_dir(None)
    elastic.init()
    assert elastic.save_final(torch.nn.Linear(1, 1)) is None
    assert "final model not saved" in caplog.text
    elastic.shutdown()
