"""A running ``interstice serve`` (a real subprocess, SQLite in a folder) with tokens per
role and simulated node agents over httpx: they acknowledge their commands and heartbeat
the progress of the job their node runs, as the real agent does
(docs/reference/agent-protocol.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from interstice.api.auth.tokens import create_token
from interstice.api.store import db as database

from interstice.ports import free_port

TABLE_CSV = """model,nodes,samples_per_s,spb_depth,progress_per_sample
tinycnn,1,100,0,1
tinycnn,2,190,0,1
tinycnn,4,360,0,1
"""


@dataclass
class Served:
    """The service's URL, its log, and a token per name (admin, user, other, scheduler,
    agent)."""

    url: str
    process: subprocess.Popen
    log: Path
    tokens: dict[str, str]

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=30, **kwargs)

    def ok(self, who: str, method: str, path: str, **kwargs: Any) -> Any:
        r = self.call(who, method, path, **kwargs)
        assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}"
        return r.json()


def serve(folder: Path, timeout_s: float = 120, env: dict[str, str] | None = None) -> Served:
    """Start ``interstice serve`` on a free port with its database in ``folder``; ``env``:
    settings (``INTERSTICE_...``) over this module's."""
    db_url = f"sqlite:///{folder / 'interstice.db'}"
    engine = database.make_engine(db_url)
    database.upgrade(engine)
    engine.dispose()
    db = database.Database(db_url)
    tokens = {
        name: create_token(db, role, name)
        for name, role in (
            ("admin", "admin"),
            ("user", "user"),
            ("other", "user"),
            ("scheduler", "scheduler"),
            ("agent", "agent"),
        )
    }
    db.dispose()
    (folder / "table.csv").write_text(TABLE_CSV)
    port = free_port()
    env = (
        os.environ
        | {
            "INTERSTICE_HEARTBEAT_INTERVAL_S": "1",
            "INTERSTICE_MISSED_HEARTBEATS_LOST": "60",  # a loaded machine may delay a beat
            "INTERSTICE_DEBOUNCE_S": "0.05",
            "INTERSTICE_SCALABILITY_CSV": str(folder / "table.csv"),
            "INTERSTICE_CHECKPOINT_ROOT": str(folder / "checkpoints"),
            "INTERSTICE_LOG_LEVEL": "warning",
        }
        | (env or {})
    )
    log = folder / "service.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", "from interstice.cli import app; app()", "serve"]
            + ["--db", db_url, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=folder,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"interstice serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return Served(url, process, log, tokens)
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise TimeoutError(f"interstice serve not healthy in {timeout_s} s")
        time.sleep(0.2)


def stop(served: Served) -> None:
    served.process.terminate()
    try:
        served.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        served.process.kill()
        served.process.wait()


@dataclass
class SimulatedAgents:
    """Agents of ``nodes`` in one background thread: every round each acknowledges its
    pending commands (``start``/``rescale`` set its job and generation, ``stop`` clears it)
    and heartbeats 50 more samples of its job at 190 samples/s."""

    served: Served
    nodes: list[str]
    ids: dict[str, str] = field(default_factory=dict)
    running: dict[str, dict[str, Any]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    errors: list[str] = field(default_factory=list)

    def start(self) -> None:
        for node in self.nodes:
            body = {"node": node, "host": f"h-{node}", "ports": [29500, 29501]}
            self.ids[node] = self.served.ok("agent", "POST", "/v1/agents", json=body)["agent_id"]
        self._thread = threading.Thread(target=self._loop, daemon=True, name="simulated-agents")
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        samples: dict[str, float] = {}
        while not self._stop.wait(0.3):
            try:
                for node, agent in self.ids.items():
                    self._round(node, agent, samples)
            except (httpx.HTTPError, AssertionError) as exc:  # kept for the test's message
                self.errors.append(repr(exc))

    def _round(self, node: str, agent: str, samples: dict[str, float]) -> None:
        commands = self.served.ok("agent", "GET", f"/v1/agents/{agent}/commands?wait=0")["data"]
        for c in commands:
            if c["kind"] == "stop":
                self.running.pop(node, None)
            else:
                self.running[node] = c
            path = f"/v1/agents/{agent}/commands/{c['command_id']}/ack"
            self.served.ok("agent", "POST", path, json={"ok": True})
        command = self.running.get(node)
        beat: dict[str, Any] = {}
        if command is not None:
            job = command["job_id"]
            samples[job] = samples.get(job, 0.0) + 50
            beat = {
                "job_id": job,
                "rendezvous_id": command["rendezvous_id"],
                "world_size": command["world_size"],
                "spb_depth": command["spb_depth"],
                "step": int(samples[job] // 10),
                "samples_done": samples[job],
                "samples_per_s": 190.0,
                "loss": 2.0 / (1 + samples[job] / 1000),
                "job_state": "running",  # its workers alive, as the real agent says
            }
        self.served.ok("agent", "POST", f"/v1/agents/{agent}/heartbeat", json=beat)
