"""The node agent: registers this node with the service, heartbeats, runs its commands.

Threads, each a loop bounded by the agent's shutdown event:

- commands: long-polls for commands and queues each new command (delivery is at least
  once: a command seen before is not run twice; a finished one is acked again). With a
  service of protocol version 3 or later each poll carries the heartbeat
  (``POST /agents/{id}/poll``, waiting at most a heartbeat interval): one request per poll;
  with an older one it is ``GET /agents/{id}/commands`` and the heartbeat thread posts;
- executor: runs the queued commands one at a time (start, rescale, stop) and acks a start
  or rescale once this node's workers joined the new rendezvous (or failed to); when a
  generation's launcher exits (a failure, the job's end, a stop) it heartbeats at once, so
  a failed job is failed without waiting for the next heartbeat;
- heartbeat (protocol version 2 services): every ``heartbeat_interval_s`` posts what the
  workers last reported
  (``interstice.elastic.report``'s progress files) and how torch elastic says their
  generation ended: ``job_state: finished`` when every worker exited 0 with no stop asked,
  ``failed`` (with the failing rank's last log lines) when one exited non-zero.

A 404 from the service means it forgot this agent (a restart on a fresh database): the agent
registers again (idempotent for the service). While the service is down every call is
retried with backoff; the workers keep training meanwhile.

An agent that runs as root says at registration that it runs jobs as their owners
(``runs_as_owner``, :func:`interstice.agents.owner.runs_jobs_as_owners`): in multi-user mode
the service allocates jobs only to such agents.

Before it registers, the agent starts its spare launcher (torch imported ahead, see
:mod:`interstice.agents.launcher`) and waits until it is warm, at most
``AgentConfig.warm_before_register_s``: registering makes the node allocatable (with
``--report-idle``, idle at once), and a node a placeholder has just filled is worth most in
its first seconds, so its first start must not wait for torch's import (15-30 s on a loaded
2-core machine; a rescale takes 2-3 s). A spare that exits during its warm-up (torch
missing) ends the wait at once. An agent whose spare is not warm registers with that
``fault``, and so does one whose launch fails for a reason of the node (the launcher cannot
start, the owner is unknown here, a full disk: its ack says ``node_fault``): the service
quarantines the node, which gets no job until the agent's health check passes and it
registers again without the fault (:mod:`interstice.agents.health`).

The preemption signal (SIGTERM by default, configurable; not SIGUSR1, which NCCL may use)
makes the main thread stop the workers (they checkpoint and exit), kill what is left at
``grace_s - KILL_MARGIN_S``, leave the service (``DELETE /agents/{id}``: the node is
released) and exit, all within the grace period.
"""

import logging
import math
import queue
import signal
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from interstice.agents import health, outcome, rundir
from interstice.agents.client import ServiceClient, ServiceRejected, ServiceUnavailable
from interstice.agents.generation import Generation, workers_alive
from interstice.agents.launch_config import NodeSettings
from interstice.agents.launcher import Launcher
from interstice.agents.owner import runs_jobs_as_owners
from interstice.agents.protocol import BadCommand, Command, parse_command
from interstice.agents.stopping import end_generation, kill

from interstice import wire

log = logging.getLogger("interstice.agent")

KILL_MARGIN_S = 1.0  # workers still alive this long before a deadline are killed
LEAVE_MIN_S = 0.5  # time always left for DELETE /agents/{id} on the way out
STOP_TIMEOUT_S = 60.0  # a rescale without a deadline waits this long for the old workers
PENDING_POLL_S = 0.25  # poll period while the only pending commands are ours, running
SPARE_AFTER_JOIN_S = 5.0  # the next spare launcher starts at the new workers' first step, or
# this long after they joined (a script that never reports): its imports (seconds of CPU)
# would slow the workers' own start


@dataclass(frozen=True)
class AgentConfig:
    """Everything ``interstice agent`` is told on its command line (see its --help)."""

    server: str | tuple[str, ...]  # one URL, or the URLs of the service's replicas
    token: str
    node: str
    host: str
    ports: list[int]
    workdir: Path
    report_idle: bool = False
    nproc_per_node: int = 1
    devices: tuple[str, ...] = ()
    preempt_signal: signal.Signals = signal.SIGTERM
    grace_s: float = 30.0
    heartbeat_s: float | None = None
    poll_wait_s: float = 20.0
    join_timeout_s: float = 60.0
    checkpoint_every: int = 50
    warm_before_register_s: float = 60.0  # longest wait for the spare launcher's warm-up


class Agent:
    """One node's agent (see the module docstring for its threads).

    Args:
        config: the agent's settings.
        client: the service client (tests pass one over a mock transport).
    """

    def __init__(self, config: AgentConfig, client: ServiceClient | None = None) -> None:
        self.config = config
        self.client = client or ServiceClient(config.server, config.token)
        self.launcher = Launcher(
            NodeSettings(
                workdir=config.workdir,
                node=config.node,
                host=config.host,
                ports=config.ports,
                nproc_per_node=config.nproc_per_node,
                join_timeout_s=config.join_timeout_s,
                worker_args=("--checkpoint-every", str(config.checkpoint_every)),
                secrets=(config.token,),
            )
        )
        self.shutdown = threading.Event()
        self._signalled_at: float | None = None
        self.agent_id: str | None = None
        self.health = health.Health()
        self._max_backoff_s = self.client.max_backoff_s
        self._beat_every(config.heartbeat_s or 5.0)
        self.protocol_version = 2
        """The newest protocol version the service speaks (its registration's answer)."""
        self.beat_in_poll = False
        """Whether the service takes the heartbeat with the long-poll (protocol >= 3)."""
        self.generation: Generation | None = None
        self._pending_ack: Generation | None = None
        self._end_reported: Generation | None = None  # its end was heartbeated at once
        self._spare_due: float | None = None  # monotonic time of the next spare's start
        self._commands: queue.Queue[dict[str, Any]] = queue.Queue()
        self._seen: set[int] = set()
        self._acked: dict[int, tuple[bool, str | None, bool, bool]] = {}
        self._register_lock = threading.Lock()
        self._generation_lock = threading.Lock()

    # -- life cycle ---------------------------------------------------------------------

    def run(self) -> int:
        """Register, serve commands until the preemption signal (or SIGINT), then leave.

        Returns:
            The process exit code (0).
        """
        for signum in {self.config.preempt_signal, signal.SIGINT}:
            signal.signal(signum, self._on_signal)
        self.join_service()
        threads = [
            threading.Thread(target=loop, name=loop.__name__, daemon=True)
            for loop in (self._poll_loop, self._execute_loop, self._heartbeat_loop)
        ]
        for thread in threads:
            thread.start()
        while not self.shutdown.wait(0.2):
            pass
        self._leave((self._signalled_at or time.monotonic()) + self.config.grace_s)
        return 0

    def join_service(self) -> None:
        """Warm the spare launcher up, then register (see the module docstring): the node
        becomes allocatable once a start would find torch imported; after
        ``warm_before_register_s``, or at once when the spare exits, the agent registers with
        the fault, so the node is quarantined until its health check passes. Nothing is
        registered when the shutdown comes first."""
        self.launcher.warm()
        started = time.monotonic()
        warm = self.launcher.wait_ready(self.config.warm_before_register_s, self.shutdown.is_set)
        if self.shutdown.is_set():
            return
        waited_s = time.monotonic() - started
        if warm:
            log.info("spare launcher warm in %.1f s: registering", waited_s)
        else:
            fault = self.launcher.spare_failure()
            if fault is not None:
                self.launcher.close_spare()  # exited: the health check starts a fresh one
            else:
                fault = f"its launcher is not warm after {waited_s:.0f} s (still importing torch)"
            log.warning("registering with a fault (the node is quarantined): %s", fault)
            self.health.failed(fault)
        self._register()

    def _on_signal(self, signum: int, frame: object) -> None:
        self._signalled_at = time.monotonic()
        self.shutdown.set()

    def _leave(self, grace_ends: float) -> None:
        """Stop the workers, release the node and close, all before ``grace_ends``."""
        log.info("leaving: stopping workers, releasing node %s", self.config.node)
        # The executor lets go of the lock within a poll tick once shutdown is set.
        locked = self._generation_lock.acquire(timeout=1.0)
        try:
            if self.generation is not None:
                self._end_generation(self.generation, grace_ends - KILL_MARGIN_S - LEAVE_MIN_S)
        finally:
            if locked:
                self._generation_lock.release()
        self.launcher.close_spare()
        if self.agent_id is not None:
            try:
                self.client.leave(
                    self.agent_id, give_up_after_s=max(0.2, grace_ends - time.monotonic() - 0.3)
                )
            except (ServiceRejected, ServiceUnavailable) as error:
                log.warning("could not release the node: %s", error)
        self.client.close()

    def _register(self) -> None:
        """Register (again) with the service, retrying until it answers or shutdown."""
        body = {
            "node": self.config.node,
            "host": self.config.host,
            "ports": self.config.ports,
            "devices": list(self.config.devices),
            "report_idle": self.config.report_idle,
        }
        if runs_jobs_as_owners():
            # said only when true: a service older than the field refuses unknown fields,
            # and one that knows it reads its absence as false
            body["runs_as_owner"] = True
        if self.health.fault is not None:  # (the same: said only when there is one)
            body["fault"] = self.health.fault
        with self._register_lock:
            try:
                answer = self.client.register(body, should_stop=self.shutdown.is_set)
            except ServiceUnavailable:
                return  # shutting down
            self.agent_id = answer["agent_id"]
            self.protocol_version = int(answer.get("protocol_version", 2))
            self.beat_in_poll = self.protocol_version >= 3
            if self.config.heartbeat_s is None:
                self._beat_every(float(answer.get("heartbeat_interval_s", 5.0)))
        log.info("registered node %s as agent %s", self.config.node, self.agent_id)

    def _beat_every(self, interval_s: float) -> None:
        """Heartbeat every ``interval_s`` seconds, and retry a silent service at least that
        often: after a restart or a failover the agent is back within about one interval,
        while the service counts it lost only after ``missed_heartbeats_lost`` intervals
        from its start (a 5 s backoff against 1 s heartbeats had every agent marked lost by
        a restarted service)."""
        self.heartbeat_interval_s = interval_s
        self.client.max_backoff_s = min(self._max_backoff_s, interval_s)

    def _guarded(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a client call for this agent; re-register on 404 and return None."""
        try:
            return call(self.agent_id, *args, should_stop=self.shutdown.is_set, **kwargs)
        except ServiceRejected as error:
            if error.status_code == 404:
                # Forgotten (a fresh database): its command ids start again from 1.
                self._seen.clear()
                self._acked.clear()
                self._register()
            else:
                log.warning("%s", error)
        except ServiceUnavailable:
            pass
        return None

    # -- threads ------------------------------------------------------------------------

    def _poll_loop(self) -> None:
        while not self.shutdown.is_set():
            if self.beat_in_poll:
                wait_s = min(self.config.poll_wait_s, self.heartbeat_interval_s)
                commands = self._guarded(
                    self.client.poll_with_heartbeat, wait_s, self.heartbeat_body()
                )
            else:
                commands = self._guarded(self.client.poll_commands, self.config.poll_wait_s)
            new = False
            for payload in commands or []:
                command_id = payload.get("command_id")
                if command_id in self._acked:
                    self._ack(command_id, *self._acked[command_id])  # the ack got lost
                elif command_id not in self._seen:
                    self._seen.add(command_id)
                    self._commands.put(payload)
                    new = True
            if commands and not new:
                # Only commands still running (acked once their workers joined): the
                # service answers them at once, so wait rather than spin.
                self.shutdown.wait(PENDING_POLL_S)

    def _heartbeat_loop(self) -> None:
        while not self.shutdown.wait(self.heartbeat_interval_s):
            if not self.beat_in_poll:  # (a service of protocol version 2)
                self._guarded(self.client.heartbeat, self.heartbeat_body())

    def _execute_loop(self) -> None:
        while not self.shutdown.is_set():
            try:
                payload = self._commands.get(timeout=0.05)
            except queue.Empty:
                self._check_pending_ack()
                self._report_end()
                self._warm_when_due()
                self._check_health()
                continue
            with self._generation_lock:
                if self.shutdown.is_set():
                    return
                try:
                    self._execute(payload)
                except Exception as error:  # the agent keeps running whatever one command does
                    log.exception("command %s failed", payload.get("command_id"))
                    self._ack(payload.get("command_id"), False, f"{type(error).__name__}: {error}")

    # -- commands -----------------------------------------------------------------------

    def _execute(self, payload: dict[str, Any]) -> None:
        try:
            command = parse_command(payload)
        except BadCommand as error:
            self._ack(payload.get("command_id"), False, str(error), error.job_failed)
            return
        log.info("command %s: %s %s", command.command_id, command.kind, command.job_id)
        current = self.generation
        if command.kind == "stop":
            if current is None or current.command.job_id != command.job_id:
                self._ack(
                    command.command_id,
                    False,
                    f"unknown job {command.job_id!r}: "
                    f"node {self.config.node} runs no workers of it",
                )
                return
            self._end_generation(current, _deadline(command, KILL_MARGIN_S))
            self._ack(command.command_id, True, None)
            return
        if current is not None:
            self._end_generation(current, _deadline(command, KILL_MARGIN_S))
        if self._superseded(command):
            # A newer command for this job is queued already (the service replanned within
            # moments, e.g. two reclaims in one batch): launching would only be undone.
            self._ack(command.command_id, True, None)
        elif not self.shutdown.is_set():
            self.generation = None
            try:
                self.generation = self._pending_ack = self.launcher.launch(command)
            except BadCommand as error:
                # The job's fault (its command cannot run, here or anywhere), else the node's
                # (the owner is unknown here, its run directory cannot be made).
                fault = not error.job_failed
                self._ack(command.command_id, False, str(error), error.job_failed, fault)
                return
            except OSError as error:  # the node's: e.g. a full disk (no launcher log)
                error_text = f"node {self.config.node} cannot launch: {error}"
                self._ack(command.command_id, False, error_text, node_fault=True)
                return
            log.info("launched %s at world size %s", command.rendezvous_id, command.world_size)

    def _end_generation(self, generation: Generation, kill_at: float) -> None:
        """End ``generation`` (:func:`interstice.agents.stopping.end_generation`); ack it if
        pending."""
        in_executor = threading.current_thread() is not threading.main_thread()
        started = time.monotonic()
        joined = end_generation(
            generation,
            kill_at,
            # the main thread takes over, within the grace period
            interrupted=lambda: in_executor and self.shutdown.is_set(),
        )
        if joined is None:
            return
        log.info(
            "ended %s (%s) in %.2f s",
            generation.rendezvous_id,
            "joined" if joined else "not joined",
            time.monotonic() - started,
        )
        if self._pending_ack is generation:
            self._check_pending_ack(ending=True)
        if in_executor:
            self._report_end()  # the workers' last report, before a launch clears it

    def _superseded(self, command: Command) -> bool:
        """Whether a newer command for the same job waits in the queue."""
        with self._commands.mutex:
            queued = list(self._commands.queue)
        return any(
            payload.get("job_id") == command.job_id
            and (payload.get("command_id") or 0) > command.command_id
            for payload in queued
        )

    def _check_pending_ack(self, ending: bool = False) -> None:
        """Ack the last start/rescale once its workers joined, or failed to."""
        generation = self._pending_ack
        if generation is None:
            return
        ended = outcome.judge(generation)
        waited_s = time.monotonic() - generation.started_at
        job_failed = node_fault = False
        if ending:
            ok, error = True, None  # superseded by a newer command: not a failure
        elif ended is not None:
            # Exited before we saw its workers: finished at once, or could not run.
            ok, error = ended.job_state == "finished", ended.error
            job_failed, node_fault = ended.job_state == "failed", ended.node_fault
        elif workers_alive(generation):
            ok, error = True, None
            self.health.launched()
        elif waited_s > self.config.join_timeout_s + 30:
            kill(generation.process)
            ok, error = (
                False,
                f"rendezvous {generation.rendezvous_id} not complete in {waited_s:.0f} s",
            )
        else:
            return
        self._pending_ack = None
        self._ack(generation.command.command_id, ok, error, job_failed, node_fault)
        # Not before: a spare importing torch would slow the launch down. After a fault of
        # the node, the health check starts it.
        delay_s = SPARE_AFTER_JOIN_S if ended is None else 0.0
        self._spare_due = None if node_fault else time.monotonic() + delay_s

    def _report_end(self) -> None:
        """Heartbeat at once, once, when the current generation's launcher has exited: a
        failure or the job's end reaches the service now, not at the next heartbeat (up to
        ``heartbeat_interval_s`` later), and so does the workers' last report after a stop
        (the samples of their final checkpoint), which the next launch in the run directory
        would clear. ``POST /heartbeat``, which every protocol version takes: the long-poll
        that carries the heartbeat (version 3) may be waiting."""
        generation = self.generation
        if (
            generation is None
            or generation is self._end_reported
            or generation.process.poll() is None
        ):
            return
        self._end_reported = generation
        self._guarded(self.client.heartbeat, self.heartbeat_body())

    def _warm_when_due(self) -> None:
        """Start the next spare launcher once the workers launched last trained their first
        step (their first ``elastic.report``), or at ``_spare_due``."""
        if self._spare_due is None:
            return
        generation = self.generation
        stepped = generation is not None and any(
            progress.get("rendezvous_id") == generation.rendezvous_id
            for progress in rundir.read_progress(generation.run_dir, generation.uid)
        )
        if stepped or time.monotonic() >= self._spare_due:
            self._spare_due = None
            self.launcher.warm(last=True)  # for the account of the job launched last

    def _check_health(self) -> None:
        """With a fault, once its check is due (:mod:`interstice.agents.health`): a spare
        launcher of the agent's own account must be warm (one is started when none runs for
        it) and the workdir take a file; then the agent registers again without the fault,
        which ends the node's quarantine. A spare still importing is looked at again at the
        next tick. Every fault leaves no exited spare behind (the launch used it, or it was
        closed), so an exited spare here is this check's."""
        if not self.health.due():
            return
        failure = self.launcher.spare_failure()
        if failure is not None:  # this check's launcher exited warming up
            self.launcher.close_spare()  # (the next check starts a fresh one)
            self.health.failed(failure)
            return
        self.launcher.warm()
        if not self.launcher.spare_ready():
            return
        problem = health.workdir_problem(self.config.workdir)
        if problem is not None:
            self.health.failed(problem)
            return
        log.info("node %s healthy again: registering without its fault", self.config.node)
        self.health.recovered()
        self._register()

    def _ack(
        self,
        command_id: int | None,
        ok: bool,
        error: str | None,
        job_failed: bool = False,
        node_fault: bool = False,
    ) -> None:
        """Acknowledge ``command_id`` (the fields of docs/reference/agent-protocol.md's ack);
        with ``node_fault`` this node has a fault (it is quarantined) until its check passes."""
        if command_id is None:
            return
        self._acked[command_id] = (ok, error, job_failed, node_fault)
        if not ok:
            log.warning("command %s refused%s: %s", command_id, " (job failed)" * job_failed, error)
        if node_fault:
            self.health.failed(error or "a launch failed for a reason of the node")
        self._guarded(self.client.ack, command_id, ok, error, job_failed, node_fault)

    # -- reporting ----------------------------------------------------------------------

    def heartbeat_body(self) -> dict[str, Any]:
        """The heartbeat's body: what this node's workers last reported, and how their
        generation ended (docs/reference/agent-protocol.md, version 2)."""
        generation = self.generation
        body: dict[str, Any] = {
            "job_id": generation.command.job_id if generation else None,
            "world_size": None,
            "step": None,
            "samples_per_s": None,
            "samples_done": None,
        }
        if generation is None:
            return body
        body["rendezvous_id"] = generation.rendezvous_id
        body["spb_depth"] = generation.command.spb_depth
        reports = [
            progress
            for progress in rundir.read_progress(generation.run_dir, generation.uid)
            if progress.get("rendezvous_id") == generation.rendezvous_id
        ]
        if reports:
            latest = max(reports, key=lambda p: (p.get("step") or 0, p.get("time") or 0))
            metrics = latest.get("metrics")
            numbers = {
                str(name): _number(value)
                for name, value in (metrics.items() if isinstance(metrics, dict) else ())
                if _number(value) is not None
            }
            body.update(
                world_size=latest.get("nodes"),
                step=latest.get("step"),
                samples_per_s=_number(latest.get("samples_per_s")),
                samples_done=_number(latest.get("samples")),
                loss=_number(latest.get("loss")),
                metrics=dict(list(numbers.items())[: wire.HEARTBEAT_METRICS_MAX]),
            )
            if self.protocol_version >= 4:  # an older service refuses the fields
                body.update(_resumed(reports))
        ended = outcome.judge(generation)
        if ended is None:
            if workers_alive(generation):
                body["job_state"] = "running"
                body["world_size"] = body["world_size"] or generation.command.world_size
        elif ended.job_state is not None and not self._superseded(generation.command):
            # (A newer command for the job already waits: the end was a peer's stop.)
            body["job_state"] = ended.job_state
            if ended.job_state == "finished" and any(
                report.get("state") == "stopped" for report in reports
            ):
                del body["job_state"]  # stopped with its peers, e.g. by a peer's stop file
            elif ended.error:
                body["error"] = ended.error
        return body


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None (a report's odd value must not make the service
    refuse the whole heartbeat)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _resumed(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """``first_step`` and ``resumed_at`` of the heartbeat from this node's reports of one
    generation (:mod:`interstice.elastic.report`): the earliest any local rank reported a step
    beyond its first one. Omitted when absent (an older ``interstice.elastic``) or odd (a
    clock outside the service's years would make it refuse the whole heartbeat)."""
    firsts = [r.get("first_step") for r in reports]
    times = [_number(r.get("resumed_time")) for r in reports]
    fields: dict[str, Any] = {}
    first_steps = [step for step in firsts if type(step) is int and step >= 0]
    if first_steps:
        fields["first_step"] = min(first_steps)
    earliest, latest = wire.EARLIEST_TIME.timestamp(), wire.LATEST_TIME.timestamp()
    resumed = [t for t in times if t is not None and earliest <= t < latest]
    if first_steps and resumed:
        fields["resumed_at"] = datetime.fromtimestamp(min(resumed), UTC).isoformat()
    return fields


def _deadline(command: Command, margin_s: float) -> float:
    """The monotonic time at which the old workers of ``command`` must be gone."""
    if command.deadline is None:
        return time.monotonic() + STOP_TIMEOUT_S
    deadline = command.deadline
    if deadline.tzinfo is None:
        deadline = deadline.replace(tzinfo=UTC)
    remaining_s = (deadline - datetime.now(UTC)).total_seconds()
    return time.monotonic() + remaining_s - margin_s
