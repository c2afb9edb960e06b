"""User-facing routes: submit, list, inspect and cancel elastic jobs."""

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status
from fastapi.exceptions import RequestValidationError
from interstice.api.deps import ServiceDep, UserToken, roles
from interstice.api.schemas.common import NO_NUL_PATTERN
from interstice.api.schemas.jobs import (
    JobCreate,
    JobLogPublic,
    JobMetricsPublic,
    JobPublic,
    JobsPublic,
    JobState,
)
from interstice.api.services import jobs
from interstice.api.services.idempotency import KEY_PATTERN, KeyReused
from sqlalchemy.exc import IntegrityError

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


_REPLAYED = {
    201: {
        "description": "The job (a new one, or with `Idempotency-Key` the first request's)",
        "headers": {
            "Idempotent-Replayed": {
                "description": "`true` when the job is the one an earlier request with the "
                "same `Idempotency-Key` created",
                "schema": {"type": "string", "enum": ["true"]},
            }
        },
    }
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    **roles("user", "admin", errors=(400, 409), answers=_REPLAYED),
)
def create_job(
    body: JobCreate,
    service: ServiceDep,
    who: UserToken,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            pattern=KEY_PATTERN,
            description="A key of the client's choosing (e.g. a UUID): a retry with the same "
            "key and body answers the job the first request created (201 again, with "
            "`Idempotent-Replayed: true`) instead of creating another; per token, kept 24 h; "
            "the same key with a different body is a 422.",
        ),
    ] = None,
) -> JobPublic:
    """Submit a job; it is ``queued`` until a solve gives it nodes. Roles: user, admin.

    A model outside the scalability table (or none) is scheduled from the default scaling
    curve until the job's own rates are measured. The job directory
    ``<checkpoint_root>/<job_id>`` is created (mode 0700). 422 names the field at fault
    (``command`` too long, a reserved ``env`` name, a fractional ``total_samples``, ...);
    409 when ``min_nodes`` is above a table model's largest measured node count or the job
    directory cannot be created.
    """
    try:
        try:
            job, replayed = jobs.create_job(service, who, body, idempotency_key)
        except IntegrityError:
            if idempotency_key is None:
                raise
            # another replica stored the key between this one's lookup and insert
            job, replayed = jobs.create_job(service, who, body, idempotency_key)
    except KeyReused as exc:
        raise RequestValidationError(
            [{"loc": ("header", "Idempotency-Key"), "msg": str(exc), "type": "value_error"}]
        ) from None
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return job


@router.get("", **roles("user", "admin"))
def list_jobs(
    service: ServiceDep,
    who: UserToken,
    state: JobState | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    user: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            pattern=NO_NUL_PATTERN,
            description="only this user's jobs (the job's ``user``: its owner's Unix account, "
            "else the name of the token that submitted it)",
        ),
    ] = None,
    name: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            pattern=NO_NUL_PATTERN,
            description="only jobs whose model, entrypoint or command contains this text "
            "(case-insensitive)",
        ),
    ] = None,
) -> JobsPublic:
    """The caller's jobs (admin: all jobs), newest first, filtered by ``state``, ``user`` and
    ``name`` (all given must hold); ``count`` is the total of the filtered jobs before
    ``limit``/``offset``. Roles: user, admin."""
    return jobs.list_jobs(service, who, state, limit, offset, user=user, name=name)


@router.get("/{job_id}", **roles("user", "admin", errors=(404,)))
def get_job(job_id: str, service: ServiceDep, who: UserToken) -> JobPublic:
    """One job: state, nodes, world size, SPB depth, samples done, last loss, rescale history
    with measured costs, command errors and why it failed. 404 for an unknown job or
    another user's. Roles: user, admin."""
    return jobs.get_job(service, who, job_id)


@router.delete(
    "/{job_id}",
    summary="Cancel a job (it stays, cancelled)",
    **roles("user", "admin", errors=(404, 409)),
)
def cancel_job(job_id: str, service: ServiceDep, who: UserToken) -> JobPublic:
    """Cancel a queued or running job: its agents get ``stop``, its nodes are re-allocated.
    The job is not deleted: it answers here in state ``cancelled``, and so does
    ``GET /v1/jobs/{job_id}`` from then on (its record, metrics and logs stay). 409 when the
    job already ended. Roles: user, admin."""
    return jobs.cancel_job(service, who, job_id)


@router.get("/{job_id}/metrics", **roles("user", "admin", errors=(404,)))
def job_metrics(
    job_id: str,
    service: ServiceDep,
    who: UserToken,
    limit: Annotated[int, Query(ge=1, le=10000, description="newest reports to answer")] = 10000,
) -> JobMetricsPublic:
    """The series the job's workers reported (``elastic.report``), one entry per report that
    advanced the step, oldest first: step, samples, loss, samples/s, world size and the
    script's own metrics; a cancelled job's (``DELETE``) stay. 404 for an unknown job or
    another user's. Roles: user, admin."""
    return jobs.job_metrics(service, who, job_id, limit)


@router.get("/{job_id}/logs", **roles("user", "admin", errors=(404,)))
def job_logs(
    job_id: str,
    service: ServiceDep,
    who: UserToken,
    rank: Annotated[int, Query(ge=0, le=10**6, description="global rank")] = 0,
    tail: Annotated[int, Query(ge=0, le=100000, description="last lines to answer")] = 200,
    offset: Annotated[
        int | None, Query(ge=0, le=10**15, description="byte offset to read from (follow)")
    ] = None,
) -> JobLogPublic:
    """stdout+stderr of one rank over every generation, oldest first: the last ``tail``
    lines, or with ``offset`` the bytes from there (at most 1 MiB; ask again from
    ``next_offset`` to follow); a cancelled job's (``DELETE``) stay. 404 for an unknown job,
    another user's, or a rank with no log yet. Roles: user, admin."""
    return jobs.job_log(service, who, job_id, rank, tail, offset)
