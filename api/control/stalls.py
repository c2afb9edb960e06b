"""Generations that never make a step: released so that the next solve starts a new one.

A generation starts when the service writes its commands (the job's newest ``Rescale``);
its workers' first report that names it and carries a step sets ``Job.generation_step``.
A running job whose generation has not reported a step ``generation_start_timeout_s`` after
it started (workers that hang before their first step, as in the pilot's known "generation
that never reports") counts a failure toward ``max_command_failures`` and is released from
all its nodes (rescale reason ``stalled``, the job ``queued``; its agents stop the hung
workers), or fails at the limit. Only the leader sweeps; 0 turns the sweep off.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from interstice.api.services import state
from interstice.api.store.tables import Job, Rescale, utcnow
from sqlalchemy import select

if TYPE_CHECKING:
    from interstice.api.service import Service

log = logging.getLogger("interstice.api")


def sweep(service: Service) -> int:
    """Release (or fail) every running job whose current generation started more than
    ``generation_start_timeout_s`` seconds ago and has reported no step.

    Returns:
        The number of jobs released or failed.
    """
    settings = service.settings
    timeout_s = settings.generation_start_timeout_s
    if timeout_s <= 0 or service.leader_since is None:
        return 0
    cutoff = utcnow() - timedelta(seconds=timeout_s)
    query = (
        select(Job, Rescale.at)
        .join(Rescale, (Rescale.job_id == Job.id) & (Rescale.generation == Job.generation))
        .where(Job.state == "running", Job.generation_step.is_(None), Rescale.at < cutoff)
    )
    with service.db.read() as session:  # the write lock only when there is something to do
        if not session.execute(query.limit(1)).first():
            return 0
    changes = state.Changes()
    with service.db.write() as session:
        stalled = session.execute(query).all()
        for job, started_at in stalled:
            what = (
                f"generation {job.generation} made no step in {timeout_s:g} s "
                f"(started {started_at:%Y-%m-%dT%H:%M:%S}Z)"
            )
            log.warning("job %s: %s; releasing it", job.job_id, what)
            job.failed_commands += 1
            state.fail_or_release(
                session, job, what, settings.max_command_failures, changes, release="stalled"
            )
    service.after_commit(changes)
    return len(stalled)
