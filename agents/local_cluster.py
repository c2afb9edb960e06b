"""A service and a few node agents on this machine, as subprocesses: for the end-to-end test
and the rescale benchmark.

It drives them only through their public interfaces: the ``interstice`` command line (token
creation, ``serve``, ``agent``) and the service's REST API (node events as the scheduler,
jobs as a user, the scalability table as an admin); what the workers did is read from their
step logs (``interstice.agents.rundir``).
"""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from interstice.agents.launcher import spare_ready

from interstice import wire
from interstice.ports import free_ports

ROLES = ("admin", "scheduler", "user", "agent")


def interstice_command() -> list[str]:
    """How to run the ``interstice`` command line with this interpreter."""
    return [sys.executable, "-c", "from interstice.cli import app; app()"]


@dataclass
class LocalAgent:
    """One ``interstice agent`` subprocess."""

    node: str
    workdir: Path
    process: subprocess.Popen
    ports: list[int]
    started_at: float = 0.0  # time.time() when the process was started


@dataclass
class LocalCluster:
    """A service on SQLite and ``len(nodes)`` agents on 127.0.0.1, under ``root``.

    Args:
        root: folder for the database, checkpoints, agents' workdirs and logs.
        nodes: node names, one agent each.
        heartbeat_s: the service's heartbeat interval, seconds.
        grace_s: each agent's grace after its preemption signal, seconds.
        checkpoint_every: workers checkpoint every this many steps.
        join_timeout_s: each agent's ``--join-timeout-s``: how long a generation's rendezvous
            waits for every node's launcher, seconds.
        scalability_csv: the table uploaded at start (must hold the jobs' models).
        service_env: more of the service's settings (``INTERSTICE_*`` variables).
    """

    root: Path
    nodes: list[str]
    heartbeat_s: float = 1.0
    grace_s: float = 10.0
    checkpoint_every: int = 20
    join_timeout_s: float = 30.0
    scalability_csv: str = ""
    service_env: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    agents: dict[str, LocalAgent] = field(default_factory=dict)
    service: subprocess.Popen | None = None
    url: str = ""

    def start(self, timeout_s: float = 60.0, register_timeout_s: float = 120.0) -> None:
        """Create the tokens :attr:`tokens` lacks (in ``root``'s database), start the
        service, upload the table, start every agent and wait until the service shows each
        one registered.

        An agent registers once its spare launcher is warm (torch imported: seconds, tens of
        seconds on a loaded machine), each at its own pace: a test that made nodes idle and
        submitted a job before would see it start on whichever node came first.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        db_url = f"sqlite:///{self.root / 'interstice.db'}"
        for role in ROLES:
            if role in self.tokens:  # made in the caller's process, which is faster
                continue
            created = subprocess.run(
                [*interstice_command(), "token", "create", "--role", role, "--db", db_url],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=True,
            )
            self.tokens[role] = created.stdout.strip().splitlines()[-1]
        (port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{port}"
        self._start_service(db_url, port, timeout_s)
        if self.scalability_csv:
            self.request(
                "admin",
                "PUT",
                "/v1/scalability",
                content=self.scalability_csv,
                headers={"Content-Type": "text/csv"},
            )
        for node in self.nodes:
            self.start_agent(node)
        self.wait_for(self.agents_registered, register_timeout_s, "every agent registered", 0.05)

    def _start_service(self, db_url: str, port: int, timeout_s: float) -> None:
        env = {
            **os.environ,
            "INTERSTICE_HEARTBEAT_INTERVAL_S": str(self.heartbeat_s),
            "INTERSTICE_CHECKPOINT_ROOT": str(self.root / "checkpoints"),
            "INTERSTICE_DEBOUNCE_S": "0.1",
            **self.service_env,
        }
        with (self.root / "service.log").open("ab") as log:
            self.service = subprocess.Popen(
                [*interstice_command(), "serve", "--db", db_url, "--port", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.root,
            )
        self._wait_healthy(timeout_s)

    def restart_service(self, down_s: float = 2.0, timeout_s: float = 60.0) -> None:
        """Stop the service (SIGTERM), leave it down ``down_s``, start it on the same
        database and port; the agents are left alone."""
        self._stop_service()
        time.sleep(down_s)
        self._start_service(
            f"sqlite:///{self.root / 'interstice.db'}", int(self.url.rpartition(":")[2]), timeout_s
        )

    def _stop_service(self) -> None:
        if self.service is not None and self.service.poll() is None:
            self.service.send_signal(signal.SIGTERM)
            try:
                self.service.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.service.kill()
                self.service.wait()

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.service is not None
            if self.service.poll() is not None:
                raise RuntimeError(f"service exited: {self.log_tail(self.root / 'service.log')}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"service not healthy in {timeout_s} s")

    def start_agent(self, node: str, *extra: str) -> LocalAgent:
        """Start the agent of ``node`` (two rendezvous ports of its own)."""
        workdir = self.root / "agents" / node
        workdir.mkdir(parents=True, exist_ok=True)
        ports = free_ports(2)
        # The nodes share this machine's cores: one thread per worker, or they thrash.
        env = {**os.environ, wire.ENV_AGENT_TOKEN: self.tokens["agent"], "OMP_NUM_THREADS": "1"}
        started_at = time.time()
        with (workdir / "agent.log").open("ab") as log:
            process = subprocess.Popen(
                [
                    *interstice_command(),
                    "agent",
                    "--server",
                    self.url,
                    "--node",
                    node,
                    "--host",
                    "127.0.0.1",
                    "--ports",
                    ",".join(map(str, ports)),
                    "--workdir",
                    str(workdir),
                    "--grace-s",
                    str(self.grace_s),
                    "--poll-wait-s",
                    "5",
                    "--join-timeout-s",
                    str(self.join_timeout_s),
                    "--checkpoint-every",
                    str(self.checkpoint_every),
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.agents[node] = LocalAgent(node, workdir, process, ports, started_at)
        return self.agents[node]

    def request(self, role: str, method: str, path: str, **kwargs: Any) -> Any:
        """One API call as ``role``; raises on an error answer."""
        headers = {"Authorization": f"Bearer {self.tokens[role]}", **kwargs.pop("headers", {})}
        response = httpx.request(method, self.url + path, headers=headers, timeout=30, **kwargs)
        response.raise_for_status()
        return response.json() if response.content else None

    def service_nodes(self, role: str = "scheduler") -> list[dict[str, Any]]:
        """Every node the service knows (``GET /v1/nodes``, all its pages) as ``role``."""
        return wire.all_pages(
            lambda cursor: self.request(
                role, "GET", "/v1/nodes", params={} if cursor is None else {"cursor": cursor}
            )
        )

    def node_events(self, state: str, nodes: list[str], grace_s: float = 0.0) -> datetime:
        """Post a scheduler event per node; returns the events' time ``at``."""
        at = datetime.now(UTC)
        events = [
            {
                "event_id": f"{node}-{state}-{at.timestamp()}",
                "node": node,
                "state": state,
                "at": at.isoformat(),
                "grace_s": grace_s,
            }
            for node in nodes
        ]
        self.request("scheduler", "POST", "/v1/nodes/events", json={"events": events})
        return at

    def wait_for(self, condition: Any, timeout_s: float, what: str, period_s: float = 0.1) -> Any:
        """Poll ``condition()`` until it returns a truthy value; TimeoutError names ``what``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(period_s)
        raise TimeoutError(f"not within {timeout_s} s: {what}\n{self.diagnostics()}")

    def agents_registered(self) -> bool:
        """Whether the service shows every agent of this cluster registered and alive."""
        agents = self.request("admin", "GET", "/v1/agents")["data"]
        alive = {agent["node"] for agent in agents if agent["state"] == "alive"}
        return alive >= set(self.agents)

    def spares_ready(self) -> bool:
        """Whether every agent's newest launcher is a ready, unused spare."""
        for agent in self.agents.values():
            logs = sorted((agent.workdir / "logs").glob("launcher-*.log"), key=_mtime)
            if not logs or not spare_ready(logs[-1]):
                return False
        return True

    def worker_records(self, job_id: str) -> list[dict[str, Any]]:
        """Every line every worker of ``job_id`` logged on every node, in time order."""
        records = []
        for agent in self.agents.values():
            for path in (agent.workdir / job_id).glob("steps-*.jsonl"):
                for line in path.read_text().splitlines():
                    try:
                        records.append({**json.loads(line), "log_node": agent.node})
                    except ValueError:
                        pass  # a line being written
        return sorted(records, key=lambda record: record["time"])

    def latest_world_size(self, job_id: str) -> int | None:
        """The world size of the latest step any worker of ``job_id`` logged."""
        steps = [r for r in self.worker_records(job_id) if r["event"] == "step"]
        return steps[-1]["world_size"] if steps else None

    @staticmethod
    def log_tail(path: Path, chars: int = 3000) -> str:
        """The end of a log file."""
        try:
            return path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def diagnostics(self) -> str:
        """The ends of the service's and agents' logs (for a failing test)."""
        parts = [f"--- service\n{self.log_tail(self.root / 'service.log')}"]
        for agent in self.agents.values():
            parts.append(f"--- agent {agent.node}\n{self.log_tail(agent.workdir / 'agent.log')}")
        return "\n".join(parts)

    def stop_agent(self, node: str, timeout_s: float = 30.0) -> int | None:
        """Send the agent of ``node`` SIGTERM and wait for it; its exit code."""
        agent = self.agents[node]
        if agent.process.poll() is None:
            agent.process.send_signal(signal.SIGTERM)
        try:
            return agent.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            agent.process.kill()
            return agent.process.wait()

    def close(self) -> None:
        """Stop every agent (SIGTERM, then SIGKILL) and the service."""
        for agent in self.agents.values():
            if agent.process.poll() is None:
                agent.process.send_signal(signal.SIGTERM)
        for node in self.agents:
            self.stop_agent(node, timeout_s=self.grace_s + 5)
        self._stop_service()

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
