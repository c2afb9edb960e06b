"""Generations that make no progress: released so that the next solve starts a new one.

A generation starts when the service writes its commands (the job's newest ``Rescale``);
its workers' first report that names it and carries a step sets ``Job.generation_step``, and
every report whose step is beyond the job's newest (and that first step) sets
``Job.last_progress_at``. A running job counts a failure toward ``max_command_failures``
and is released from all its nodes (rescale reason ``stalled``, the job ``queued``; its
agents stop the hung workers, and the next solve starts a new generation, which resumes
from the job's last checkpoint), or fails at the limit, when its current generation

- has reported no step ``generation_start_timeout_s`` after it started (workers that hang
  before their first step, e.g. in a rendezvous, the script's imports or the checkpoint
  load), or
- has stepped, and neither the job's step has advanced nor the generation started within
  its progress bound (workers that hang mid-run, e.g. in a collective whose peer is gone,
  or a launcher whose rendezvous failed after its workers joined). The bound is the
  service's ``progress_timeout_s`` when set, else derived from the job's own report times:
  ``max(progress_timeout_floor_s, PROGRESS_TIMEOUT_FACTOR × m)``, with ``m`` the median
  interval between the job's newest :data:`INTERVALS_OBSERVED` + 1 progress reports (its
  metrics series; with fewer than two, the floor alone).

Only the leader sweeps; a timeout of 0 turns its half of the sweep off.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from datetime import datetime, timedelta
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from interstice.api.services import state
from interstice.api.store.tables import Job, JobMetric, Rescale, utcnow
from sqlalchemy import Select, or_, select
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from interstice.api.service import Service
    from interstice.api.settings import Settings

log = logging.getLogger("interstice.api")

PROGRESS_TIMEOUT_FACTOR = 20
"""The derived progress bound is this many median report intervals (at least the floor)."""
INTERVALS_OBSERVED = 100
"""The derived bound's median is over the intervals between the newest this + 1 reports."""

Describe = Callable[[Session, Job, datetime, datetime], str | None]
"""Why a candidate (job, its generation's start, now) is stalled, or None if it is not."""


def sweep(service: Service) -> int:
    """Release (or fail) every running job whose current generation made no first step
    within ``generation_start_timeout_s``, or no progress within its progress bound.

    Returns:
        The number of jobs released or failed.
    """
    if service.leader_since is None:
        return 0
    settings = service.settings
    released = 0
    if settings.generation_start_timeout_s > 0:
        released += _release(service, *_no_first_step(settings))
    if progress_floor_s(settings) > 0:
        released += _release(service, *_no_progress(settings))
    return released


def progress_floor_s(settings: Settings) -> float:
    """The least progress bound of any job, seconds (0: the progress sweep is off)."""
    if settings.progress_timeout_s is not None:
        return settings.progress_timeout_s
    return settings.progress_timeout_floor_s


def progress_bound_s(session: Session, job: Job, settings: Settings) -> tuple[float, str]:
    """``job``'s progress bound, seconds, and how it was found (see the module docstring).

    The median is over intervals between the job's stored progress reports (``JobMetric.at``,
    the service's receive times), which include its rescale pauses: the median keeps those
    few long intervals from moving the bound.
    """
    if settings.progress_timeout_s is not None:
        return settings.progress_timeout_s, "progress_timeout_s"
    floor_s = settings.progress_timeout_floor_s
    times = session.scalars(
        select(JobMetric.at)
        .where(JobMetric.job_id == job.id)
        .order_by(JobMetric.id.desc())
        .limit(INTERVALS_OBSERVED + 1)
    ).all()
    intervals = [(newer - older).total_seconds() for newer, older in pairwise(times)]
    if not intervals:
        return floor_s, "the floor; no report interval observed yet"
    median_s = statistics.median(intervals)
    bound_s = max(floor_s, PROGRESS_TIMEOUT_FACTOR * median_s)
    how = f"max({floor_s:g} s, {PROGRESS_TIMEOUT_FACTOR} × median interval {median_s:.1f} s)"
    return bound_s, how


def _current_generations() -> Select[Any]:
    """Running jobs with the start of their current generation."""
    return (
        select(Job, Rescale.at)
        .join(Rescale, (Rescale.job_id == Job.id) & (Rescale.generation == Job.generation))
        .where(Job.state == "running")
    )


def _no_first_step(settings: Settings) -> tuple[Select[Any], Describe]:
    timeout_s = settings.generation_start_timeout_s

    def describe(_: Session, job: Job, started_at: datetime, now: datetime) -> str:
        return (
            f"generation {job.generation} made no step in {timeout_s:g} s "
            f"(started {started_at:%Y-%m-%dT%H:%M:%S}Z)"
        )

    cutoff = utcnow() - timedelta(seconds=timeout_s)
    query = _current_generations().where(Job.generation_step.is_(None), Rescale.at < cutoff)
    return query, describe


def _no_progress(settings: Settings) -> tuple[Select[Any], Describe]:
    def describe(session: Session, job: Job, started_at: datetime, now: datetime) -> str | None:
        since = max(started_at, job.last_progress_at or started_at)
        bound_s, how = progress_bound_s(session, job, settings)
        if (now - since).total_seconds() <= bound_s:
            return None
        return (
            f"generation {job.generation} made no progress in {bound_s:g} s ({how}; "
            f"last at step {job.last_step}, {since:%Y-%m-%dT%H:%M:%S}Z)"
        )

    # every job's bound is at least the floor: only those idle that long are looked at
    cutoff = utcnow() - timedelta(seconds=progress_floor_s(settings))
    query = _current_generations().where(
        Job.generation_step.is_not(None),
        Rescale.at < cutoff,
        or_(Job.last_progress_at.is_(None), Job.last_progress_at < cutoff),
    )
    return query, describe


def _stalled(session: Session, query: Select[Any], describe: Describe) -> list[tuple[Job, str]]:
    now = utcnow()
    found = []
    for job, started_at in session.execute(query).all():
        what = describe(session, job, started_at, now)
        if what is not None:
            found.append((job, what))
    return found


def _release(service: Service, query: Select[Any], describe: Describe) -> int:
    """Release (or fail) the jobs of ``query`` that ``describe`` finds stalled: found in a
    read, taking the write lock only when there is something to do, and checked again
    under it."""
    with service.db.read() as session:
        ids = [job.id for job, _ in _stalled(session, query, describe)]
    if not ids:
        return 0
    settings = service.settings
    changes = state.Changes()
    with service.db.write() as session:
        stalled = _stalled(session, query.where(Job.id.in_(ids)), describe)
        for job, what in stalled:
            log.warning("job %s: %s; releasing it", job.job_id, what)
            job.failed_commands += 1
            state.fail_or_release(
                session, job, what, settings.max_command_failures, changes, release="stalled"
            )
    service.after_commit(changes)
    return len(stalled)
