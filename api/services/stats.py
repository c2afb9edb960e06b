"""The admin's measures of how the idle nodes were used, from the durable state:
idle time from the scheduler's node events, held time from the jobs' rescale records,
samples from the jobs and their metrics series, learned rates for models outside the table.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from datetime import datetime

from interstice.api.schemas.reports import StatsPublic
from interstice.api.store.tables import IdleInterval, Job, JobMetric, JobRate, Node, Rescale
from interstice.optimizer import ScalabilityTable
from sqlalchemy import select
from sqlalchemy.orm import Session


def compute_stats(
    session: Session, table: ScalabilityTable | None, since: datetime | None, until: datetime
) -> StatsPublic:
    """The measures of :class:`~interstice.api.schemas.reports.StatsPublic` over [since, until].

    Args:
        session: a read session.
        table: the scalability table (per-node rates of the models in it), or None.
        since: start of the window; None: from the first record.
        until: end of the window (now).
    """
    start = since or datetime.min.replace(tzinfo=until.tzinfo)
    idle_s = sum(
        _overlap(i.started_at.timestamp(), i.started_at.timestamp() + i.length_s, start, until)
        for i in session.scalars(select(IdleInterval))
    ) + sum(
        _overlap(n.since.timestamp(), until.timestamp(), start, until)
        for n in session.scalars(select(Node).where(Node.state == "idle"))
    )
    jobs = {j.id: j for j in session.scalars(select(Job))}
    rescales: dict[int, list[Rescale]] = {}
    for r in session.scalars(select(Rescale).order_by(Rescale.id)):
        rescales.setdefault(r.job_id, []).append(r)
    held_s = sum(_held_s(moves, start, until) for moves in rescales.values())
    work_s = sum(
        samples / rate
        for job in jobs.values()
        if (rate := _best_per_node_rate(session, job, table))
        and (samples := _samples_in(session, job, since)) > 0
    )
    finished = [
        (j.finished_at - j.submitted_at).total_seconds()
        for j in jobs.values()
        if j.state == "finished" and j.finished_at is not None and _within(j.finished_at, since)
    ]
    waits = [
        (first.at - jobs[job_id].submitted_at).total_seconds()
        for job_id, moves in rescales.items()
        if (first := next((r for r in moves if r.to_nodes), None)) is not None
        and _within(first.at, since)
    ]
    return StatsPublic(
        since=since,
        until=until,
        idle_node_hours=idle_s / 3600,
        harvested_node_hours=held_s / 3600,
        utilization=held_s / idle_s if idle_s > 0 else None,
        harvest=work_s / idle_s if idle_s > 0 else None,
        jobs_finished=len(finished),
        jct_mean_s=statistics.fmean(finished) if finished else None,
        jct_p50_s=statistics.median(finished) if finished else None,
        jct_p95_s=_nearest_rank(finished, 0.95),
        wait_mean_s=statistics.fmean(waits) if waits else None,
    )


def _within(at: datetime, since: datetime | None) -> bool:
    return since is None or at >= since


def _overlap(lo: float, hi: float, start: datetime, until: datetime) -> float:
    """Seconds of [lo, hi] (unix times) within [start, until]."""
    return max(0.0, min(hi, until.timestamp()) - max(lo, _timestamp(start)))


def _timestamp(at: datetime) -> float:
    return -math.inf if at.year == 1 else at.timestamp()


def _held_s(moves: Iterable[Rescale], start: datetime, until: datetime) -> float:
    """Node-seconds a job held within [start, until]: each rescale's node count until the
    next one (the last one's until ``until``)."""
    ordered = list(moves)
    ends = [r.at.timestamp() for r in ordered[1:]] + [until.timestamp()]
    return sum(
        len(r.to_nodes) * _overlap(r.at.timestamp(), end, start, until)
        for r, end in zip(ordered, ends, strict=True)
    )


def _best_per_node_rate(session: Session, job: Job, table: ScalabilityTable | None) -> float:
    """The job's best samples/s per node at depth 0: its model's table rows, else its own
    learned rates; 0 when neither exists."""
    if table is not None and job.model in table.models and 0 in table.depths(job.model):
        return max(
            p.samples_per_s / p.nodes
            for p in table.points
            if p.model == job.model and p.spb_depth == 0 and p.nodes > 0
        )
    rates = session.scalars(select(JobRate).where(JobRate.job_id == job.id, JobRate.spb_depth == 0))
    return max((r.samples_per_s / r.nodes for r in rates), default=0.0)


def _samples_in(session: Session, job: Job, since: datetime | None) -> float:
    """Samples the job trained after ``since`` (all of them for None): its samples done less
    its newest reported count at or before ``since`` (from the metrics series)."""
    done = min(float(job.total_samples), job.samples_done)
    if since is None:
        return done
    before = session.scalar(
        select(JobMetric.samples)
        .where(JobMetric.job_id == job.id, JobMetric.at <= since, JobMetric.samples.is_not(None))
        .order_by(JobMetric.id.desc())
        .limit(1)
    )
    if before is None and job.submitted_at < since and job.finished_at is not None:
        return 0.0 if job.finished_at <= since else done
    return max(0.0, done - (before or 0.0))


def _nearest_rank(values: list[float], q: float) -> float | None:
    """The q-quantile of ``values`` by the nearest-rank method, None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
