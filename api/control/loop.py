"""The control loop: coalesce events, solve off the event loop, apply in one transaction.

Events that change the problem call :meth:`ControlLoop.mark_stale` (from any thread). The
loop waits for staleness, sleeps ``debounce_s`` so close events coalesce into one solve,
snapshots the problem (:func:`build_problem`) and runs the solver with the objective's time
limit (:func:`plan`), both in the solver process (:mod:`.solver_process`; with
``solver_process`` off, in a worker thread), then writes the allocation and the commands it
implies in one transaction and wakes the agents' long-polls. Reclaims do not pass through
here: they issue their commands at once
(:func:`interstice.api.services.state.release_nodes`), even while a solve runs, and in the
solver process the solve holds none of the service's GIL. A second task sweeps agent
leases. With several replicas on one PostgreSQL database only the leader solves (see
:class:`ControlLoop`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from interstice.api.control import leases, stalls
from interstice.api.control.leader import AlwaysLeader, PostgresLeadership
from interstice.api.control.notify import PostgresRelay
from interstice.api.schemas.objective import ObjectivePublic
from interstice.api.service import Service
from interstice.api.services import state, usage
from interstice.api.services.objective import stored as stored_objective
from interstice.api.services.scalability import stored as stored_table
from interstice.api.services.state import ACTIVE_JOB_STATES, Changes, parse_id
from interstice.api.settings import Settings
from interstice.api.store.db import Database
from interstice.api.store.tables import (
    AllocationRecord,
    IdleInterval,
    Job,
    JobRate,
    Rescale,
    utcnow,
)
from interstice.optimizer import (
    Allocation,
    Problem,
    ScalabilityPoint,
    ScalabilityTable,
    Weights,
    pool_remaining_idle_s,
)
from interstice.optimizer import Job as OptimizerJob
from interstice.optimizer.admission import admit, fair_order, usable_nodes
from interstice.optimizer.coverage import solve_coverage
from interstice.optimizer.learning import RateObservation, default_curve, fit_curve
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from interstice.api.control.solver_process import SolverProcess

log = logging.getLogger("interstice.api")

Solver = Callable[[Problem, str], Allocation]
"""``solver(problem, backend) -> Allocation``; production uses :func:`optimizer_solver`."""

IDLE_INTERVALS_KEPT = 10000
"""Most recent idle intervals the ``auto`` horizon estimates from."""
RESCALE_COSTS_KEPT = 20
"""Newest measured rescale costs per job and direction whose median the optimizer is told."""
SOLVES_KEPT = 1000
"""Newest applied solves (:class:`AllocationRecord`) kept for ``GET /v1/solves``; older ones
are deleted as each new one is written (at 10,000 agents the loop solves about twice a
second)."""
UNRECORDED = {"node_names"}
"""Fields of a job's share that its :class:`AllocationRecord` leaves out."""


def optimizer_solver(problem: Problem, backend: str) -> Allocation:
    """The production solver: :func:`interstice.optimizer.solve` with ``backend``."""
    from interstice.optimizer import solve

    return solve(problem, backend=backend)


def horizon_s(
    session: Session, objective: ObjectivePublic, pool_size: int, multi_user: bool = False
) -> float:
    """The forecast horizon, seconds: the fixed value, or for ``auto`` the expected
    remaining idle time (:func:`interstice.optimizer.pool_remaining_idle_s`) of the
    ``pool_size`` allocatable nodes (:func:`state.allocatable`) from the observed idle
    intervals."""
    if objective.horizon_s != "auto":
        return float(objective.horizon_s)
    lengths = list(
        session.scalars(
            select(IdleInterval.length_s)
            .order_by(IdleInterval.id.desc())
            .limit(IDLE_INTERVALS_KEPT)
        )
    )
    now = utcnow()
    middle = state.median_idle_since(session, pool_size, multi_user)
    ages = [(now - since).total_seconds() for since in middle]  # their median is the pool's
    return pool_remaining_idle_s(lengths, ages)


def idle_forecast_s(untils: dict[str, datetime], now: datetime) -> dict[str, float]:
    """Each node's forecast remaining idle time, seconds: ``until - now``. A node whose
    ``until`` has passed is left out: a stale forecast is an unknown end, as if none had been
    given (the node stays until its ``busy`` event, and none is due at a known time; read as
    0 s left, it would take the node out of every allocation).

    Args:
        untils: the scheduler's ``until`` of the nodes that have one, by node name.
        now: the time of the snapshot (aware UTC).

    Returns:
        Seconds left per node of ``untils`` still ahead of ``now``, > 0.
    """
    left = {node: (until - now).total_seconds() for node, until in untils.items()}
    return {node: seconds for node, seconds in left.items() if seconds > 0}


class Source(Protocol):
    """What a problem is built from: a :class:`Service`, or the solver process's
    :class:`~interstice.api.control.solver_process.Reader`."""

    db: Database
    settings: Settings


@dataclass(frozen=True)
class Plan:
    """A solve's answer and what the service's metrics say of its problem."""

    allocation: Allocation
    forecast_coverage: float | None
    """:attr:`Problem.forecast_coverage`, in [0, 1]; None without forecasts."""
    forecasts_used: bool
    """:attr:`Problem.forecasts_used`."""


def plan(
    source: Source, solver: Solver, built: Callable[[Problem], None] | None = None
) -> Plan | None:
    """Build the problem now (:func:`build_problem`) and solve it with ``solver``; None when
    there is nothing to decide. Runs in the solver process, or in the service's worker thread.

    Args:
        built: called with the problem between the build and the solve (the solver process
            tells the service the solve's time limit).
    """
    snapshot = build_problem(source)
    if snapshot is None:
        return None
    problem, backend = snapshot
    if built is not None:
        built(problem)
    allocation = solver(problem, backend)
    return Plan(allocation, problem.forecast_coverage, problem.forecasts_used)


def build_problem(service: Source) -> tuple[Problem, str] | None:
    """The optimizer's problem now, and the backend to solve it with; None when there is
    nothing to decide (no active job or no allocatable node).

    Per job (:func:`optimizer_job`): its rates, learned from its reports over its model's
    table rows (or the default curve), its measured rescale costs and its user. Admission
    (:func:`interstice.optimizer.admission.admit`): every running job, then queued jobs in
    submission order, fair between users (:func:`~interstice.optimizer.admission.fair_order`),
    while the admitted ones cannot already use every allocatable node (a
    job whose ``min_nodes`` exceed the pool counts 0 usable nodes), at most
    ``max_active_jobs`` in all when set; a job's usable nodes are
    :func:`~interstice.optimizer.admission.usable_nodes` at ``admission_efficiency``.
    Forecasts (``Problem.idle_forecast_s``): :func:`idle_forecast_s` of the allocatable
    nodes whose newest scheduler event gave an ``until``; None when none did. They enter
    the model only while the forecast coverage is at least the objective's
    ``forecast_min_coverage``: :func:`state.forecast_coverage` of the ended idle intervals,
    or while fewer than 50 have ended the share of the pool that has a forecast
    (:func:`~interstice.optimizer.coverage.solve_coverage`). The pool is
    :func:`state.allocatable`'s: in multi-user mode, only nodes whose agent runs jobs as
    their owners.
    """
    multi_user = service.settings.multi_user
    with service.db.read() as session:
        table = stored_table(session)
        nodes = state.node_view(session, multi_user)
        pool = nodes.pool
        jobs = list(
            session.scalars(select(Job).where(Job.state.in_(ACTIVE_JOB_STATES)).order_by(Job.id))
        )
        if not jobs or not pool:
            return None
        objective = stored_objective(session)
        in_pool = set(pool)
        held = nodes.held
        observations = _observations(session, [j.id for j in jobs])
        costs = _rescale_costs(session, [j.id for j in jobs])
        names = usage.token_names(session, (j.owner_token_id for j in jobs if not j.owner_name))
        candidates = []
        for job in jobs:
            candidate = optimizer_job(
                job,
                table,
                observations.get(job.id, []),
                costs.get(job.id, ([], [])),
                tuple(n for n in held.get(job.id, ()) if n in in_pool),
                objective.reclaim_loss_s,
                usage.job_user(job, names),
            )
            if candidate is not None:
                candidates.append((job.state == "running", candidate))
        running = [c for is_running, c in candidates if is_running]
        queued = [c for is_running, c in candidates if not is_running]
        # fair between users: a user's many queued jobs do not keep another's out
        order = fair_order([c.user for c in queued], [c.user for c in running])
        queued = [queued[i] for i in order]
        # usable nodes (optimizer/admission.py): the most the job runs on efficiently on
        # its own curve or the table, or 0 while it cannot start (min_nodes above the pool,
        # or a start that the horizon does not pay for): it must not hold the pool's place
        horizon = horizon_s(session, objective, len(pool), multi_user)

        def usable(job: OptimizerJob) -> int:
            return usable_nodes(
                job.own_table or table,
                job.model,
                job.min_nodes,
                job.max_nodes,
                len(pool),
                service.settings.admission_efficiency,
                job.rescale_up_s,
                horizon,
            )

        k = admit(
            [usable(c) for c in queued],
            [usable(c) for c in running],
            len(pool),
            service.settings.max_active_jobs,
        )
        problem_jobs = sorted(
            running + queued[:k], key=lambda c: state.parse_id(c.job_id, "j") or 0
        )
        if not problem_jobs:
            return None
        # the pool's own only: the pool and the untils are two reads, not one snapshot (read
        # committed; SQLite's reads outside a transaction), and a node that entered the pool
        # between them would give more forecasts than idle nodes (a coverage above 1)
        untils = state.allocatable_untils(session, multi_user)
        untils = {node: until for node, until in untils.items() if node in in_pool}
        forecasts = idle_forecast_s(untils, utcnow()) or None
        problem = Problem(
            idle_nodes=tuple(pool),
            jobs=tuple(problem_jobs),
            scalability=table or ScalabilityTable(points=default_curve(1)),
            weights=Weights(
                throughput=objective.throughput,
                speedup=objective.speedup,
                node_seconds=objective.node_seconds,
                fairness=objective.fairness,
                priority=objective.priority,
                churn=objective.churn,
                early_finish=objective.early_finish,
                completion_s=objective.completion_s,
            ),
            horizon_s=horizon,
            time_limit_s=objective.time_limit_s,
            relative_gap=objective.relative_gap,
            idle_forecast_s=forecasts,
            forecast_classes=objective.forecast_classes,
            forecast_coverage=(
                solve_coverage(state.forecast_coverage(session), forecasts, pool)
                if forecasts
                else None
            ),
            forecast_min_coverage=objective.forecast_min_coverage,
        )
        return problem, objective.backend


def optimizer_job(
    job: Job,
    table: ScalabilityTable | None,
    observations: list[RateObservation],
    costs: tuple[list[float], list[float]],
    nodes: tuple[str, ...],
    reclaim_loss_s: float = 0.0,
    user: str | None = None,
) -> OptimizerJob | None:
    """What the optimizer is told of ``job``; None when it can never run (``min_nodes``
    above every count its curve has).

    Rates: with its model in ``table`` and no observation, the table's rows; otherwise
    ``Job.rates = learning.fit_curve(prior, observations, max_nodes)`` with the model's rows
    (or ``learning.default_curve``) as prior. Depths: an ``spb`` job any depth of its curve,
    other parallelisms depth 0 only (their workers accept no other). Rescale costs: the
    median of the newest measured ones per direction (``costs`` = (up, down) seconds), else
    the job's declared ``rescale_up_s``/``rescale_down_s``; ``reclaim_loss_s``, what a
    reclaim costs beyond a shrink, seconds, is the objective's; ``user``, the unit of the
    objective's fairness term, its owner (:func:`interstice.api.services.usage.job_user`).
    """
    in_table = table is not None and job.model in table.models
    prior: tuple[ScalabilityPoint, ...] | None = None
    if in_table:
        assert table is not None
        prior = tuple(p for p in table.points if p.model == job.model)
    rates = None
    if observations or not in_table:
        rates = fit_curve(prior, observations, job.max_nodes)
    curve = ScalabilityTable(points=rates) if rates is not None else table
    assert curve is not None
    name = job.model or job.job_id  # any name when the job has its own rates
    curve_model = rates[0].model if rates is not None else name
    depths = curve.depths(curve_model) if job.parallelism == "spb" else (0,)
    if 0 not in curve.depths(curve_model) and job.parallelism != "spb":
        return None
    largest = max(curve.max_nodes(curve_model, d) for d in depths)
    if largest < job.min_nodes:
        return None
    up, down = costs
    return OptimizerJob(
        job_id=job.job_id,
        model=name,
        min_nodes=job.min_nodes,
        max_nodes=min(job.max_nodes, largest),
        nodes=nodes,
        spb_depth=job.spb_depth if job.spb_depth in depths else min(depths),
        spb_depths=depths,
        priority=job.priority,
        samples_remaining=max(0.0, job.total_samples - job.samples_done),
        rescale_up_s=statistics.median(up) if up else job.rescale_up_s,
        rescale_down_s=statistics.median(down) if down else job.rescale_down_s,
        submitted_s=job.submitted_at.timestamp(),
        reclaim_loss_s=reclaim_loss_s,
        rates=rates,
        user=user,
    )


def _observations(session: Session, job_ids: list[int]) -> dict[int, list[RateObservation]]:
    """The learned rates of ``job_ids`` as observations weighted by their report counts."""
    found: dict[int, list[RateObservation]] = {}
    for rate in session.scalars(select(JobRate).where(JobRate.job_id.in_(job_ids))):
        found.setdefault(rate.job_id, []).append(
            RateObservation(
                nodes=rate.nodes,
                spb_depth=rate.spb_depth,
                samples_per_s=rate.samples_per_s,
                weight=rate.reports,
            )
        )
    return found


def _rescale_costs(
    session: Session, job_ids: list[int]
) -> dict[int, tuple[list[float], list[float]]]:
    """Measured rescale costs of ``job_ids``, seconds: (growths and starts, other moves to a
    non-empty node set), the newest :data:`RESCALE_COSTS_KEPT` of each."""
    found: dict[int, tuple[list[float], list[float]]] = {}
    rows = session.scalars(
        select(Rescale)
        .where(Rescale.job_id.in_(job_ids), Rescale.cost_s.is_not(None))
        .order_by(Rescale.id.desc())
    )
    for r in rows:
        up, down = found.setdefault(r.job_id, ([], []))
        kept = up if len(r.to_nodes) > len(r.from_nodes) else down
        if len(kept) < RESCALE_COSTS_KEPT:
            kept.append(r.cost_s)  # type: ignore[arg-type]
    return found


def apply_allocation(service: Service, allocation: Allocation) -> Changes:
    """Write ``allocation`` and its commands in one transaction.

    The world may have moved during the solve: nodes that left the pool are dropped from a
    job's new set (a set below ``min_nodes`` becomes empty), jobs that ended are skipped.
    Shrinking jobs are moved before growing ones, so a node changing hands gets ``stop``
    before ``start``. The solve is recorded (each job's count, depth and rate, not its node
    names) and all but the newest :data:`SOLVES_KEPT` records are deleted.
    """
    changes = Changes()
    with service.db.write() as session:
        view = state.node_view(session, service.settings.multi_user)
        pool, held = set(view.pool), view.held
        numbers = {share.job_id: parse_id(share.job_id, "j") for share in allocation.jobs}
        # each active job's bounds and depth: the jobs that move are loaded whole below
        active = {
            number: (min_nodes, depth)
            for number, min_nodes, depth in session.execute(
                select(Job.id, Job.min_nodes, Job.spb_depth).where(
                    Job.id.in_([n for n in numbers.values() if n is not None]),
                    Job.state.in_(ACTIVE_JOB_STATES),
                )
            )
        }
        moving = []
        for share in allocation.jobs:
            number = numbers[share.job_id]
            if number not in active:
                continue
            min_nodes, depth = active[number]
            target = sorted(n for n in share.node_names if n in pool)
            if len(target) < min_nodes:
                target = []
            from_nodes = held.get(number, [])
            if not state.unchanged(depth, from_nodes, target, share.spb_depth):
                moving.append((len(target) - len(from_nodes), number, target, share.spb_depth))
        jobs = session.scalars(select(Job).where(Job.id.in_([m[1] for m in moving])))
        loaded = {job.id: job for job in jobs}
        holder = {node: job_id for job_id, nodes in held.items() for node in nodes}
        for growth, number, target, depth in sorted(moving, key=lambda m: m[:2]):
            job = loaded[number]
            seconds = job.rescale_up_s if growth > 0 else job.rescale_down_s
            from_nodes = held.get(job.id, [])  # as the moves before this one left them
            state.move_job(
                session,
                job,
                target,
                depth,
                reason="allocation",
                deadline=utcnow() + timedelta(seconds=seconds),
                changes=changes,
                from_nodes=from_nodes,
            )
            # the moves after this one see its nodes as it left them
            for node in from_nodes:
                holder.pop(node, None)
            for node in target:
                if holder.get(node, job.id) != job.id:
                    held[holder[node]].remove(node)
                holder[node] = job.id
            held[job.id] = target
        record = AllocationRecord(
            status=allocation.status,
            backend=allocation.backend,
            objective=allocation.objective,
            solve_time_s=allocation.solve_time_s,
            horizon_s=allocation.horizon_s,
            # the counts, not the names: GET /v1/solves shows no names, and 10,000 of them
            # made each record 160 kB
            jobs=[share.model_dump(mode="json", exclude=UNRECORDED) for share in allocation.jobs],
        )
        session.add(record)
        session.flush()
        session.execute(
            delete(AllocationRecord).where(AllocationRecord.id <= record.id - SOLVES_KEPT)
        )
    return changes


class ControlLoop:
    """The background tasks of one service process.

    Every replica sweeps: it writes the leases its agents renewed to the database. The
    leader (:mod:`interstice.api.control.leader`: always on SQLite, the advisory lock's holder on
    PostgreSQL) also solves and marks silent agents lost. On PostgreSQL, wake-ups and
    staleness travel between replicas (:class:`interstice.api.control.notify.PostgresRelay`): a
    follower's events reach the leader's solve loop, the leader's commands wake long-polls
    held by any replica.
    """

    def __init__(self, service: Service, solver: Solver) -> None:
        self.service = service
        self.solver = solver
        """Used in the worker thread; the solver process gets it as it starts."""
        self.solves = 0
        self.solver_process: SolverProcess | None = None
        """Where the leader builds and solves; None: in the worker thread (``solver_process``
        off, or an in-memory SQLite database, which no other process sees)."""
        in_memory = service.db.engine.url.database in (None, "", ":memory:")
        if service.settings.solver_process and not in_memory:
            from interstice.api.control.solver_process import SolverProcess

            self.solver_process = SolverProcess(service.settings, solver)
        self._stale: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="interstice-solve")
        self._tasks: list[asyncio.Task[None]] = []
        self._solving: asyncio.Task[None] | None = None
        url = service.settings.db_url
        self.relay: PostgresRelay | None = None
        self.leadership: AlwaysLeader | PostgresLeadership
        if service.db.engine.dialect.name == "postgresql":
            self.relay = PostgresRelay(url, service.notifier, self._stale_here)
            self.leadership = PostgresLeadership(url, self._elected, self._deposed)
        else:
            self.leadership = AlwaysLeader(self._elected)

    @property
    def leader(self) -> bool:
        """Whether this process runs the solver and marks agents lost."""
        return self.leadership.leader

    def mark_stale(self) -> None:
        """Ask for a solve (thread-safe; coalesced with others within ``debounce_s``): here
        on the leader, by the relay from a follower."""
        if self.leader:
            self._stale_here()
        elif self.relay is not None:
            self.relay.send_stale()

    def _stale_here(self) -> None:
        if self._loop is not None and self._stale is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stale.set)

    async def start(self) -> None:
        """Start the relay, the sweeper and the contention for leadership on the running
        loop; a process elected leader solves at once."""
        self._loop = asyncio.get_running_loop()
        self._stale = asyncio.Event()
        self.service.notifier.bind(self._loop)
        self.service.on_stale = self.mark_stale
        self.service.metrics.leader.set(0)
        if self.relay is not None:
            self.service.leader_since = None  # a follower until the lock is taken
            await self.relay.start()
        self._tasks = [asyncio.create_task(self._sweep_forever(), name="interstice-sweeper")]
        await self.leadership.start()

    async def stop(self) -> None:
        """Step down and cancel every task; a solve in its thread is abandoned, the solver
        process ended."""
        await self.leadership.stop()
        await self._deposed()  # SQLite's leader is never deposed: its solve loop ends here
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.relay is not None:
            await self.relay.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _elected(self) -> None:
        assert self._stale is not None
        self.service.leader_since = time.monotonic()
        if self.solver_process is not None:
            self.solver_process.start()  # it imports while the first events arrive
        self._solving = asyncio.create_task(self._solve_forever(), name="interstice-control")
        self.service.metrics.leader.set(1)
        self._stale.set()

    async def _deposed(self) -> None:
        self.service.leader_since = None
        self.service.metrics.leader.set(0)
        if self._solving is not None:
            self._solving.cancel()
            await asyncio.gather(self._solving, return_exceptions=True)
            self._solving = None
        if self.solver_process is not None:
            await asyncio.to_thread(self.solver_process.stop)

    async def _in_thread(self, fn: Callable[..., object], *args: object) -> object:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._executor, fn, *args)

    async def _solve_forever(self) -> None:
        assert self._stale is not None
        settings = self.service.settings
        while True:
            await self._stale.wait()
            await asyncio.sleep(settings.debounce_s)
            self._stale.clear()
            try:
                await self._solve_once()
            except Exception:
                log.exception("solve failed; retrying in %.1f s", settings.heartbeat_interval_s)
                self.service.metrics.solver_status.labels("error").inc()
                await asyncio.sleep(settings.heartbeat_interval_s)
                self._stale.set()

    async def _solve_once(self) -> None:
        if self.solver_process is not None:
            planned = await self.solver_process.plan()
        else:
            planned = await self._in_thread(plan, self.service, self.solver)  # type: ignore[assignment]
        if planned is None:
            return
        allocation = planned.allocation
        metrics = self.service.metrics
        metrics.solve_seconds.observe(allocation.solve_time_s)
        metrics.solver_status.labels(allocation.status).inc()
        coverage = planned.forecast_coverage
        metrics.forecast_coverage.set(math.nan if coverage is None else coverage)
        metrics.forecasts_used.set(int(planned.forecasts_used))
        changes: Changes = await self._in_thread(apply_allocation, self.service, allocation)  # type: ignore[assignment]
        self.solves += 1
        changes.stale = False  # the loop's own moves do not call for another solve
        self.service.after_commit(changes)

    async def _sweep_forever(self) -> None:
        period_s = max(0.05, self.service.settings.heartbeat_interval_s / 2)
        while True:
            await asyncio.sleep(period_s)
            try:
                await asyncio.to_thread(leases.sweep, self.service)
                await asyncio.to_thread(stalls.sweep, self.service)
            except Exception:
                log.exception("lease or stall sweep failed")
