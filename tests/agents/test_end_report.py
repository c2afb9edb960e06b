"""The agent heartbeats a generation's end at once, not at its next heartbeat: a failed
launcher's ``failed`` (with the failing rank's reason) reaches the service while the next
heartbeat is an hour away, and only once. The heartbeat also carries the generation's first
step and when its workers first reported beyond it (the end of its rescale cost), from the
workers' progress files.

Against a fake service (httpx.MockTransport); the generation's launcher is a process that
exits as a launcher whose rank failed does.
"""

import json
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

from interstice.agents.generation import Generation
from interstice.agents.launcher_process import EXIT_WORKERS_FAILED
from interstice.agents.protocol import parse_command
from polling import wait_until
from test_agent_commands import FakeService, command, make_agent

from interstice import wire


def ended_generation(tmp_path: Path, exit_code: int, result: dict) -> Generation:
    """A generation of job j-1 whose launcher exited with ``exit_code``, writing ``result``."""
    run_dir = tmp_path / "j-1"
    run_dir.mkdir()
    result_path = run_dir / "launcher.result.json"
    result_path.write_text(json.dumps(result))
    process = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({exit_code})"])
    process.wait()
    return Generation(
        command=parse_command(command(job={**command()["job"], "job_dir": str(tmp_path)})),
        process=process,
        run_dir=run_dir,
        job_dir=tmp_path,
        log_path=tmp_path / "launcher.log",
        result_path=result_path,
    )


def heartbeats(service: FakeService) -> list[dict]:
    return [body for _, path, body in service.requests if path.endswith("/heartbeat")]


def test_a_failed_generation_is_reported_at_once_and_once(tmp_path: Path) -> None:
    service = FakeService(protocol_version=4)
    service.registered["heartbeat_interval_s"] = 3600.0  # the next heartbeat: in an hour
    agent = make_agent(tmp_path, service)
    assert agent.heartbeat_interval_s == 3600.0
    agent.generation = ended_generation(
        tmp_path, EXIT_WORKERS_FAILED, {"rank": 1, "error": "rank 1 exited with code 1"}
    )
    executor = threading.Thread(target=agent._execute_loop)  # no heartbeat or poll thread
    executor.start()
    try:
        wait_until(lambda: heartbeats(service), what="a heartbeat from the executor")
    finally:
        agent.shutdown.set()
        executor.join()
    agent._report_end()  # a later tick: reported already
    (beat,) = heartbeats(service)
    assert (beat["job_id"], beat["rendezvous_id"]) == ("j-1", "j-1-g1")
    assert beat["job_state"] == "failed"
    assert beat["error"].startswith("rank 1 exited with code 1; last lines of rank 1's log")


def test_a_running_generation_is_not_reported_out_of_turn(tmp_path: Path) -> None:
    service = FakeService(protocol_version=4)
    agent = make_agent(tmp_path, service)
    generation = ended_generation(tmp_path, 0, {"exit_code": 0})
    generation.process = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE)
    agent.generation = generation
    try:
        agent._report_end()
        assert heartbeats(service) == []
    finally:
        generation.process.communicate(b"\n")
    agent._report_end()
    assert [beat["job_state"] for beat in heartbeats(service)] == ["finished"]


def write_progress(run_dir: Path, local_rank: int, **fields: object) -> None:
    progress = {"rendezvous_id": "j-1-g1", "rank": local_rank, "nodes": 1, "time": 1.0e9}
    wire.progress_path(run_dir, local_rank).write_text(json.dumps(progress | fields))


def test_the_heartbeat_carries_when_the_generation_resumed(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, FakeService(protocol_version=4))
    agent.generation = ended_generation(tmp_path, 0, {"exit_code": 0})
    run_dir = agent.generation.run_dir
    resumed = datetime(2026, 12, 3, 12, 0, 1, 250000, tzinfo=UTC)
    write_progress(run_dir, 0, step=12, samples=384, first_step=9, resumed_time=None)
    assert agent.heartbeat_body()["first_step"] == 9
    assert "resumed_at" not in agent.heartbeat_body()
    write_progress(run_dir, 1, step=14, samples=448, first_step=9, resumed_time=resumed.timestamp())
    body = agent.heartbeat_body()
    assert (body["step"], body["first_step"]) == (14, 9)
    assert datetime.fromisoformat(body["resumed_at"]) == resumed
    # a clock the service would refuse (before 2000) must not cost the whole heartbeat
    write_progress(run_dir, 1, step=14, samples=448, first_step=9, resumed_time=12.5)
    assert "resumed_at" not in agent.heartbeat_body()


def test_a_service_before_version_4_gets_no_fields_it_would_refuse(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, FakeService(protocol_version=3))
    agent.generation = ended_generation(tmp_path, 0, {"exit_code": 0})
    write_progress(agent.generation.run_dir, 0, step=14, first_step=9, resumed_time=1.8e9)
    body = agent.heartbeat_body()
    assert body["step"] == 14 and not {"first_step", "resumed_at"} & set(body)
