"""Harvest per user and day (``GET /v1/usage``, ``interstice usage``, the per-user gauges).

A job's node-seconds come from its rescale records (each record's node count, from its time
to the next record's; a job that ends gets a record with no node, so nothing runs on), its
samples from its metrics series (the increments of the reported cumulative count, capped at
the job's ``total_samples``). Both are split at UTC midnights and clipped to the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

from interstice.api.auth.tokens import Principal, public_id
from interstice.api.schemas.usage import UsagePublic, UsagesPublic
from interstice.api.store.tables import Job, JobMetric, Rescale, Token, utcnow
from sqlalchemy import select
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from interstice.api.service import Service


def job_user(job: Job, token_names: Mapping[int, str]) -> str:
    """Who ``job`` belongs to: its owner's Unix account name, else (single-user mode) the
    name of the token that submitted it. The one definition of a job's user, for the
    optimizer's fairness term (``interstice.optimizer.Job.user``) and for usage."""
    return job.owner_name or token_names.get(job.owner_token_id, public_id(job.owner_token_id))


def principal_user(who: Principal) -> str:
    """The user a caller is, by :func:`job_user`'s rule: its Unix account, else its
    token's name."""
    return who.unix_name or who.name


def token_names(session: Session, token_ids: Iterable[int] | None = None) -> dict[int, str]:
    """Tokens' (and MUNGE principals') names by id: those of ``token_ids``, else every one."""
    query = select(Token.id, Token.name)
    if token_ids is not None:
        query = query.where(Token.id.in_(set(token_ids)))
    return {token_id: name for token_id, name in session.execute(query)}


@dataclass
class _Day:
    node_s: float = 0.0
    samples: float = 0.0
    jobs: set[int] = field(default_factory=set)


def compute_usage(
    session: Session, since: datetime | None, until: datetime, user: str | None = None
) -> list[UsagePublic]:
    """Node-hours and samples per user and UTC day within [since, until].

    Args:
        session: a read session.
        since: start of the window (aware UTC); None: from the first record.
        until: end of the window (aware UTC).
        user: only this user's rows; None: every user's.

    Returns:
        Rows by user, then day; a (user, day) with neither node time nor samples has none.
    """
    start = since or datetime.min.replace(tzinfo=UTC)
    names = token_names(session)
    owners = {job.id: job_user(job, names) for job in session.scalars(select(Job))}
    jobs = {job_id: owner for job_id, owner in owners.items() if user in (None, owner)}
    totals = {
        job_id: float(total)
        for job_id, total in session.execute(
            select(Job.id, Job.total_samples).where(Job.id.in_(jobs))
        )
    }
    days: dict[tuple[str, date], _Day] = {}
    moves: dict[int, list[Rescale]] = {}
    for r in session.scalars(select(Rescale).where(Rescale.job_id.in_(jobs)).order_by(Rescale.id)):
        moves.setdefault(r.job_id, []).append(r)
    for job_id, ordered in moves.items():
        ends = [r.at for r in ordered[1:]] + [until]
        for r, end in zip(ordered, ends, strict=True):
            for day, seconds in _by_day(_aware(r.at), _aware(end), start, until):
                if r.to_nodes and seconds > 0:
                    entry = days.setdefault((jobs[job_id], day), _Day())
                    entry.node_s += len(r.to_nodes) * seconds
                    entry.jobs.add(job_id)
    reports = session.execute(
        select(JobMetric.job_id, JobMetric.at, JobMetric.samples)
        .where(JobMetric.job_id.in_(jobs), JobMetric.samples.is_not(None))
        .order_by(JobMetric.job_id, JobMetric.id)
    )
    before: dict[int, float] = {}
    for job_id, at, samples in reports:
        done = min(float(samples), totals[job_id])
        gained = done - before.get(job_id, 0.0)
        before[job_id] = max(done, before.get(job_id, 0.0))
        at = _aware(at)
        if gained > 0 and start <= at <= until:
            entry = days.setdefault((jobs[job_id], at.date()), _Day())
            entry.samples += gained
            entry.jobs.add(job_id)
    return [
        UsagePublic(
            user=owner,
            day=day,
            node_hours=entry.node_s / 3600,
            samples=entry.samples,
            jobs=len(entry.jobs),
        )  # fmt: skip
        for (owner, day), entry in sorted(days.items())
    ]


def user_totals(session: Session) -> dict[str, tuple[float, float]]:
    """Every user's lifetime (node-seconds, samples), for the per-user gauges; users
    with jobs but no harvest yet at 0."""
    names = token_names(session)
    totals = {job_user(job, names): (0.0, 0.0) for job in session.scalars(select(Job))}
    for row in compute_usage(session, None, utcnow()):
        node_s, samples = totals[row.user]
        totals[row.user] = (node_s + row.node_hours * 3600, samples + row.samples)
    return totals


def usage(
    service: Service, user: str | None, since: datetime | None, until: datetime | None
) -> UsagesPublic:
    """:func:`compute_usage` from ``since`` to ``until`` (None: now)."""
    until = until or utcnow()
    with service.db.read() as session:
        rows = compute_usage(session, since, until, user)
    return UsagesPublic(data=rows, count=len(rows), since=since, until=until)


def set_user_gauges(service: Service) -> None:
    """Set ``interstice_user_node_seconds`` and ``interstice_user_samples`` for every user
    with a job (bounded by the users that exist; a user whose jobs are gone drops out)."""
    with service.db.read() as session:
        totals = user_totals(session)
    m = service.metrics
    m.user_node_seconds.clear()
    m.user_samples.clear()
    for owner, (node_s, samples) in totals.items():
        m.user_node_seconds.labels(owner).set(node_s)
        m.user_samples.labels(owner).set(samples)


def _aware(at: datetime) -> datetime:
    """``at`` as aware UTC (SQLite returns naive datetimes)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _by_day(
    lo: datetime, hi: datetime, start: datetime, until: datetime
) -> Iterable[tuple[date, float]]:
    """Seconds of [lo, hi) within [start, until], per UTC day."""
    lo, hi = max(lo, start), min(hi, until)
    while lo < hi:
        midnight = datetime.combine(lo.date() + timedelta(days=1), datetime.min.time(), UTC)
        end = min(hi, midnight)
        yield lo.date(), (end - lo).total_seconds()
        lo = end
