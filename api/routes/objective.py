"""Admin routes: the optimizer's objective and the audit log of admin changes."""

from typing import Annotated

from fastapi import APIRouter, Query
from interstice.api.deps import AdminToken, ServiceDep, roles
from interstice.api.schemas.objective import AuditsPublic, ObjectivePublic, ObjectiveUpdate
from interstice.api.services import objective, reports

router = APIRouter(prefix="/v1", tags=["objective"])


@router.get("/objective", **roles("admin"))
def get_objective(service: ServiceDep, _: AdminToken) -> ObjectivePublic:
    """The objective: the optimizer's weights, forecast horizon, backend and time limit.
    Roles: admin."""
    return objective.get(service)


@router.put("/objective", **roles("admin", errors=(400,)))
def put_objective(body: ObjectiveUpdate, service: ServiceDep, who: AdminToken) -> ObjectivePublic:
    """Change the objective (fields left out keep their value); recorded in the audit log
    and followed by a new solve. Roles: admin."""
    return objective.update(service, who, body)


@router.get("/audit", **roles("admin"))
def get_audit(
    service: ServiceDep,
    _: AdminToken,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> AuditsPublic:
    """Admin changes (who, when, old and new value), newest first. Roles: admin."""
    return reports.audit(service, limit, offset)
