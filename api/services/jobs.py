"""Jobs: submit, list, inspect, cancel, and read a job's metrics series and rank logs.

Functions take the running :class:`~interstice.api.service.Service` and the caller's
:class:`~interstice.api.auth.tokens.Principal`: a user sees its own jobs, an admin every job. A
caller owns the jobs it submitted and, with a Unix account (MUNGE, or a bound token), the jobs
that run as that account (multi-user mode), whichever way they were submitted. They are
synchronous (FastAPI runs them in its thread pool).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from interstice.api.auth.tokens import Principal
from interstice.api.limits import short
from interstice.api.schemas.agents import CommandJob, JobOwner
from interstice.api.schemas.jobs import (
    CommandError,
    JobCreate,
    JobLogPublic,
    JobMetricPublic,
    JobMetricsPublic,
    JobPublic,
    JobsPublic,
    RescalePublic,
)
from interstice.api.services import idempotency, scalability, state, usage
from interstice.api.services.logs import Owned, read_rank_log
from interstice.api.services.state import ACTIVE_JOB_STATES, Changes, Conflict, NotFound, parse_id
from interstice.api.store.tables import Agent, Command, Job, JobMetric, Rescale, Token
from sqlalchemy import ColumnElement, String, cast, func, or_, select
from sqlalchemy.orm import Session

from interstice.wire import DEFAULT_ENTRYPOINT, checkpoint_dir, job_dir

if TYPE_CHECKING:
    from interstice.api.service import Service

log = logging.getLogger("interstice.api")

LOG_READ_MAX_BYTES = 1 << 20
"""Most bytes of a log one ``GET /v1/jobs/{id}/logs`` answers."""


def create_job(
    service: Service,
    who: Principal,
    body: JobCreate,
    idempotency_key: str | None = None,
) -> tuple[JobPublic, bool]:
    """Admit a job (queued until the next solve gives it nodes) and create its directory
    ``<checkpoint_root>/<job_id>`` (mode 0700) with ``checkpoints/`` inside.

    In multi-user mode the job's owner is the caller's Unix account (it runs as it), and
    its directory is ``<checkpoint_root>/<owner>/<job_id>``, which
    the service does not create: the owner's processes on the nodes do (no process of the
    service writes into a folder a user controls).

    A model of the scalability table is checked against it (only an ``spb`` job may run
    at a depth > 0); any other model (or none) is accepted, at SPB depth 0, and scheduled
    from the default scaling curve until the job's own reported rates replace it.

    With ``idempotency_key``, a retry of the same body by the same token answers the job
    the first request created (see :mod:`interstice.api.services.idempotency`).

    Returns:
        The job, and whether it is the one an earlier request with the key created.

    Raises:
        Conflict: ``dp`` on a table model without depth 0, ``min_nodes`` above the
            model's largest measured count, the job directory cannot be created, or (in
            multi-user mode) the caller has no Unix account.
        idempotency.KeyReused: the key was used by this token for a different body.
        sqlalchemy.exc.IntegrityError: another replica stored the key since the lookup
            (nothing was written; a second call answers that replica's job).
    """
    changes = Changes(stale=True)
    multi_user = service.settings.multi_user
    if multi_user and who.unix_uid is None:
        raise Conflict(
            f"multi-user mode: a job runs as a Unix account, and {who.name}'s token is bound "
            "to none; submit with MUNGE or a token created with --unix-user"
        )
    with service.db.write() as session:
        if idempotency_key is not None:
            earlier = idempotency.earlier_job(session, who.token_id, idempotency_key, body)
            if earlier is not None:
                return _job_public(session, earlier), True
        table = scalability.stored(session)
        depths: tuple[int, ...] = (0,)
        if table is not None and body.model in table.models:
            if body.parallelism == "spb":
                depths = table.depths(body.model)
            elif 0 not in table.depths(body.model):
                raise Conflict(
                    f"model {body.model!r} has no spb_depth 0 row; {body.parallelism} needs one"
                )
            largest = max(table.max_nodes(body.model, d) for d in depths)
            if body.min_nodes > largest:
                raise Conflict(
                    f"min_nodes {body.min_nodes} is above the largest measured node count "
                    f"{largest} of model {body.model!r}"
                )
        job = Job(
            owner_token_id=who.token_id,
            state="queued",
            model=body.model,
            min_nodes=body.min_nodes,
            max_nodes=body.max_nodes,
            total_samples=body.total_samples,
            samples_done=0.0,
            priority=body.priority,
            parallelism=body.parallelism,
            global_batch_size=body.global_batch_size,
            rescale_up_s=body.rescale_up_s,
            rescale_down_s=body.rescale_down_s,
            entrypoint=body.entrypoint,
            command=body.command,
            workdir=body.workdir,
            env=body.env,
            nproc_per_node=str(body.nproc_per_node),
            job_dir="",
            spb_depth=min(depths),
            generation=0,
            failed_commands=0,
            owner_name=who.unix_name if multi_user else None,
            owner_uid=who.unix_uid if multi_user else None,
        )
        session.add(job)
        session.flush()
        if idempotency_key is not None:  # before the folder: a key another replica
            # stored since the lookup fails this flush, leaving nothing behind
            idempotency.remember(session, who.token_id, idempotency_key, body, job.id)
            session.flush()
        root = service.settings.checkpoint_root.resolve()
        if multi_user:
            job.job_dir = str(job_dir(root / str(who.unix_name), job.job_id))
        else:
            folder = job_dir(root, job.job_id)
            _make_job_dir(folder)
            job.job_dir = str(folder)
        public = _job_public(session, job)
    service.after_commit(changes)
    return public, False


def _owned_by(who: Principal) -> ColumnElement[bool]:
    """The jobs ``who`` owns: those it submitted, and those of its Unix account."""
    mine = Job.owner_token_id == who.token_id
    return mine if who.unix_uid is None else or_(mine, Job.owner_uid == who.unix_uid)


def _owns(who: Principal, job: Job) -> bool:
    """Whether ``who`` owns ``job`` (:func:`_owned_by`)."""
    return job.owner_token_id == who.token_id or (
        who.unix_uid is not None and job.owner_uid == who.unix_uid
    )


def _visible_job(session: Session, who: Principal, job_id: str) -> Job:
    number = parse_id(job_id, "j")
    job = None if number is None else session.get(Job, number)
    if job is None or (who.role != "admin" and not _owns(who, job)):
        raise NotFound(f"job {short(job_id)} not found")
    return job


def list_jobs(
    service: Service,
    who: Principal,
    job_state: str | None,
    limit: int,
    offset: int,
    *,
    user: str | None = None,
    name: str | None = None,
) -> JobsPublic:
    """Jobs the caller may see (its own; all for admin), newest first; ``count`` is the
    total before ``limit``/``offset``. ``user``: only that user's jobs
    (:func:`~interstice.api.services.usage.job_user`); ``name``: only jobs whose model,
    entrypoint or command holds that text, case-insensitive."""
    with service.db.read() as session:
        query = select(Job)
        if who.role != "admin":
            query = query.where(_owned_by(who))
        if job_state is not None:
            query = query.where(Job.state == job_state)
        if user is not None:
            by_token = select(Token.id).where(Token.name == user)
            query = query.where(
                or_(
                    Job.owner_name == user,
                    Job.owner_name.is_(None) & Job.owner_token_id.in_(by_token),
                )
            )
        if name is not None:
            columns = (Job.model, Job.entrypoint, cast(Job.command, String))
            query = query.where(or_(*(c.icontains(name, autoescape=True) for c in columns)))
        count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
        jobs = session.scalars(query.order_by(Job.id.desc()).limit(limit).offset(offset))
        data = [_job_public(session, j) for j in jobs]
    return JobsPublic(data=data, count=count)


def get_job(service: Service, who: Principal, job_id: str) -> JobPublic:
    """One job. Raises NotFound for an unknown or someone else's job."""
    with service.db.read() as session:
        return _job_public(session, _visible_job(session, who, job_id))


def cancel_job(service: Service, who: Principal, job_id: str) -> JobPublic:
    """Cancel a queued or running job; its nodes get ``stop`` and are re-allocated.

    Raises:
        NotFound: unknown or someone else's job.
        Conflict: the job already ended.
    """
    changes = Changes()
    with service.db.write() as session:
        job = _visible_job(session, who, job_id)
        if job.state not in ACTIVE_JOB_STATES:
            raise Conflict(
                f"job {job_id} is {job.state}; only a queued or running job can be cancelled"
            )
        state.end_job(session, job, "cancelled", changes=changes)
        public = _job_public(session, job)
    service.after_commit(changes)
    return public


def job_metrics(service: Service, who: Principal, job_id: str, limit: int) -> JobMetricsPublic:
    """The newest ``limit`` reports of the job's series, oldest first. Raises NotFound."""
    with service.db.read() as session:
        job = _visible_job(session, who, job_id)
        rows = list(
            session.scalars(
                select(JobMetric)
                .where(JobMetric.job_id == job.id)
                .order_by(JobMetric.id.desc())
                .limit(limit)
            )
        )
    data = [JobMetricPublic.model_validate(r) for r in reversed(rows)]
    return JobMetricsPublic(data=data, count=len(data))


def job_log(
    service: Service, who: Principal, job_id: str, rank: int, tail: int, offset: int | None
) -> JobLogPublic:
    """Rank ``rank``'s log of every generation (see :func:`logs.read_rank_log`), at most
    :data:`LOG_READ_MAX_BYTES`.

    Raises:
        NotFound: unknown or someone else's job, or no log of that rank yet.
    """
    with service.db.read() as session:
        job = _visible_job(session, who, job_id)
        folder, owner_uid = job.job_dir, job.owner_uid
    found = read_rank_log(
        folder,
        rank,
        tail=tail,
        offset=offset,
        max_bytes=LOG_READ_MAX_BYTES,
        owner=None
        if owner_uid is None
        else Owned(service.settings.checkpoint_root.resolve(), owner_uid),
    )
    if found is None:
        raise NotFound(f"job {job_id} has no log of rank {rank} yet")
    data, start = found
    return JobLogPublic(
        job_id=job_id,
        rank=rank,
        text=data.decode(errors="replace"),
        offset=start,
        next_offset=start + len(data),
    )


def command_job(job: Job) -> CommandJob:
    """What an agent needs to run ``job`` (a ``start``/``rescale`` command's ``job``)."""
    return CommandJob(
        model=job.model,
        parallelism=job.parallelism,  # type: ignore[arg-type]
        global_batch_size=job.global_batch_size,
        total_samples=job.total_samples,
        min_nodes=job.min_nodes,
        max_nodes=job.max_nodes,
        entrypoint=_entrypoint(job),
        command=job.command,
        workdir=job.workdir,
        env=job.env,
        nproc_per_node=_nproc(job.nproc_per_node),  # type: ignore[arg-type]
        job_dir=job.job_dir,
        checkpoint_dir=str(checkpoint_dir(job.job_dir)),
        owner=None
        if job.owner_uid is None
        else JobOwner(name=str(job.owner_name), uid=job.owner_uid),
    )


def _make_job_dir(folder: Path) -> None:
    """Create the job directory (mode 0700, whatever the umask) with ``checkpoints/``.

    A folder already there (left by an earlier database that gave out the same id) is moved
    aside to ``<folder>.old-<unix time>``, so the new job never resumes another's checkpoint.

    Raises:
        Conflict: the folder cannot be created (the message says why).
    """
    try:
        if folder.exists():
            aside = folder.with_name(f"{folder.name}.old-{time.time_ns()}")
            log.warning("job directory %s exists; moved to %s", folder, aside)
            folder.rename(aside)
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700)
        folder.chmod(0o700)
        checkpoint_dir(folder).mkdir(mode=0o700)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(folder) else ""
        raise Conflict(f"cannot create the job directory {folder}: {exc.strerror}{where}") from None


def _nproc(stored: str) -> int | str:
    return stored if stored == "auto" else int(stored)


def _entrypoint(job: Job) -> str | None:
    return None if job.command is not None else job.entrypoint or DEFAULT_ENTRYPOINT


def _job_public(session: Session, job: Job) -> JobPublic:
    """The job as its owner sees it: its row, its command's fields (:func:`command_job`),
    its nodes, rescales and failed commands."""
    nodes = state.held_nodes(session, job.id)
    rescales = session.scalars(select(Rescale).where(Rescale.job_id == job.id).order_by(Rescale.id))
    errors = session.execute(
        select(Command, Agent.node)
        .join(Agent, Agent.id == Command.agent_id)
        .where(Command.job_id == job.id, Command.ok.is_(False))
        .order_by(Command.id)
    )
    return JobPublic(
        **command_job(job).model_dump(),
        job_id=job.job_id,
        state=job.state,  # type: ignore[arg-type]
        samples_done=min(job.total_samples, int(job.samples_done)),
        last_loss=job.last_loss,
        priority=job.priority,
        rescale_up_s=job.rescale_up_s,
        rescale_down_s=job.rescale_down_s,
        nodes=nodes,
        world_size=len(nodes),
        spb_depth=job.spb_depth,
        generation=job.generation,
        submitted_at=job.submitted_at,
        finished_at=job.finished_at,
        error=job.error,
        rescales=[RescalePublic.model_validate(r) for r in rescales],
        errors=[
            CommandError(
                command_id=c.id,
                kind=c.kind,  # type: ignore[arg-type]
                node=node,
                error=c.error,
                at=c.acked_at,
            )
            for c, node in errors
        ],
        user=usage.job_user(job, usage.token_names(session, [job.owner_token_id])),
    )
