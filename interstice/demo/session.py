"""One demo run, start to end: plan the replay, start the service and the agents (real and
simulated), submit the example jobs, replay the trace with a live view, then stop everything
it started and print the summary (a table, then one JSON line).

Run by ``interstice demo`` as ``python -m interstice.demo.session OPTIONS_JSON`` in a
session of its own, so that a terminal's Ctrl-C reaches only ``interstice demo``, which asks
this process to end (SIGTERM); the service, agents and workers then stop in order rather
than all at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from rich.console import Console
from rich.live import Live

import interstice.examples
from interstice.agents.local_cluster import ROLES, LocalCluster
from interstice.client_cli import read_job_file
from interstice.data import TRACE_FILE
from interstice.demo.jobs import ExampleJobs
from interstice.demo.plan import ReplayPlan, plan_replay
from interstice.demo.scheduler import SchedulerStandIn
from interstice.demo.summary import final_summary, live_view, reclaim_outcomes, summary_table
from interstice.demo.virtual import (
    HEARTBEATS_PER_S,
    SimulatedAgentsFailed,
    VirtualAgents,
    service_env,
    simulated_heartbeat_s,
)
from interstice.ports import free_ports
from interstice.replay.trace import load_trace

HEARTBEAT_S = 2.0
"""The service's heartbeat interval, seconds (an agent is lost after three), up to
:data:`~interstice.demo.virtual.HEARTBEATS_PER_S` x 2 s simulated agents; longer with more
of them."""
MAX_HEARTBEAT_S = 10.0
"""The longest heartbeat interval, seconds (the real agents' progress reaches the service
at each heartbeat)."""
AGENT_GRACE_S = 10.0
"""Each real agent's own grace after SIGTERM, seconds (the end of the demo)."""
MIN_IDLE_S = 20.0
"""Real seconds a node must stay idle for a job to start and train on it on a small VM."""
START_TIMEOUT_S = 180.0
"""Most seconds the service, the agents and their spare launchers may take to start."""
REFRESH_S = 1.0
"""Period of the live view, seconds."""
EXAMPLES = Path(interstice.examples.__file__).parent
"""The example job files (``<name>.toml``), installed with the package."""


def heartbeat_s(virtual_nodes: int) -> float:
    """The service's heartbeat interval for ``virtual_nodes`` simulated agents, seconds
    (beyond :data:`MAX_HEARTBEAT_S` x 25 of them, theirs is longer:
    :func:`~interstice.demo.virtual.simulated_heartbeat_s`)."""
    return min(MAX_HEARTBEAT_S, max(HEARTBEAT_S, virtual_nodes / HEARTBEATS_PER_S))


@dataclass(frozen=True)
class DemoOptions:
    """The flags of ``interstice demo`` (validated there).

    Attributes:
        agents: real local agents (CPU, gloo).
        speedup: trace seconds per real second.
        duration_s: real seconds of replay.
        virtual_nodes: simulated agents.
        jobs: the job files to submit (absolute paths; an example's is
            ``examples/<name>.toml``), each shown by its name without ``.toml``.
        port: the service's port; 0: a free one.
        seed: draws the trace window among the best.
        grace_s: grace of every reclaim, seconds.
        trace: the node-state trace file.
        synthetic: whether ``trace`` is the synthetic one the package ships.
        keep: the folder the job folders move to at the end; None: they are deleted.
    """

    agents: int
    speedup: float
    duration_s: float
    virtual_nodes: int
    jobs: tuple[str, ...]
    port: int
    seed: int
    grace_s: float
    trace: str
    synthetic: bool = False
    keep: str | None = None


class Descendants:
    """Every process below this one seen so far (an agent's workers may outlive it)."""

    def __init__(self) -> None:
        self.seen: dict[int, psutil.Process] = {}

    def scan(self) -> None:
        """Remember this process's current descendants."""
        for child in psutil.Process().children(recursive=True):
            self.seen.setdefault(child.pid, child)

    def stop_left(self, timeout_s: float = 5.0) -> int:
        """Terminate, then kill, the remembered processes still running; how many there
        were. (``is_running`` compares creation times, so a reused pid is left alone.)"""
        left = [p for p in self.seen.values() if _alive(p)]
        for process in left:
            try:
                process.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(left, timeout=timeout_s)
        for process in alive:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=timeout_s)
        return len(left)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Interrupted(Exception):
    """A signal came while the demo was starting."""


def machine() -> str:
    """This machine in a few words: OS, CPU model and count, memory."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    memory_gb = psutil.virtual_memory().total / 2**30
    cpus = f"{os.cpu_count()} x {model}"
    return f"{platform.system()} {platform.machine()}, {cpus}, {memory_gb:.0f} GiB"


def create_tokens(cluster: LocalCluster) -> str:
    """Create ``cluster``'s database and a token per role in it (:func:`migrated_with_tokens`);
    the database URL."""
    cluster.root.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{cluster.root / 'interstice.db'}"
    cluster.tokens.update(migrated_with_tokens(db_url, ROLES, "demo-"))
    return db_url


def migrated_with_tokens(db_url: str, roles: Iterable[str], prefix: str = "") -> dict[str, str]:
    """Migrate the database at ``db_url`` and create a token per role of ``roles`` in it,
    named ``prefix + role``, in this process (one ``interstice token create`` per role took a
    few seconds each on a loaded 2-core VM): role -> token."""
    from interstice.api.auth.tokens import create_token
    from interstice.api.store import db

    database = db.Database(db_url)
    try:
        db.upgrade(database.engine)
        return {role: create_token(database, role, f"{prefix}{role}") for role in roles}
    finally:
        database.dispose()


def start_service(cluster: LocalCluster, db_url: str, port: int) -> None:
    """``cluster``'s service on ``port`` (0: a free one), once it answers ``/healthz``."""
    port = port or free_ports(1)[0]
    cluster.url = f"http://127.0.0.1:{port}"
    cluster._start_service(db_url, port, START_TIMEOUT_S)


def submit_job_file(cluster: LocalCluster, path: str) -> str:
    """Submit the job file ``path`` as the user; the job's id."""
    document = read_job_file(Path(path))
    return cluster.request("user", "POST", "/v1/jobs", json=document)["job_id"]


def job_name(path: str) -> str:
    """How the demo shows a job file: its name without ``.toml``."""
    return Path(path).stem


def trace_lines(options: DemoOptions) -> list[str]:
    """The run's first lines: which trace it replays and, for the synthetic one, how to give
    it the real one."""
    if Path(options.trace).name == TRACE_FILE:
        return [f"Trace: Summit's, real (BFTrainer's public replay data): {options.trace}"]
    if not options.synthetic:
        return [f"Trace: {options.trace}"]
    return [
        "Trace: SYNTHETIC, shipped with interstice and drawn to match the Summit trace's "
        f"published idle figures: {options.trace}",
        f"For the real Summit trace ({TRACE_FILE}): give --trace FILE or set "
        "$INTERSTICE_DATA_DIR to its folder (docs/demo.md says where it comes from).",
    ]


def keep_job_folders(checkpoint_root: Path, keep: Path) -> None:
    """Move every job folder (``<checkpoint_root>/<job_id>``) into ``keep``.

    Raises:
        OSError: a move failed (what was not moved stays under ``checkpoint_root``).
    """
    if checkpoint_root.is_dir():
        for folder in sorted(checkpoint_root.iterdir()):
            shutil.move(folder, keep / folder.name)


class Demo:
    """The parts of one run and their order (see the module docstring)."""

    def __init__(self, options: DemoOptions, console: Console) -> None:
        self.options, self.console = options, console
        self.stop = threading.Event()
        self.descendants = Descendants()
        self.root = Path(tempfile.mkdtemp(prefix="interstice-demo-"))
        self.plan: ReplayPlan | None = None
        self.cluster: LocalCluster | None = None
        self.virtual: VirtualAgents | None = None
        self.scheduler: SchedulerStandIn | None = None
        self.db_url = ""
        self.jobs: ExampleJobs | None = None
        self.error: str | None = None
        self.replayed_s = 0.0

    def on_signal(self, signum: int, frame: object) -> None:
        """SIGTERM/SIGINT: end the run cleanly (the main loop sees the flag)."""
        self.stop.set()

    def run(self) -> int:
        """The whole run; the exit code (0 clean, 1 an error on the way)."""
        jobs: list[dict[str, Any]] = []
        stats: dict[str, Any] | None = None
        try:
            self.start()
            self.replay()
            jobs, stats = self.finish()
        except Interrupted:
            pass
        except Exception as error:  # reported in the summary; everything is stopped below
            self.error = f"{type(error).__name__}: {' '.join(str(error).split())}"[:2000]
        finally:
            processes_left = self.shutdown()
        outcomes = []
        if self.scheduler is not None and self.db_url:
            outcomes = reclaim_outcomes(self.db_url, self.scheduler.reclaims)
        kept = None
        if self.options.keep is not None:
            try:
                keep_job_folders(self.root / "checkpoints", Path(self.options.keep))
                kept = self.options.keep
            except OSError as error:  # the run's folder is then kept whole, below
                self.error = self.error or f"keeping the job folders: {error}"
        summary = final_summary(
            machine=machine(),
            duration_s=self.replayed_s,
            speedup=self.options.speedup,
            grace_s=self.options.grace_s,
            trace=self.options.trace,
            synthetic=self.options.synthetic,
            trace_window=str(self.plan.window_start) if self.plan else "-",
            real_nodes=list(self.plan.nodes) if self.plan else [],
            virtual_nodes=self.options.virtual_nodes,
            jobs=jobs,
            job_names=self.job_names(),
            stats=stats,
            outcomes=outcomes,
            processes_left=processes_left,
            kept=kept,
            error=self.error,
        )
        self.console.print(summary_table(summary))
        if self.error is None:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            self.console.print(f"logs kept in {self.root}")
        print(json.dumps(summary), flush=True)
        return 0 if self.error is None else 1

    def job_names(self) -> dict[str, str]:
        """``{job_id: name}`` of every job the run submitted."""
        return {} if self.jobs is None else {k: job_name(v) for k, v in self.jobs.names.items()}

    def start(self) -> None:
        """Plan, then start the service, the agents and the jobs."""
        options = self.options
        for line in trace_lines(options):  # one line each, even into a file
            self.console.print(line, markup=False, soft_wrap=True)
        with self.console.status("Reading the node-state trace..."):
            trace = load_trace(Path(options.trace))
            self.plan = plan_replay(
                trace,
                options.agents,
                options.duration_s,
                options.speedup,
                MIN_IDLE_S,
                tail_s=options.grace_s + 2 * HEARTBEAT_S,  # the same plan for any --virtual-nodes
                seed=options.seed,
            )
        self.check_stop()
        taken = set(self.plan.nodes)
        virtual_nodes = [str(n) for n in trace.node_names if n not in taken]
        # a trace smaller than the simulated machine: named nodes of its own beyond it
        virtual_nodes += [f"sim{i:04d}" for i in range(options.virtual_nodes - len(virtual_nodes))]
        virtual_nodes = virtual_nodes[: options.virtual_nodes]
        self.console.print(
            f"Replaying {options.duration_s:g} s = {self.plan.window_s / 3600:.1f} h of the "
            f"{'synthetic' if options.synthetic else 'Summit'} trace "
            f"from {self.plan.window_start} at {options.speedup:g}x on nodes "
            f"{', '.join(self.plan.nodes)} ({self.plan.usable_reclaims} usable reclaims)"
        )
        service_heartbeat_s = heartbeat_s(options.virtual_nodes)
        self.cluster = LocalCluster(
            self.root,
            list(self.plan.nodes),
            heartbeat_s=service_heartbeat_s,
            grace_s=AGENT_GRACE_S,
            service_env=service_env(len(virtual_nodes), service_heartbeat_s),
        )
        with self.console.status("Starting the service..."):
            self.db_url = create_tokens(self.cluster)
            self.check_stop()
            start_service(self.cluster, self.db_url, options.port)
            self.check_stop()
        self.console.print(
            f"Dashboard: [bold]{self.cluster.url}/ui[/bold]   admin token: "
            f"[bold]{self.cluster.tokens['admin']}[/bold]"
        )
        with self.console.status(f"Starting {options.agents} agents..."):
            for node in self.plan.nodes:
                self.cluster.start_agent(node)
            self.descendants.scan()
            self.wait_for(self.agents_alive, "the agents registered")
            self.wait_for(self.cluster.spares_ready, "the agents' launchers warmed up")
            self.descendants.scan()
        if virtual_nodes:
            self.start_virtual(virtual_nodes)
        cluster = self.cluster
        self.jobs = ExampleJobs(lambda path: submit_job_file(cluster, path), options.duration_s)
        copies = self.jobs.start(options.jobs)
        self.console.print(
            "Submitted " + ", ".join(f"{job_name(c.name)} as {c.job_id}" for c in copies)
        )
        self.scheduler = SchedulerStandIn(
            self.plan,
            lambda events: self.cluster.request(
                "scheduler", "POST", "/v1/nodes/events", json={"events": events}
            )["data"],
            options.grace_s,
            virtual_nodes,
        )

    def start_virtual(self, nodes: list[str]) -> None:
        """Register a simulated agent per node of ``nodes``; say how long it took.

        Raises:
            SimulatedAgentsFailed: not all registered (the message, also printed, says why).
        """
        assert self.cluster is not None
        agents_heartbeat_s = simulated_heartbeat_s(len(nodes), self.cluster.heartbeat_s)
        started = time.monotonic()
        with self.console.status(f"Registering {len(nodes)} simulated agents..."):
            self.virtual = VirtualAgents(
                self.cluster.url, self.cluster.tokens["agent"], nodes, agents_heartbeat_s
            )
            self.virtual.start()
            try:
                self.virtual.wait_registered(START_TIMEOUT_S)
            except SimulatedAgentsFailed as failed:
                line = f"Simulated agents failed: {failed}"
                self.console.print(line, markup=False, soft_wrap=True)
                raise
        self.check_stop()
        self.console.print(
            f"{len(nodes)} simulated agents registered in {time.monotonic() - started:.0f} s; "
            f"they heartbeat every {agents_heartbeat_s:g} s, the real agents every "
            f"{self.cluster.heartbeat_s:g} s"
        )

    def check_stop(self) -> None:
        """Raise ``Interrupted`` when a signal came (between the steps of the start)."""
        if self.stop.is_set():
            raise Interrupted

    def agents_alive(self) -> bool:
        """Whether every real agent registered and is alive."""
        assert self.cluster is not None and self.plan is not None
        agents = self.cluster.request("admin", "GET", "/v1/agents")["data"]
        alive = {a["node"] for a in agents if a["state"] == "alive"}
        return alive >= set(self.plan.nodes)

    def wait_for(self, condition: Any, what: str) -> None:
        """Poll ``condition`` until true.

        Raises:
            TimeoutError: not within :data:`START_TIMEOUT_S`.
            RuntimeError: an agent or the service exited.
            Interrupted: a signal came.
        """
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.stop.is_set():
            self.check_processes()
            if condition():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {START_TIMEOUT_S:.0f} s: {what}")
            self.stop.wait(0.5)
        raise Interrupted

    def check_processes(self) -> None:
        """Raise ``RuntimeError`` when the service or an agent exited."""
        assert self.cluster is not None
        if self.cluster.service is not None and self.cluster.service.poll() is not None:
            raise RuntimeError(f"the service exited with code {self.cluster.service.returncode}")
        for agent in self.cluster.agents.values():
            if agent.process.poll() is not None:
                raise RuntimeError(
                    f"the agent of {agent.node} exited with code {agent.process.returncode}"
                )

    def replay(self) -> None:
        """Replay the trace with the live view until the duration, a signal or an error;
        submit again each example job that finished while the run has time for it."""
        assert self.cluster is not None and self.scheduler is not None and self.plan
        assert self.jobs is not None
        self.scheduler.start()
        live = Live(console=self.console, auto_refresh=False, transient=False)
        last_print = 0.0
        with live if self.console.is_terminal else contextlib.nullcontext():
            while not self.stop.wait(REFRESH_S):
                elapsed_s = self.scheduler.elapsed_s()
                if elapsed_s >= self.options.duration_s:
                    break
                self.check_processes()
                if self.scheduler.error is not None:
                    raise RuntimeError(f"posting node events: {self.scheduler.error}")
                self.descendants.scan()
                jobs = self.cluster.request("admin", "GET", "/v1/jobs")["data"]
                self.jobs.update(jobs, elapsed_s)  # a new copy shows from the next refresh
                view = self.view(elapsed_s, jobs)
                if self.console.is_terminal:
                    live.update(view, refresh=True)
                elif time.monotonic() - last_print >= 10:
                    self.console.print(view)
                    last_print = time.monotonic()

    def view(self, elapsed_s: float, jobs: list[dict[str, Any]]) -> Any:
        """The live view now, with ``jobs`` from ``GET /v1/jobs``."""
        assert self.cluster is not None and self.scheduler is not None and self.plan
        assert self.jobs is not None
        nodes = self.cluster.service_nodes("admin")
        trace_at = self.plan.window_start + np.timedelta64(int(elapsed_s * self.plan.speedup), "s")
        return live_view(
            elapsed_s=elapsed_s,
            duration_s=self.options.duration_s,
            trace_time=str(trace_at),
            nodes=nodes,
            real_nodes=list(self.plan.nodes),
            virtual_nodes=self.options.virtual_nodes,
            jobs=jobs,
            job_names=self.job_names(),
            events_posted=self.scheduler.posted,
            reclaims=len(self.scheduler.reclaims),
            simulated_failures=self.virtual.failures.line() if self.virtual else "",
        )

    def finish(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """Stop the replay, let the last reclaims' grace run out (also after a signal: at
        most ``grace_s``), read jobs and stats."""
        if self.cluster is None or self.scheduler is None:
            return [], None
        self.scheduler.stop()
        self.replayed_s = self.scheduler.elapsed_s()
        if self.scheduler.reclaims:
            last = max(r.deadline for r in self.scheduler.reclaims) + timedelta(seconds=1)
            time.sleep(max(0.0, (last - datetime.now(UTC)).total_seconds()))
        jobs = self.cluster.request("admin", "GET", "/v1/jobs")["data"]
        since = self.scheduler.started_at.isoformat() if self.scheduler.started_at else None
        stats = self.cluster.request("admin", "GET", "/v1/stats", params={"since": since})
        return jobs, stats

    def shutdown(self) -> int:
        """Stop the simulated agents, the real ones (SIGTERM, then SIGKILL), the service,
        and whatever of theirs is left; how many processes had to be stopped that way."""
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.virtual is not None:
            self.virtual.stop()
        if self.cluster is not None:
            self.descendants.scan()
            self.cluster.close()
        return self.descendants.stop_left()


def main(options_json: str) -> int:
    """Run the demo with options from ``interstice demo``; the exit code."""
    options = DemoOptions(**json.loads(options_json))
    console = Console(highlight=False)
    if not console.is_terminal:  # a log file: wide lines rather than wrapped ones
        console = Console(highlight=False, width=140)
    demo = Demo(options, console)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, demo.on_signal)
    return demo.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
