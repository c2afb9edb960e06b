"""Unauthenticated probes: liveness, readiness (database reachable) and Prometheus metrics."""

import anyio
from fastapi import APIRouter, Request, Response, status
from interstice.api.deps import ServiceDep
from interstice.api.schemas.common import ErrorDetail, Health
from interstice.api.services import reports
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model_exclude_none=True)
def healthz() -> Health:
    """Liveness: the process answers. No token."""
    return Health(status="ok")


@router.get(
    "/readyz",
    responses={503: {"model": ErrorDetail, "description": "Database unreachable"}},
)
async def readyz(service: ServiceDep, request: Request, response: Response) -> Health | ErrorDetail:
    """Readiness: the database answers ``SELECT 1``; 503 otherwise. ``leader``: whether
    this replica runs the solver (one of the replicas of a PostgreSQL database; always true
    on SQLite). No token."""
    if await anyio.to_thread.run_sync(service.db.ping):
        return Health(status="ok", leader=request.app.state.control.leader)
    response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return ErrorDetail(detail="database unreachable")


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}}
    },
)
def metrics(service: ServiceDep) -> Response:
    """Prometheus text format: nodes idle/allocatable/allocated/quarantined, jobs by state,
    pending commands, agents alive, solve time histogram, solver statuses, rescales, request
    latency. No token."""
    reports.refresh_gauges(service)
    return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)
