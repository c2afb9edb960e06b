"""``kill -9`` of a real ``interstice serve`` process, then a restart on the same database:
every job, node state, allocation, pending command and audit row is still there, and an
agent's long-poll resumes and gets its command."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_helpers import ROLES, SCALABILITY_CSV, free_port, interstice_executable
from interstice.api.auth.tokens import create_token
from interstice.api.store.db import Database
from typer.testing import CliRunner

from interstice.cli import app

INTERSTICE = interstice_executable()


def _token(db_url: str, role: str) -> str:
    """``interstice token create`` (in this process), which also migrates the database."""
    done = CliRunner().invoke(app, ["token", "create", "--role", role, "--db", db_url])
    assert done.exit_code == 0, done.output
    return done.stdout.strip()


class Server:
    """``interstice serve`` in a subprocess."""

    def __init__(self, db_url: str, folder: Path) -> None:
        self.db_url, self.folder = db_url, folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = os.environ | {
            "INTERSTICE_SCALABILITY_CSV": str(self.folder / "table.csv"),
            "INTERSTICE_DEBOUNCE_S": "0.05",
            "INTERSTICE_CHECKPOINT_ROOT": str(self.folder / "checkpoints"),
            "INTERSTICE_LOG_LEVEL": "warning",
        }
        self.process = subprocess.Popen(
            [INTERSTICE, "serve", "--db", self.db_url, "--port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "serve.log", "ab"),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError(f"serve did not start: {(self.folder / 'serve.log').read_text()}")

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill9()


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "table.csv").write_text(SCALABILITY_CSV)
    running = Server(db_url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def _snapshot(c: httpx.Client, pending_agent: str) -> dict:
    """Jobs, nodes, audit, objective and one agent's pending commands."""
    return {
        "jobs": c.get("/v1/jobs", headers=c.h["admin"]).json(),
        "nodes": c.get("/v1/nodes", headers=c.h["admin"]).json(),
        "audit": c.get("/v1/audit", headers=c.h["admin"]).json(),
        "objective": c.get("/v1/objective", headers=c.h["admin"]).json(),
        "pending": c.get(
            f"/v1/agents/{pending_agent}/commands", params={"wait": 0}, headers=c.h["agent"]
        ).json(),
    }


def _settled_snapshot(c: httpx.Client, pending_agent: str) -> dict:
    """A snapshot once the control loop has stopped changing things (two equal in a row)."""
    previous = _snapshot(c, pending_agent)
    for _ in range(40):
        time.sleep(0.5)
        current = _snapshot(c, pending_agent)
        if current == previous:
            return current
        previous = current
    raise AssertionError("the allocation did not settle in 20 s")


@pytest.mark.slow
def test_kill9_restart_keeps_every_row_and_long_polls_resume(server: Server) -> None:
    tokens = {"admin": _token(server.db_url, "admin")}  # the CLI path, once
    database = Database(server.db_url)
    tokens |= {role: create_token(database, role, role) for role in ROLES if role != "admin"}
    database.dispose()
    server.start()
    c = httpx.Client(base_url=server.url, timeout=40)
    c.h = {r: {"Authorization": f"Bearer {t}"} for r, t in tokens.items()}  # type: ignore[attr-defined]
    agents = {}
    for node in ("n1", "n2", "n3"):
        r = c.post(
            "/v1/agents",
            headers=c.h["agent"],
            json={"node": node, "host": f"h-{node}", "ports": [29500]},
        )
        agents[node] = r.json()["agent_id"]
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    events = [
        {"event_id": f"e-{n}", "node": n, "state": s, "at": at}
        for n, s in (("n1", "idle"), ("n2", "idle"), ("n3", "busy"))
    ]
    assert c.post("/v1/nodes/events", headers=c.h["scheduler"], json={"events": events}).is_success
    c.put("/v1/objective", headers=c.h["admin"], json={"horizon_s": 900})
    first = c.post(
        "/v1/jobs",
        headers=c.h["user"],
        json={"model": "tinycnn", "min_nodes": 1, "max_nodes": 2, "total_samples": 1e6},
    ).json()
    # answered at the start's write; a bound only (the first solve waits for the solver
    # process's start, over 10 s on a loaded 2-core machine), under the client's 40 s
    started = c.get(
        f"/v1/agents/{agents['n1']}/commands", params={"wait": 30}, headers=c.h["agent"]
    ).json()["data"]
    assert [x["kind"] for x in started] == ["start"]
    c.post(
        f"/v1/agents/{agents['n1']}/commands/{started[0]['command_id']}/ack",
        headers=c.h["agent"],
        json={"ok": True},
    )
    c.post(
        f"/v1/agents/{agents['n1']}/heartbeat",
        headers=c.h["agent"],
        json={"job_id": first["job_id"], "samples_done": 1234, "step": 7, "loss": 0.5},
    )
    second = c.post(
        "/v1/jobs",
        headers=c.h["user"],
        json={"model": "tinycnn", "min_nodes": 1, "max_nodes": 1, "total_samples": 1e6},
    ).json()
    before = _settled_snapshot(c, agents["n2"])
    # n2's commands of the newest generation, never acknowledged: its first start was
    # superseded when the second job's solve moved n2 (to the second job, or within the first)
    # (or, when the second job is not admitted while the first can use both nodes, the
    # first start, still pending)
    assert [x["kind"] for x in before["pending"]["data"]] in (
        ["stop", "start"],
        ["rescale"],
        ["start"],
    )
    assert {j["job_id"] for j in before["jobs"]["data"]} == {first["job_id"], second["job_id"]}
    assert before["jobs"]["data"][1]["samples_done"] == 1234
    assert before["jobs"]["data"][1]["last_loss"] == 0.5
    series = c.get(f"/v1/jobs/{first['job_id']}/metrics", headers=c.h["user"]).json()
    assert [(m["step"], m["loss"]) for m in series["data"]] == [(7, 0.5)]
    changes = [e for e in before["audit"]["data"] if e["action"] != "token.create"]
    assert len(changes) == 1  # (the four tokens' creations are audited too)

    # n3's agent long-polls while the service dies
    polled: list = []

    def long_poll() -> None:
        for _ in range(200):  # reconnect, as an agent does, until a command arrives
            try:
                r = httpx.get(
                    f"{server.url}/v1/agents/{agents['n3']}/commands",
                    params={"wait": 20},
                    headers=c.h["agent"],
                    timeout=30,
                )
                if r.status_code == 200 and r.json()["count"]:
                    polled.extend(r.json()["data"])
                    return
            except httpx.HTTPError:
                time.sleep(0.1)

    poller = threading.Thread(target=long_poll)
    poller.start()
    time.sleep(0.5)
    server.kill9()
    server.start()
    after = _snapshot(c, agents["n2"])
    assert after == before
    assert c.get(f"/v1/jobs/{first['job_id']}/metrics", headers=c.h["user"]).json() == series

    # n3 becomes idle: a job gets it, and the resumed long-poll answers
    idle = [{"event_id": "e-n3-idle", "node": "n3", "state": "idle", "at": at}]
    c.post("/v1/nodes/events", headers=c.h["scheduler"], json={"events": idle})
    poller.join(timeout=30)
    assert [x["kind"] for x in polled] == ["start"]
    assert polled[0]["job_id"] in (first["job_id"], second["job_id"])
