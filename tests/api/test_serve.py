"""``interstice serve``: a port in use is refused before anything is done (checked in this
process); as a process, Ctrl-C during a batch of 10,000 node events stops it cleanly, and at
the default log level its access log leaves out the quiet agents' polls.

Timeline of the Ctrl-C test: the service starts; the test takes SQLite's write lock, so the
batch posted next waits on it inside the service (in flight, as a batch written while the
service is asked to stop); once the service is idle (the batch read, its write waiting),
SIGINT comes (once, or twice half a second apart); the lock is
released once the grace period has passed; the service exits 0 without a traceback, and the
batch was answered 200 or not at all, never 500. A retry of the same batch on the restarted
service is idempotent: every node once, the same answer twice.
"""

import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
import pytest
from api_helpers import free_port, interstice_executable
from interstice.api import serving
from polling import wait_until
from typer.testing import CliRunner

from interstice.cli import app

BATCH = 10000  # events, the most one request may carry
STARTUP_TIMEOUT_S = 120.0


def create_token(db: str, role: str = "scheduler") -> str:
    """``interstice token create`` in this process (the test needs no process of its own)."""
    created = CliRunner().invoke(app, ["token", "create", "--role", role, "--db", db])
    assert created.exit_code == 0, created.output
    return created.stdout.strip()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:
    """Start ``interstice serve`` on a database and port, logging into ``tmp_path`` (at
    ``trace``: each request's start too); killed at the end if still running."""
    started: list[subprocess.Popen] = []

    def start(
        db: str, port: int, name: str, log_level: str = "trace"
    ) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"{name}.log"
        with log.open("w") as output:
            process = subprocess.Popen(
                [interstice_executable(), "serve", "--db", db, "--port", str(port)],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=os.environ | {"INTERSTICE_LOG_LEVEL": log_level},
            )
        started.append(process)
        wait_until(
            lambda: "Application startup complete" in log.read_text(),
            STARTUP_TIMEOUT_S,
            f"{name} started",
            running=lambda: process.poll() is None,
        )
        return process, log

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_port_in_use_is_one_line_and_exit_code_2_before_the_database_is_touched(
    tmp_path: Path,
) -> None:
    database = tmp_path / "s.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        serve_there = ["serve", "--db", f"sqlite:///{database}", "--port", str(port)]
        done = CliRunner().invoke(app, serve_there)  # in this process: it ends at the check
    assert (done.exit_code, done.stdout) == (2, ""), done.output
    assert done.stderr.splitlines() == [f"error: port {port} on 127.0.0.1: in use"], done.stderr
    assert not database.exists()  # nothing migrated


def idle(server: subprocess.Popen) -> bool:
    """Whether ``server``'s process used less than 0.05 s of CPU over the next 0.5 s."""
    process = psutil.Process(server.pid)
    before = sum(process.cpu_times()[:2])
    time.sleep(0.5)
    return sum(process.cpu_times()[:2]) - before < 0.05


@pytest.mark.slow
@pytest.mark.parametrize("interrupts", [1, 2], ids=["ctrl-c", "ctrl-c-twice"])
def test_ctrl_c_during_a_large_batch_is_clean_and_never_answers_500(
    tmp_path: Path, serve, interrupts: int
) -> None:
    database = tmp_path / "s.db"
    db, port = f"sqlite:///{database}", free_port()
    token = create_token(db)
    server, log = serve(db, port, "first")
    at = datetime.now(UTC).isoformat()
    batch = {
        "events": [
            {"event_id": f"e{i}", "node": f"n{i}", "state": "idle", "at": at} for i in range(BATCH)
        ]
    }
    url, auth = f"http://127.0.0.1:{port}/v1/nodes/events", {"Authorization": f"Bearer {token}"}
    answers: list[int | str] = []

    def post() -> None:
        try:
            answers.append(httpx.post(url, json=batch, headers=auth, timeout=120).status_code)
        except httpx.TransportError as error:  # closed without an answer
            answers.append(type(error).__name__)

    writer = sqlite3.connect(database, isolation_level=None, timeout=30)
    writer.execute("BEGIN IMMEDIATE")  # the batch's writes wait: it is in flight meanwhile
    poster = threading.Thread(target=post)
    poster.start()
    wait_until(
        lambda: any(
            "Started scope=" in line and "/v1/nodes/events" in line
            for line in log.read_text().splitlines()
        ),
        60,
        "the batch reached the service",
    )
    # its 10,000 events read and validated (seconds on a loaded machine), the write waits
    wait_until(lambda: idle(server), 60, "the batch's write waiting on the lock")
    for _ in range(interrupts):
        server.send_signal(signal.SIGINT)
        time.sleep(0.5)
    time.sleep(serving.GRACE_S + 1)
    writer.execute("ROLLBACK")
    writer.close()
    assert server.wait(timeout=120) == 0, log.read_text()[-5000:]
    poster.join(timeout=120)
    output = log.read_text()
    for word in ("Traceback", "KeyboardInterrupt", "CancelledError"):
        assert word not in output, output[-5000:]
    # It could not answer before the grace period ended (the lock): closed without an
    # answer, although the batch was written meanwhile.
    assert len(answers) == 1 and isinstance(answers[0], str), answers

    with sqlite3.connect(database) as reader:
        assert reader.execute("SELECT count(*) FROM nodes").fetchone() == (BATCH,)

    serve(db, port, "again")
    retries = [httpx.post(url, json=batch, headers=auth, timeout=120) for _ in range(2)]
    assert [answer.status_code for answer in retries] == [200, 200]
    assert retries[0].json() == retries[1].json()
    with sqlite3.connect(database) as reader:
        assert reader.execute("SELECT count(*) FROM nodes").fetchone() == (BATCH,)


def test_the_access_log_at_info_leaves_out_quiet_agent_polls_and_keeps_the_rest(
    tmp_path: Path, serve
) -> None:
    db, port = f"sqlite:///{tmp_path / 's.db'}", free_port()
    agent, user = create_token(db, "agent"), create_token(db, "user")
    server, log = serve(db, port, "info", log_level="info")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        as_agent = {"Authorization": f"Bearer {agent}"}
        registered = client.post(
            "/v1/agents",
            json={"node": "n1", "host": "h-n1", "ports": [29500, 29501]},
            headers=as_agent,
        )
        assert registered.status_code in (200, 201), registered.text
        agent_id = registered.json()["agent_id"]
        for _ in range(3):
            r = client.get(f"/v1/agents/{agent_id}/commands?wait=0", headers=as_agent)
            assert r.status_code == 200, r.text
        r = client.post(f"/v1/agents/{agent_id}/heartbeat", json={}, headers=as_agent)
        assert r.status_code == 200, r.text
        refused = client.get(f"/v1/agents/{agent_id}/commands?wait=0")
        assert refused.status_code == 401
        r = client.get("/v1/jobs", headers={"Authorization": f"Bearer {user}"})
        assert r.status_code == 200, r.text
    wait_until(lambda: '"GET /v1/jobs HTTP/1.1" 200' in log.read_text(), 30, "logged")
    server.send_signal(signal.SIGINT)
    assert server.wait(timeout=60) == 0
    lines = log.read_text().splitlines()
    assert any('"POST /v1/agents HTTP/1.1" 20' in line for line in lines), lines
    assert any(f'/v1/agents/{agent_id}/commands?wait=0 HTTP/1.1" 401' in line for line in lines)
    assert not any(f'/v1/agents/{agent_id}/commands?wait=0 HTTP/1.1" 200' in line for line in lines)
    assert not any(f"/v1/agents/{agent_id}/heartbeat" in line for line in lines), lines
