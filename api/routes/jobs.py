"""User-facing routes: submit, list, inspect and cancel elastic jobs."""

from typing import Annotated

from fastapi import APIRouter, Query, status
from interstice.api.deps import ServiceDep, UserToken, roles
from interstice.api.schemas import JobCreate, JobPublic, JobsPublic, JobState

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.post("", status_code=status.HTTP_201_CREATED, **roles("user", "admin", errors=(400, 409)))
def create_job(body: JobCreate, service: ServiceDep, who: UserToken) -> JobPublic:
    """Submit a job; it is ``queued`` until a solve gives it nodes. Roles: user, admin.

    409 when no scalability table is loaded, the model is not in it, or ``min_nodes`` is
    above the model's largest measured node count.
    """
    return service.create_job(who, body)


@router.get("", **roles("user", "admin"))
def list_jobs(
    service: ServiceDep,
    who: UserToken,
    state: JobState | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> JobsPublic:
    """The caller's jobs (admin: all jobs), newest first; ``count`` is the total before
    ``limit``/``offset``. Roles: user, admin."""
    return service.list_jobs(who, state, limit, offset)


@router.get("/{job_id}", **roles("user", "admin", errors=(404,)))
def get_job(job_id: str, service: ServiceDep, who: UserToken) -> JobPublic:
    """One job: state, nodes, world size, SPB depth, samples done, rescale history and
    command errors. 404 for an unknown job or another user's. Roles: user, admin."""
    return service.get_job(who, job_id)


@router.delete("/{job_id}", **roles("user", "admin", errors=(404, 409)))
def cancel_job(job_id: str, service: ServiceDep, who: UserToken) -> JobPublic:
    """Cancel a queued or running job: its agents get ``stop``, its nodes are re-allocated.
    409 when the job already ended. Roles: user, admin."""
    return service.cancel_job(who, job_id)
