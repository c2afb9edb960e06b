"""Admin route: the control loop's applied solves (the dashboard's optimizer view)."""

from typing import Annotated

from fastapi import APIRouter, Query
from interstice.api.deps import AdminToken, ServiceDep, roles
from interstice.api.schemas.reports import SolvesPublic
from interstice.api.services import reports

router = APIRouter(prefix="/v1/solves", tags=["objective"])


@router.get("", **roles("admin"))
def list_solves(
    service: ServiceDep,
    _: AdminToken,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> SolvesPublic:
    """Each applied solve, newest first: when, status, backend, objective, solve time,
    horizon, the rescales it decided and every job's share (nodes, depth, samples/s). The
    newest 1,000 are kept (:data:`interstice.api.control.loop.SOLVES_KEPT`). Roles: admin."""
    return reports.solves(service, limit, offset)
