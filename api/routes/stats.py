"""Admin route: how the idle nodes were used (the replay's measures)."""

from typing import Annotated

from fastapi import APIRouter, Query
from interstice.api.deps import AdminToken, ServiceDep, roles
from interstice.api.schemas.common import UTCTime
from interstice.api.schemas.reports import StatsPublic
from interstice.api.services import reports

router = APIRouter(prefix="/v1/stats", tags=["stats"])


@router.get("", **roles("admin"))
def stats(
    service: ServiceDep,
    _: AdminToken,
    since: Annotated[
        UTCTime | None,
        Query(description="start of the window (ISO 8601); default: the first record"),
    ] = None,
) -> StatsPublic:
    """Idle and harvested node-hours, utilization, harvest (Σ samples ÷ each job's best
    per-node samples/s, ÷ idle node-seconds), jobs finished, job completion time (mean,
    p50, p95, seconds) and mean wait for a first node, from ``since`` (or the service's first
    record) to now. The lifetime values are also Prometheus gauges on ``/metrics``.
    Roles: admin."""
    return reports.stats(service, since)
