"""The scalability table (CSV of measured samples/s per model, node count and SPB depth),
as stored in the database, read by users and replaced by admins.

Functions take the running :class:`~interstice.api.service.Service` (or a session); they are
synchronous (FastAPI runs them in its thread pool).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from interstice.api.auth.tokens import Principal, audit_entry
from interstice.api.schemas.objective import ScalabilityPublic
from interstice.api.services.state import ACTIVE_JOB_STATES, Changes, Conflict, NotFound
from interstice.api.store.tables import Config, Job
from interstice.optimizer import ScalabilityTable
from sqlalchemy import select
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from interstice.api.service import Service


TABLE_MAX_MODELS = 10_000
"""Most models a table given to ``PUT /v1/scalability`` may have: the answer lists them all,
and every solve reads the table (a 1 MiB CSV could otherwise hold 100,000 one-row models)."""


@lru_cache(maxsize=4)
def parse_table(text: str) -> ScalabilityTable:
    """The table of CSV ``text`` (the last few parsed are cached). Raises ValueError."""
    return ScalabilityTable.from_csv(text)


def stored(session: Session) -> ScalabilityTable | None:
    """The stored table, or None."""
    row = session.get(Config, "scalability")
    return None if row is None else parse_table(row.value["csv"])


def _summary(value: dict[str, Any]) -> ScalabilityPublic:
    table = parse_table(value["csv"])
    return ScalabilityPublic(
        models=sorted(table.models), rows=len(table.points), source=value["source"]
    )


def summary(service: Service) -> ScalabilityPublic:
    """Models, row count and source of the loaded table. Raises NotFound when none is."""
    with service.db.read() as session:
        row = session.get(Config, "scalability")
        if row is None:
            raise NotFound("no scalability table is loaded")
        return _summary(row.value)


def replace(service: Service, who: Principal, text: str) -> ScalabilityPublic:
    """Replace the table with CSV ``text``; audited; marks the allocation stale.

    Both tables are parsed (in time linear in their rows) before the write lock is taken,
    so a large table never holds up the other writers.

    Raises:
        ValueError: the CSV is malformed (the message names the line), or it has more than
            :data:`TABLE_MAX_MODELS` models.
        Conflict: a model of the current table that an active job runs is missing from
            the new table.
    """
    table = parse_table(text)
    if len(table.models) > TABLE_MAX_MODELS:
        raise ValueError(
            f"scalability table: {len(table.models)} models, more than {TABLE_MAX_MODELS} "
            "(the most a table may have)"
        )
    with service.db.read() as session:
        stored(session)  # parsed here, found in parse_table's cache under the lock
    with service.db.write() as session:
        current = stored(session)
        active = set(session.scalars(select(Job.model).where(Job.state.in_(ACTIVE_JOB_STATES))))
        # (a job whose model the table never had runs from its own rates: not in the way)
        missing = sorted((active & (current.models if current else set())) - table.models)
        if missing:
            raise Conflict(
                f"models {', '.join(missing)} of active jobs are missing from the new table"
            )
        row = session.get(Config, "scalability")
        old = None if row is None else _summary(row.value).model_dump()
        value = {"csv": text, "source": f"PUT /v1/scalability by {who.name}"}
        if row is None:
            session.add(Config(key="scalability", value=value))
        else:
            row.value = value
        new = _summary(value)
        session.add(audit_entry(who, "scalability.update", old, new.model_dump()))
    service.after_commit(Changes(stale=True))
    return new
