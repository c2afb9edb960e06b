"""The replay's event loop: elastic jobs on a node-state trace, one policy, exact accounting.

Simulated time starts at the window's start (t = 0 s) and jumps from event to event. Events:

- a *trace event*: every node change at one timestamp. A node that becomes busy while a job
  holds it is *reclaimed*: it leaves the job at once (a *preemption* of that job), the job is
  charged ``rescale_down_s`` (plus ``ReplayOptions.reclaim_loss_s``) without progress, and a
  job left below ``min_nodes`` stops (it holds no node and stays admitted).
- a *job arrival*: its submit offset from the jobs file's first job. Queued jobs are admitted
  first come first served (fair between users where the jobs file names them,
  :func:`interstice.optimizer.admission.fair_order`) by capacity
  (:func:`interstice.optimizer.admission.admit`, the service's rule): while the admitted
  jobs' usable nodes sum below the idle nodes, with ``max_active_jobs`` as an optional cap.
  A job's usable nodes (:func:`~interstice.optimizer.admission.usable_nodes`, on the
  believed table) are the most it runs on at a parallel efficiency of
  ``admission_efficiency``, or 0 while its ``min_nodes`` exceed the idle nodes or its
  ``rescale_up_s`` is not below the horizon (a job that cannot start now must not hold the
  pool's place: on the mixed workload counting such jobs cut utilization to 0.45 and 0.81).
  An admitted job holding no node stays admitted; admission is re-checked after every step
  (the idle pool grows too).
- a *completion*: the exact time a job's progress reaches its ``total_samples``; it releases
  its nodes and leaves.
- a *deferred solve*, when ``min_solve_interval_s`` > 0 (below).

After the events at one time the policy (a callable ``Problem -> Allocation``) re-allocates
the idle nodes, unless a solve would be provably the same (below) or came less than
``min_solve_interval_s`` after the previous one; then it runs at ``previous + interval``
(reclaims still act at once: a node cannot stay with a job once its owner takes it back).

Progress model (the optimizer's eqs. (a)-(b), :mod:`interstice.optimizer.formulation`): a job
on n nodes at depth d trains ``r(n, d)`` samples/s (the scalability table), worth
``progress_per_sample(d)`` samples of progress each, except for the seconds after a change:
growing (a start included) costs ``rescale_up_s``, shrinking (by the policy or a reclaim) or a
depth change costs ``rescale_down_s``, during which it makes no progress; a change during
such a pause restarts it (the pause ends at ``max(previous end, now + cost)``). Its nodes count
as allocated throughout.

Idle-hole forecasts (``forecast``, :mod:`interstice.replay.forecast`): each solve's
:class:`~interstice.optimizer.Problem` carries the forecast remaining idle time of the idle
nodes whose hole end is known (``idle_forecast_s``); the trace still decides when a node is
reclaimed, and a reclaim costs what it costs without forecasts. Each idle node that the
trace makes busy ends a hole; whether its end had been forecast (the forecast just before)
feeds the coverage (:class:`interstice.optimizer.coverage.CoverageMeter`) that each solve
carries (``Problem.forecast_coverage``; while too few holes have ended, the share of the idle
nodes that have a forecast, :func:`~interstice.optimizer.coverage.solve_coverage`): below
``forecast_min_coverage`` the solve is told nothing.

What the optimizer believes may differ from the truth: the simulator always trains at the
*true* table's rates, while each solve's :class:`~interstice.optimizer.Problem` carries a
*believed* table (``believed``: e.g. the true one with every rate multiplied by a seeded
random factor, :func:`interstice.replay.rates.perturb`). With ``learn``, every job that ran
at (n, d) for a positive time reports its true samples/s there
(:class:`interstice.optimizer.learning.RateObservation`) and from the next solve on the
optimizer gets ``Job.rates = fit_curve(believed rows of its model, its observations,
max_nodes)`` (:class:`interstice.replay.rates.Learner`).

Accounting, per policy: *dedicated samples* are the progress the same node counts over the
same seconds give on dedicated nodes with no rescale or preemption loss, at the best depth:
``sum max_d r(n, d) * progress_per_sample(d) * dt`` over the time a job holds n > 0 nodes;
*efficiency* is goodput divided by it (BFTrainer's headline metric, arXiv 2106.12091), <= 1 by
construction whatever the table's SPB rows say. *Utilization* is allocated node-seconds over
idle node-seconds. *Harvested node-seconds* are each job's goodput divided by its model's
best per-node rate of progress (``max over n >= 1, d of r(n, d) * progress_per_sample(d) /
n``), i.e. the dedicated-node work done; *harvest* is their sum over idle node-seconds,
comparable across models and <= utilization.

The ``rigid`` baseline (:mod:`interstice.replay.rigid`, its docstring has the details) runs
this loop with what a centre does today with a Slurm scavenger partition and ``torchrun`` jobs
that checkpoint: every job asks for a fixed count (its ``max_nodes`` or ``--rigid-nodes``),
starts in submission order with backfill when that many idle nodes are free, never resizes,
checkpoints every ``checkpoint_interval_s`` of training, and when any of its nodes is
reclaimed loses everything since its last checkpoint and requeues in its original place.

Trace rows that restate a node's current state change nothing and are no event. Skipped
solves (each provably returns the allocation in force, so skipping changes nothing):
(i) no job is admitted; (ii) saturation: every admitted job holds its ``max_nodes`` at its
only measured depth, no job changed since the previous solve (no arrival, admission,
completion or reclaim: only free nodes came or went), the table's rates strictly increase with
the count, and each job's goodput at its count over the horizon stays below its remaining
samples. Under (ii) any other option of a job has strictly less goodput, no early-finish
term (eq. (g): it trains less, so nothing beyond its remaining samples either), at least its
rescale cost and churn, and less fairness (fewer nodes for the job and for its user; the
capacity is not binding), so the optimum keeps every job as it is; greedy and equal-share keep
it too (an equal share of a pool of at least the sum of the maxima is each job's maximum).
``skip_equivalent=False`` turns (ii) off; the tests replay a window both ways and compare.
With forecasts (ii) is off: time alone changes the forecasts, so the argument above does
not cover them.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from interstice.optimizer import Allocation, Job, Problem, ScalabilityTable, Weights, admission
from interstice.optimizer.coverage import FORECAST_MIN_COVERAGE, CoverageMeter, solve_coverage
from interstice.optimizer.problem import FORECAST_CLASSES
from interstice.replay.jobs import JobSpec
from interstice.replay.rates import Learner
from interstice.replay.trace import TraceWindow

Policy = Callable[[Problem], Allocation]
"""Allocates the idle nodes of a snapshot: ``solve``, ``greedy``, ``equal_share`` or a test's."""

Horizon = Callable[[float, np.ndarray], float]
"""Forecast horizon in seconds from ``(t_s, idle_since_s)``: the simulated time and when each
node became idle (NaN if busy), shape (n,) (:mod:`interstice.replay.horizon`)."""

Forecast = Callable[[float, np.ndarray], dict[int, float]]
"""Forecast remaining idle seconds from ``(t_s, idle_ids)``: per idle node id whose hole's end
is known (:meth:`interstice.replay.forecast.HoleForecasts.remaining_s`)."""


@dataclass(frozen=True)
class ReplayOptions:
    """How a replay runs (the policy and horizon aside).

    Attributes:
        max_active_jobs: most jobs admitted at once, >= 1, or ``None``: no cap beyond the
            capacity rule (BFTrainer's replay uses 10).
        admission_efficiency: the parallel efficiency, in [0, 1], at which admission counts
            a job's usable nodes (:func:`interstice.optimizer.admission.usable_nodes`); 0
            counts its ``max_nodes``.
        learn: fit each job's curve from its observed rates (module docstring).
        min_solve_interval_s: least simulated seconds between two solves, >= 0.
        time_limit_s: the solver's wall-clock limit per solve, seconds.
        weights: the objective weights.
        skip_equivalent: skip the solves that provably change nothing (module docstring).
        reclaim_loss_s: seconds of progress a reclaim costs a job that goes on, beyond its
            ``rescale_down_s``, >= 0: the work since its last checkpoint where the grace
            period is too short to checkpoint (0: a reclaim costs what a shrink does). The
            optimizer is told it (``Job.reclaim_loss_s``), so with forecasts it may shrink a
            job before a forecast reclaim (a planned shrink).
        forecast_classes: ``Problem.forecast_classes`` of every solve, >= 1.
        forecast_min_coverage: ``Problem.forecast_min_coverage`` of every solve, in [0, 1].
    """

    max_active_jobs: int | None = None
    admission_efficiency: float = admission.ADMISSION_EFFICIENCY
    learn: bool = False
    min_solve_interval_s: float = 0.0
    time_limit_s: float = 10.0
    weights: Weights = Weights()
    skip_equivalent: bool = True
    reclaim_loss_s: float = 0.0
    forecast_classes: int = FORECAST_CLASSES
    forecast_min_coverage: float = FORECAST_MIN_COVERAGE


HOLE_END_S = 1e-3
"""How long before a node goes busy its hole's forecast is read (the trace's times are whole
seconds, so this is within the hole)."""

PAUSE_CAUSES = ("start", "grow", "shrink", "depth", "reclaim")
"""Why a job pauses: the policy starts it (0 -> n nodes), grows it, shrinks it (to n > 0) or
changes its depth on the same nodes; or a reclaim takes some of its nodes (a reclaim that
takes them all, or leaves it below ``min_nodes``, stops it, which costs no pause: its restart
is a ``start``)."""


@dataclass
class JobRecord:
    """One job's state and totals during a replay.

    Attributes:
        spec: the job as the jobs file gives it.
        arrival_s: simulated arrival time, seconds.
        admitted_s: when it was admitted, or ``None``.
        finished_s: when its progress reached ``total_samples``, or ``None``.
        nodes: ids of the nodes it holds.
        spb_depth: its current depth.
        paused_until_s: it makes no progress before this time (a rescale in progress).
        samples: samples trained.
        goodput: samples of full-backprop progress (``samples * progress_per_sample``).
        dedicated_samples: samples its node counts would have given on dedicated nodes.
        rescales: changes of its count or depth (policy's and reclaims').
        preemptions: events at which it lost a reclaimed node.
        first_node_s: when it first held a node, or ``None``.
        lost_goodput: progress thrown away (a rigid job's work since its last checkpoint).
        pause_cause: what began or last lengthened its current pause (:data:`PAUSE_CAUSES`).
        pause_loss: dedicated samples its nodes would have trained during its pauses, per
            cause: what the pauses cost its efficiency.
        progress_points: ``(t_s, goodput)`` at every change of its rate; progress is linear
            between them but for rescale pauses.
    """

    spec: JobSpec
    arrival_s: float
    admitted_s: float | None = None
    finished_s: float | None = None
    nodes: set[int] = field(default_factory=set)
    spb_depth: int = 0
    paused_until_s: float = 0.0
    samples: float = 0.0
    goodput: float = 0.0
    dedicated_samples: float = 0.0
    rescales: int = 0
    preemptions: int = 0
    first_node_s: float | None = None
    lost_goodput: float = 0.0
    pause_cause: str = ""
    pause_loss: dict[str, float] = field(default_factory=dict)
    progress_points: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class ReplayResult:
    """What one policy achieved on one window.

    Attributes:
        policy: the policy's name.
        duration_s: simulated seconds.
        jobs: every job that arrived within the window, in arrival order.
        idle_node_s: integral of the idle node count, node-seconds.
        allocated_node_s: integral of the allocated node count, node-seconds.
        timeline_s: times of the timeline samples, shape (T,) (after each step's events).
        timeline_idle: idle nodes from each time on, shape (T,).
        timeline_allocated: allocated nodes from each time on, shape (T,).
        timeline_goodput: cumulative goodput of all jobs at each time, samples, shape (T,).
        timeline_by_model: allocated nodes per model from each time on, each shape (T,).
        best_progress_per_node_s: per model, the best per-node rate of progress, samples/s
            (module docstring; the unit of harvested node-seconds).
        solve_times_s: the policy's own ``solve_time_s`` per solve, seconds.
        solve_wall_s: wall seconds per solve, building the Problem and applying the answer
            included.
        statuses: count of each ``Allocation.status``.
        solves: solves run.
        skipped_solves: solves skipped as provably unchanged.
        deferred_solves: solves postponed by ``min_solve_interval_s``.
        forecast_solves: solves that used forecasts (``Problem.forecasts_used``).
        forecast_coverage: the coverage at the end (``None``: unknown, or no forecasts).
        wall_s: wall seconds of the whole replay.
    """

    policy: str
    duration_s: float
    jobs: list[JobRecord]
    idle_node_s: float = 0.0
    allocated_node_s: float = 0.0
    timeline_s: list[float] = field(default_factory=list)
    timeline_idle: list[int] = field(default_factory=list)
    timeline_allocated: list[int] = field(default_factory=list)
    timeline_goodput: list[float] = field(default_factory=list)
    timeline_by_model: dict[str, list[int]] = field(default_factory=dict)
    best_progress_per_node_s: dict[str, float] = field(default_factory=dict)
    solve_times_s: list[float] = field(default_factory=list)
    solve_wall_s: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    solves: int = 0
    skipped_solves: int = 0
    deferred_solves: int = 0
    forecast_solves: int = 0
    forecast_coverage: float | None = None
    wall_s: float = 0.0


class Replay:
    """The mutable state of one replay; :func:`replay` drives it (subclassed by
    :class:`interstice.replay.rigid.RigidReplay`)."""

    def __init__(
        self,
        window: TraceWindow,
        jobs: list[JobSpec],
        table: ScalabilityTable,
        policy: Policy,
        horizon: Horizon,
        options: ReplayOptions,
        name: str,
        believed: ScalabilityTable | None = None,
        forecast: Forecast | None = None,
    ) -> None:
        self.window, self.table, self.policy = window, table, policy
        self.forecast = forecast
        self.coverage = CoverageMeter()
        self.believed = table if believed is None else believed
        self.learner = Learner(self.believed) if options.learn else None
        self.horizon, self.options = horizon, options
        self.names = window.node_names.tolist()
        self.node_id = {node: i for i, node in enumerate(self.names)}
        self.idle = window.initial_idle.copy()
        self.idle_since_s = window.initial_idle_since_s.copy()
        self.holder = np.full(len(self.names), -1, dtype=np.int64)
        records = [
            JobRecord(
                spec=spec, arrival_s=spec.submit_offset_s, spb_depth=table.depths(spec.model)[0]
            )
            for spec in jobs
            if spec.submit_offset_s < window.duration_s
        ]
        self.result = ReplayResult(policy=name, duration_s=window.duration_s, jobs=records)
        models = sorted(table.models)
        self.result.timeline_by_model = {model: [] for model in models}
        self.best_progress = {
            (model, n): max(
                table.samples_per_s(model, n, d) * table.progress_per_sample(model, d)
                for d in table.depths(model)
                if n <= table.max_nodes(model, d)
            )
            for model in models
            for n in range(1, max(table.max_nodes(model, d) for d in table.depths(model)) + 1)
        }
        self.result.best_progress_per_node_s = {
            model: max(rate / n for (m, n), rate in self.best_progress.items() if m == model)
            for model in models
        }
        self.arrivals = deque(range(len(records)))
        self.queue: deque[int] = deque()
        self.active: list[int] = []
        self.rate = [0.0] * len(records)
        self.dedicated_rate = [0.0] * len(records)
        self.progress_rate = [0.0] * len(records)
        self.changed = True  # the idle pool changed since the previous solve
        self.jobs_changed = True  # a job arrived, was admitted, completed or was rescaled
        self.finished_goodput = 0.0
        self.last_solve_s = -math.inf
        self.horizon_memo: tuple[float, float] | None = None  # (t_s, horizon_s) of this pool
        self.strictly_increasing = {
            model: all(
                np.all(
                    np.diff(
                        table.samples_per_s_array(
                            model, np.arange(table.max_nodes(model, d) + 1), d
                        )
                    )
                    > 0
                )
                for d in table.depths(model)
            )
            for model in table.models
        }

    # -- time ---------------------------------------------------------------------------

    def horizon_s(self, now_s: float) -> float:
        """The forecast horizon at ``now_s``, worked out once per pool: admission and the
        solve of one step share it (the pool's changes reset it in :meth:`run`)."""
        if self.horizon_memo is None or self.horizon_memo[0] != now_s:
            self.horizon_memo = (now_s, self.horizon(now_s, self.idle_since_s))
        return self.horizon_memo[1]

    def finish_time(self, j: int, now_s: float) -> float:
        """When job ``j`` completes at its current rate (``inf`` if it does not train)."""
        rec = self.result.jobs[j]
        if self.progress_rate[j] <= 0:
            return math.inf
        left = rec.spec.total_samples - rec.goodput
        return max(now_s, rec.paused_until_s) + left / self.progress_rate[j]

    def advance(self, now_s: float, to_s: float, finishing: set[int]) -> None:
        """Accrue every admitted job's progress and the node-second integrals to ``to_s``."""
        dt = to_s - now_s
        allocated = int(np.count_nonzero(self.holder >= 0))
        self.result.idle_node_s += int(np.count_nonzero(self.idle)) * dt
        self.result.allocated_node_s += allocated * dt
        for j in self.active:
            rec = self.result.jobs[j]
            if not rec.nodes:
                continue
            rec.dedicated_samples += self.dedicated_rate[j] * dt
            paused_s = min(to_s, rec.paused_until_s) - now_s
            if paused_s > 0:
                lost = rec.pause_loss.get(rec.pause_cause, 0.0)
                rec.pause_loss[rec.pause_cause] = lost + self.dedicated_rate[j] * paused_s
            if j in finishing:  # exact arithmetic at the completion time
                run_s = (rec.spec.total_samples - rec.goodput) / self.progress_rate[j]
                rec.goodput = rec.spec.total_samples
            else:
                run_s = max(0.0, to_s - max(now_s, rec.paused_until_s))
                rec.goodput = min(
                    rec.spec.total_samples, rec.goodput + self.progress_rate[j] * run_s
                )
            rec.samples += self.rate[j] * run_s
            if self.learner is not None and run_s > 0:
                self.learner.observe(j, len(rec.nodes), rec.spb_depth, self.rate[j])

    # -- changes to a job -------------------------------------------------------------------

    def set_nodes(
        self, j: int, nodes: set[int], spb_depth: int, now_s: float, *, reclaim: bool = False
    ) -> None:
        """Give job ``j`` exactly ``nodes`` at ``spb_depth``, charging the rescale pause (to
        the cause ``reclaim`` when a reclaim took nodes, else to the policy's change)."""
        rec = self.result.jobs[j]
        old_count, new_count = len(rec.nodes), len(nodes)
        if nodes == rec.nodes and spb_depth == rec.spb_depth:
            return
        rec.progress_points.append((now_s, rec.goodput))
        if new_count > old_count:
            cost_s, cause = rec.spec.rescale_up_s, "grow" if old_count else "start"
        elif new_count > 0:
            cost_s = rec.spec.rescale_down_s + (self.options.reclaim_loss_s if reclaim else 0.0)
            cause = "reclaim" if reclaim else "shrink" if new_count < old_count else "depth"
        else:
            cost_s, cause = 0.0, ""
        if now_s + cost_s > rec.paused_until_s:
            rec.paused_until_s, rec.pause_cause = now_s + cost_s, cause
        if new_count != old_count or (new_count > 0 and spb_depth != rec.spb_depth):
            rec.rescales += 1
        for node in rec.nodes - nodes:
            if self.holder[node] == j:  # another job may already have taken it in this apply
                self.holder[node] = -1
        for node in nodes - rec.nodes:
            self.holder[node] = j
        if nodes and rec.first_node_s is None:
            rec.first_node_s = now_s
        rec.nodes, rec.spb_depth = nodes, spb_depth
        model = rec.spec.model
        self.rate[j] = self.table.samples_per_s(model, new_count, spb_depth) if nodes else 0.0
        self.dedicated_rate[j] = self.best_progress[(model, new_count)] if nodes else 0.0
        self.progress_rate[j] = self.rate[j] * self.table.progress_per_sample(model, spb_depth)
        self.jobs_changed = True

    def reclaim(self, nodes: np.ndarray, now_s: float) -> None:
        """Take the newly busy ``nodes`` back from the jobs holding them."""
        lost: dict[int, set[int]] = {}
        for node in nodes[self.holder[nodes] >= 0].tolist():
            lost.setdefault(int(self.holder[node]), set()).add(node)
        for j, taken in lost.items():
            rec = self.result.jobs[j]
            rec.preemptions += 1
            keep = rec.nodes - taken
            self.set_nodes(
                j,
                keep if len(keep) >= rec.spec.min_nodes else set(),
                rec.spb_depth,
                now_s,
                reclaim=True,
            )

    def complete(self, finishing: set[int], now_s: float) -> None:
        for j in finishing:
            rec = self.result.jobs[j]
            rec.progress_points.append((now_s, rec.goodput))
            for node in rec.nodes:
                self.holder[node] = -1
            rec.nodes = set()
            self.rate[j] = self.dedicated_rate[j] = self.progress_rate[j] = 0.0
            rec.finished_s = now_s
            self.finished_goodput += rec.goodput
            self.active.remove(j)
        self.jobs_changed = True

    def admit(self, now_s: float) -> None:
        """Queue the arrivals up to ``now_s``; admit by capacity (module docstring)."""
        jobs = self.result.jobs
        while self.arrivals and jobs[self.arrivals[0]].arrival_s <= now_s:
            self.queue.append(self.arrivals.popleft())
        if not self.queue:
            return
        idle = int(np.count_nonzero(self.idle))
        horizon_s = self.horizon_s(now_s)

        def usable(j: int) -> int:
            spec = jobs[j].spec
            return admission.usable_nodes(
                self.believed,
                spec.model,
                spec.min_nodes,
                spec.max_nodes,
                idle,
                self.options.admission_efficiency,
                spec.rescale_up_s,
                horizon_s,
            )

        order = admission.fair_order(
            [jobs[j].spec.user for j in self.queue], [jobs[j].spec.user for j in self.active]
        )
        queue = [self.queue[i] for i in order]  # fair between users; FCFS without users
        count = admission.admit(
            [usable(j) for j in queue],
            [usable(j) for j in self.active],
            idle,
            self.options.max_active_jobs,
        )
        for j in queue[:count]:
            self.queue.remove(j)
            self.active.append(j)
            rec = self.result.jobs[j]
            rec.admitted_s = now_s
            rec.progress_points.append((now_s, 0.0))
            self.jobs_changed = True

    def holes_ended(self, nodes: np.ndarray, now_s: float) -> None:
        """Count the holes that the idle ``nodes`` end by going busy at ``now_s`` into the
        forecast coverage: forecast if their node had one a moment before."""
        if self.forecast is None or not nodes.size:
            return
        told = self.forecast(now_s - HOLE_END_S, nodes)
        for node in nodes.tolist():
            self.coverage.ended(node in told)

    # -- solving --------------------------------------------------------------------------

    def saturated(self, horizon_s: float) -> bool:
        """Skip rule (ii) of the module docstring (only where the policy sees the truth)."""
        if (
            self.options.weights.throughput <= 0
            or self.believed is not self.table
            or self.learner is not None
            or self.forecast is not None
        ):
            return False
        for j in self.active:
            rec = self.result.jobs[j]
            spec = rec.spec
            if (
                len(rec.nodes) != spec.max_nodes
                or len(self.table.depths(spec.model)) != 1
                or not self.strictly_increasing[spec.model]
                or self.progress_rate[j] * horizon_s >= spec.total_samples - rec.goodput
            ):
                return False
        return True

    def solve(self, now_s: float) -> None:
        started = time.perf_counter()
        horizon_s = self.horizon_s(now_s)
        if self.options.skip_equivalent and not self.jobs_changed and self.saturated(horizon_s):
            self.result.skipped_solves += 1
            self.last_solve_s = now_s
            self.changed = False
            return
        idle_ids = np.flatnonzero(self.idle)
        forecast_s = None
        if self.forecast is not None:
            left_s = self.forecast(now_s, idle_ids)
            forecast_s = {self.names[i]: s for i, s in left_s.items()}
        idle_nodes = tuple(self.names[i] for i in idle_ids.tolist())
        problem = Problem(
            idle_nodes=idle_nodes,
            jobs=tuple(self.job_snapshot(j) for j in self.active),
            scalability=self.believed,
            weights=self.options.weights,
            horizon_s=horizon_s,
            time_limit_s=self.options.time_limit_s,
            idle_forecast_s=forecast_s,
            forecast_classes=self.options.forecast_classes,
            forecast_coverage=solve_coverage(self.coverage.coverage, forecast_s, idle_nodes),
            forecast_min_coverage=self.options.forecast_min_coverage,
        )
        allocation = self.policy(problem)
        self.apply(allocation, now_s)
        result = self.result
        result.solves += 1
        result.forecast_solves += problem.forecasts_used
        result.statuses[allocation.status] = result.statuses.get(allocation.status, 0) + 1
        result.solve_times_s.append(allocation.solve_time_s)
        result.solve_wall_s.append(time.perf_counter() - started)
        self.last_solve_s = now_s
        self.changed = self.jobs_changed = False

    def job_snapshot(self, j: int) -> Job:
        rec = self.result.jobs[j]
        spec = rec.spec
        return Job(
            job_id=spec.job_id,
            model=spec.model,
            min_nodes=spec.min_nodes,
            max_nodes=spec.max_nodes,
            nodes=tuple(self.names[i] for i in sorted(rec.nodes)),
            spb_depth=rec.spb_depth,
            samples_remaining=max(0.0, spec.total_samples - rec.goodput),
            rescale_up_s=spec.rescale_up_s,
            rescale_down_s=spec.rescale_down_s,
            priority=spec.priority,
            submitted_s=rec.arrival_s,
            reclaim_loss_s=self.options.reclaim_loss_s,
            rates=None if self.learner is None else self.learner.rates(j, spec),
            user=spec.user,
        )

    def apply(self, allocation: Allocation, now_s: float) -> None:
        """Carry out ``allocation``, checking it against the simulator's own state.

        Raises:
            RuntimeError: the policy answered for other jobs, gave a node that is not idle or
                gave one node to two jobs.
        """
        if [a.job_id for a in allocation.jobs] != [
            self.result.jobs[j].spec.job_id for j in self.active
        ]:
            raise RuntimeError("policy answered for other jobs than the problem's")
        wanted = [{self.node_id[name] for name in share.node_names} for share in allocation.jobs]
        given = [node for nodes in wanted for node in nodes]
        if len(set(given)) != len(given) or not self.idle[given].all():
            raise RuntimeError("policy gave a node twice or a node that is not idle")
        for j, nodes, share in zip(list(self.active), wanted, allocation.jobs, strict=True):
            self.set_nodes(j, nodes, share.spb_depth, now_s)

    # -- the loop --------------------------------------------------------------------------

    def record(self, now_s: float) -> None:
        result = self.result
        result.timeline_s.append(now_s)
        result.timeline_idle.append(int(np.count_nonzero(self.idle)))
        result.timeline_allocated.append(int(np.count_nonzero(self.holder >= 0)))
        by_model = dict.fromkeys(result.timeline_by_model, 0)
        for j in self.active:
            by_model[result.jobs[j].spec.model] += len(result.jobs[j].nodes)
        for model, count in by_model.items():
            result.timeline_by_model[model].append(count)
        active_goodput = sum(result.jobs[j].goodput for j in self.active)
        result.timeline_goodput.append(self.finished_goodput + active_goodput)

    def run(self, on_progress: Callable[[float], None] | None) -> ReplayResult:
        window, options = self.window, self.options
        started = time.perf_counter()
        n_events = len(window.event_time_s)
        event, now_s = 0, 0.0
        pending = False  # a solve is due but postponed by the minimum interval
        self.admit(now_s)
        self.solve(now_s)
        self.record(now_s)
        while True:
            finish = {j: self.finish_time(j, now_s) for j in self.active}
            candidates = [window.duration_s, min(finish.values(), default=math.inf)]
            if event < n_events:
                candidates.append(float(window.event_time_s[event]))
            if self.arrivals:
                candidates.append(self.result.jobs[self.arrivals[0]].arrival_s)
            if pending:
                candidates.append(self.last_solve_s + options.min_solve_interval_s)
            to_s = max(now_s, min(candidates))
            finishing = {j for j, t in finish.items() if t <= to_s}
            self.advance(now_s, to_s, finishing)
            now_s = to_s
            if now_s >= window.duration_s:
                break
            if finishing:
                self.complete(finishing, now_s)
            if event < n_events and window.event_time_s[event] <= now_s:
                nodes, to_idle = window.changes(event)
                before = self.idle[nodes]
                self.idle[nodes] = to_idle
                flipped = nodes[self.idle[nodes] != before]
                if flipped.size:
                    self.changed, self.horizon_memo = True, None
                    self.holes_ended(flipped[~self.idle[flipped]], now_s)
                    self.idle_since_s[flipped] = np.where(self.idle[flipped], now_s, np.nan)
                    self.reclaim(np.unique(nodes[~self.idle[nodes]]), now_s)
                event += 1
            self.admit(now_s)
            if self.changed or self.jobs_changed or pending:
                if not self.active:
                    self.result.skipped_solves += 1
                    self.changed = self.jobs_changed = pending = False
                elif now_s - self.last_solve_s >= options.min_solve_interval_s:
                    self.solve(now_s)
                    pending = False
                elif not pending:
                    pending = True
                    self.result.deferred_solves += 1
            self.record(now_s)
            if on_progress is not None:
                on_progress(now_s)
        self.record(now_s)
        self.result.forecast_coverage = self.coverage.coverage
        for j in self.active:
            rec = self.result.jobs[j]
            rec.progress_points.append((now_s, rec.goodput))
        self.result.wall_s = time.perf_counter() - started
        return self.result


def replay(
    window: TraceWindow,
    jobs: list[JobSpec],
    table: ScalabilityTable,
    policy: Policy,
    *,
    horizon: Horizon,
    options: ReplayOptions = ReplayOptions(),
    name: str = "policy",
    on_progress: Callable[[float], None] | None = None,
    believed: ScalabilityTable | None = None,
    forecast: Forecast | None = None,
) -> ReplayResult:
    """Replay ``jobs`` on ``window`` under ``policy`` (module docstring for the model).

    Args:
        window: the trace window (:meth:`interstice.replay.trace.NodeTrace.window`).
        jobs: the jobs in arrival order; arrivals at or after the window's end are dropped.
        table: the scalability table (every job's model is in it).
        policy: allocates the idle nodes at each solve.
        horizon: the forecast horizon of each solve.
        options: admission cap, learning, minimum solve interval, solver limit, weights.
        name: the policy's name in the result.
        on_progress: called with the simulated time after each step.
        believed: the table the policy is told (default: ``table``); the jobs always train
            at ``table``'s rates.
        forecast: the idle-hole forecasts each solve is told (``Problem.idle_forecast_s``);
            ``None``: none.

    Returns:
        The replay's totals, timeline and per-job records.

    Raises:
        RuntimeError: the policy returned an allocation the simulator cannot carry out.
    """
    return Replay(window, jobs, table, policy, horizon, options, name, believed, forecast).run(
        on_progress
    )
