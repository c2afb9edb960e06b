"""What admins set and read back: the optimizer's objective, the scalability table and
the audit log of their changes."""

from datetime import datetime
from typing import Any, Literal

from interstice.api.schemas.common import Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

Backend = Literal["cbc", "cpsat"]

MAX_FORECAST_CLASSES = 16
"""The most ``forecast_classes`` an admin may set: the options grow with (1 + max count) x
(classes + 1) per job, and 6 already reached the replay's 10 s time limit."""


class ObjectivePublic(BaseModel):
    """The optimizer's objective settings.

    Attributes:
        throughput, speedup, node_seconds, fairness, priority, churn, early_finish: the
            optimizer's ``Weights`` (``node_seconds``, the default: goodput counted in
            dedicated node-seconds of work, the measure of ``harvest``; ``speedup``: divided
            by one-node rates instead; both false: raw samples; ``early_finish``: beta of
            the objective's early-finish term, in [0, 1]; ``completion_s``: tau of its
            completion term, seconds, a job submitted tau later weighing 1/e as much, 0:
            off).
        reclaim_loss_s: seconds of progress a reclaim under the grace period costs a job
            beyond a shrink (the work since its last checkpoint where the grace period is too
            short to checkpoint; default 0); with forecasts (``until``) the optimizer sheds a
            node just before its forecast reclaim where that costs less.
        forecast_classes: the most classes of nodes forecast (``until``) to leave within
            the horizon, 1 to 16 (``Problem.forecast_classes``; default 1: all valued at
            the shortest life among them). More classes value each node's forecast end
            closer to its own and solve slower (up to the time limit at 6 on 192 nodes);
            in the replay 6 paid only where a reclaim costs more than a shrink
            (``reclaim_loss_s`` > 0).
        forecast_min_coverage: the optimizer uses the forecasts only while the share of the
            newest ended idle intervals whose node had an ``until`` (with fewer than 50, the
            share of the allocatable nodes that have one) is at least this, in [0, 1]
            (default 0.9; 0: always): told some short lives and not others it did worse in
            the replay than told nothing (:mod:`interstice.optimizer.coverage`).
        horizon_s: forecast horizon, seconds, or ``"auto"`` (expected remaining idle time
            of the pool, from the idle intervals observed so far).
        backend: MILP backend, ``cbc`` or ``cpsat``.
        time_limit_s: solver wall-clock limit per solve, seconds (default 0.2: at the
            limit the best incumbent is applied, never worse than the greedy answer).
        relative_gap: a solve stops once its answer is proven within this fraction of the
            optimal objective, in [0, 1) (default 1e-3; 0 asks for a proof of optimality).
    """

    throughput: float
    speedup: bool
    node_seconds: bool
    fairness: float
    priority: float
    churn: float
    early_finish: float
    completion_s: float
    reclaim_loss_s: float
    forecast_classes: int
    forecast_min_coverage: float
    horizon_s: float | Literal["auto"]
    backend: Backend
    time_limit_s: float
    relative_gap: float


def _horizon_bounds(schema: dict[str, Any]) -> None:
    """Show the rule of :meth:`ObjectiveUpdate._positive_horizon` on the number branch."""
    for branch in schema.get("anyOf", []):
        if branch.get("type") == "number":
            branch.update(exclusiveMinimum=0, maximum=1e7)


class ObjectiveUpdate(Request):
    """A change of the objective; fields left out keep their value, except that turning one
    of ``speedup`` and ``node_seconds`` on turns the other off (they are two normalisations
    of the same term); both ``true`` in one request is a 422. ``horizon_s`` is in (0, 1e7]
    seconds or ``"auto"``."""

    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "properties": {"speedup": {"const": True}, "node_seconds": {"const": True}},
                "required": ["speedup", "node_seconds"],
            }
        }
    )

    throughput: float | None = Field(default=None, ge=0, le=1e6)
    speedup: bool | None = None
    node_seconds: bool | None = None
    fairness: float | None = Field(default=None, ge=0, le=1e6)
    priority: float | None = Field(default=None, ge=0, le=100)
    churn: float | None = Field(default=None, ge=0, le=1e12)
    early_finish: float | None = Field(default=None, ge=0, le=1)
    completion_s: float | None = Field(default=None, ge=0, le=1e9)
    reclaim_loss_s: float | None = Field(default=None, ge=0, le=1e6)
    forecast_classes: int | None = Field(default=None, ge=1, le=MAX_FORECAST_CLASSES)
    forecast_min_coverage: float | None = Field(default=None, ge=0, le=1)
    horizon_s: float | Literal["auto"] | None = Field(
        default=None, json_schema_extra=_horizon_bounds
    )
    backend: Backend | None = None
    time_limit_s: float | None = Field(default=None, gt=0, le=3600)
    relative_gap: float | None = Field(default=None, ge=0, lt=1)

    @model_validator(mode="after")
    def _positive_horizon(self) -> "ObjectiveUpdate":
        if isinstance(self.horizon_s, float) and not 0 < self.horizon_s <= 1e7:
            raise ValueError(f"horizon_s must be in (0, 1e7] or 'auto', got {self.horizon_s}")
        if self.speedup and self.node_seconds:
            raise ValueError("speedup and node_seconds may not both be true")
        return self

    def changes(self) -> dict[str, Any]:
        """The fields given, plus the normalisation this one turns off."""
        given = self.model_dump(exclude_none=True)
        if self.speedup and self.node_seconds is None:
            given["node_seconds"] = False
        if self.node_seconds and self.speedup is None:
            given["speedup"] = False
        return given


class ScalabilityPublic(BaseModel):
    """The loaded scalability table: models, row count and where it came from."""

    models: list[str]
    rows: int
    source: str


class AuditPublic(BaseModel):
    """An admin change (``objective.update``, ``scalability.update``, ``token.create``,
    ``token.revoke``) or a refused request of a known token (``request.refused``: revoked,
    expired or wrong role; at most one entry per token per 10 s, counting the ones between).

    Attributes:
        actor: the name of the token that acted, or ``command line``.
        token_id: ``t-<id>`` of that token; null for the command line.
    """

    id: int
    at: datetime
    actor: str
    token_id: str | None
    action: str
    old: dict[str, Any] | None
    new: dict[str, Any]


class AuditsPublic(BaseModel):
    data: list[AuditPublic]
    count: int
