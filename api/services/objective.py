"""The optimizer's objective (weights, horizon, backend), as admins read and change it.

Functions take the running :class:`~interstice.api.service.Service` (or a session); they are
synchronous (FastAPI runs them in its thread pool).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from interstice.api.auth.tokens import Principal, audit_entry
from interstice.api.schemas.objective import ObjectivePublic, ObjectiveUpdate
from interstice.api.services.state import Changes
from interstice.api.store.tables import Config
from interstice.optimizer.coverage import FORECAST_MIN_COVERAGE
from interstice.optimizer.problem import COMPLETION_S, FORECAST_CLASSES
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from interstice.api.service import Service

DEFAULT_OBJECTIVE: dict[str, Any] = {
    "throughput": 1.0,
    "speedup": False,
    "node_seconds": True,
    "fairness": 0.0,
    "priority": 1.0,
    "churn": 0.0,
    "early_finish": 0.9,
    "completion_s": COMPLETION_S,
    "reclaim_loss_s": 0.0,
    "forecast_classes": FORECAST_CLASSES,
    "forecast_min_coverage": FORECAST_MIN_COVERAGE,
    "horizon_s": "auto",
    "backend": "cpsat",
    "time_limit_s": 0.2,
    "relative_gap": 1e-3,
}
"""The objective until an admin changes it. ``time_limit_s``: the service re-solves at every
event, so a solve's limit is part of how late a freed node gets its job; at the limit the
solver's best incumbent is applied, never one worth less than the greedy answer
(:func:`interstice.optimizer.solve`). At 5,000 agents the 10 s it had let single solves of
250 identical jobs run for seconds (allocation p99 8.8 s). ``relative_gap``: an answer
proven within 0.1 % of the optimum is applied at once. The 52 solves of one such run
(``bench/agents_load.py --agents 5000 --heartbeat-s 30``, captured and re-solved on an idle
machine) had the greedy answer within 5.4e-4 of the LP bound (median 2.1e-4) and the
optimum within 9.3e-5 of it, yet CP-SAT took up to 3.7 s to prove optimality, up to 1.3 s
within 1e-4, at most 0.03 s within 1e-3: the symmetry of many identical jobs, not the
answer, is what costs."""


def stored(session: Session) -> ObjectivePublic:
    """The objective settings (defaults until an admin changes them; one stored before
    ``node_seconds`` existed gets it, the default, unless it had ``speedup``)."""
    row = session.get(Config, "objective")
    kept = dict(row.value) if row else {}
    if kept.get("speedup") and "node_seconds" not in kept:  # stored before it existed
        kept["node_seconds"] = False
    return ObjectivePublic(**(DEFAULT_OBJECTIVE | kept))


def get(service: Service) -> ObjectivePublic:
    """The objective settings (:func:`stored`)."""
    with service.db.read() as session:
        return stored(session)


def update(service: Service, who: Principal, body: ObjectiveUpdate) -> ObjectivePublic:
    """Change the objective; audited with old and new value; marks the allocation stale."""
    with service.db.write() as session:
        old = stored(session).model_dump()
        new = old | body.changes()
        row = session.get(Config, "objective")
        if row is None:
            session.add(Config(key="objective", value=new))
        else:
            row.value = new
        session.add(audit_entry(who, "objective.update", old, new))
    service.after_commit(Changes(stale=True))
    return ObjectivePublic(**new)
