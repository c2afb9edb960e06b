"""Schemas of ``GET /v1/usage``: node-hours and samples harvested per user and day."""

from datetime import date, datetime

from pydantic import BaseModel, ConfigDict


class UsagePublic(BaseModel):
    """One user's harvest on one UTC day, as ``sreport``'s user utilization by day.

    Attributes:
        user: the jobs' owner (their Unix account; a job without one counts under the
            name of the token that submitted it).
        day: the UTC day.
        node_hours: node-hours the user's jobs held idle nodes that day (each rescale
            record's node count until the next).
        samples: samples the user's jobs trained that day (the increments of each job's
            reported cumulative count, capped at its ``total_samples``).
        jobs: how many of the user's jobs held a node or trained that day.
    """

    model_config = ConfigDict(frozen=True)

    user: str
    day: date
    node_hours: float
    samples: float
    jobs: int


class UsagesPublic(BaseModel):
    """Usage rows by user, then day; ``count`` rows.

    Attributes:
        data: the rows.
        count: ``len(data)``.
        since: start of the window (``None``: the first record).
        until: end of the window (now, unless asked earlier).
    """

    data: list[UsagePublic]
    count: int
    since: datetime | None
    until: datetime
