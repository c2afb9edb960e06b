"""The scheduler's node events, the node list and the nodes over time."""

from datetime import datetime
from typing import Literal

from interstice.api.schemas.agents import AgentState
from interstice.api.schemas.common import NAME, Request, UTCTime, not_together
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from interstice.wire import EVENT_ID_MAX_CHARS

NodeState = Literal["idle", "busy"]


class NodeEventCreate(Request):
    """A node-state change reported by the HPC scheduler.

    Attributes:
        event_id: unique id; a retry with the same id changes nothing and answers the same.
        node: node name.
        state: ``idle`` (available to elastic jobs) or ``busy`` (taken back by the scheduler).
        at: when the change happened.
        grace_s: seconds the holding job has to release the node on ``busy`` (a reclaim).
        until: on ``idle``, when the scheduler expects to need the node back (its plan: a
            pending job's planned start, a reservation), after ``at``; None: unknown. The
            node keeps the ``until`` of its newest applied event, so a later event revises
            it and one without ``until`` withdraws it. A forecast only: the node is taken
            back by a ``busy`` event (a reclaim, with its grace period), never by the clock;
            once it has passed with the node still idle it is stale (``until_stale`` in the
            node list) and the node's end counts as unknown.
    """

    event_id: str = Field(min_length=1, max_length=EVENT_ID_MAX_CHARS)
    node: str = NAME
    state: NodeState
    at: UTCTime
    grace_s: float = Field(default=0.0, ge=0, le=86400)
    until: UTCTime | None = None

    @field_validator("until")
    @classmethod
    def _after_at(cls, until: datetime | None, info: ValidationInfo) -> datetime | None:
        if until is None:
            return None
        if info.data.get("state") == "busy":
            raise ValueError("a busy event takes the node back: only an idle event has until")
        at = info.data.get("at")
        if at is not None and until <= at:
            raise ValueError(f"until {until.isoformat()} is not after at {at.isoformat()}")
        return until

    __get_pydantic_json_schema__ = not_together(
        state={"const": "busy"}, until={"type": "string"}
    )  # the rule of _after_at that JSON Schema can state: no until on a busy event


class NodeEventsCreate(Request):
    """A batch of node events, applied in order."""

    events: list[NodeEventCreate] = Field(min_length=1, max_length=10000)


class NodeEventResult(BaseModel):
    """What one event did. A retry of the same ``event_id`` answers exactly this again
    (``applied`` and ``reason`` included) and changes nothing.

    Attributes:
        event_id: the event's id.
        node: the event's node.
        state: the event's state (the node's only when ``applied``).
        applied: whether the node took the event's state. False: an event with a later
            ``at`` had already been applied to the node (e.g. the scheduler's clock stepped
            back), so this one changed nothing: the node kept its state and no reclaim was
            sent.
        reason: why ``applied`` is false (``superseded by a newer event at <at>``, the
            ``at`` of the newest event the node had then); None when applied.
        reclaimed_job_id: the job that had to release the node (a reclaim); None when
            there was none.
    """

    event_id: str
    node: str
    state: NodeState
    applied: bool
    reason: str | None
    reclaimed_job_id: str | None


class NodeEventsResult(BaseModel):
    """Results in the order of the batch."""

    data: list[NodeEventResult]
    count: int


class NodeAgentBrief(BaseModel):
    """The agent on a node."""

    model_config = ConfigDict(from_attributes=True)

    agent_id: str
    state: AgentState


class NodePublic(BaseModel):
    """A node: its scheduler state, its agent and the job holding it."""

    name: str
    state: NodeState
    since: datetime
    until: datetime | None = Field(
        description="When the scheduler expects to need the node back (the ``until`` of its "
        "newest applied event); None: unknown"
    )
    until_stale: bool = Field(
        description="Whether ``until`` has passed while the node is still idle: the forecast "
        "is stale, and the optimizer reads the node's end as unknown (as if no ``until`` had "
        "been given) until the scheduler's next event"
    )
    allocatable: bool = Field(
        description="Idle, with an alive agent, and not quarantined: the optimizer may place a "
        "job on it"
    )
    agent: NodeAgentBrief | None
    holder: str | None
    quarantined_at: datetime | None = Field(
        description="Since when the node is quarantined (a launch failed for a reason of the "
        "node, or its agent's launcher did not warm up): no job is placed on it until its "
        "agent registers with a warm launcher or an admin releases it; None: not quarantined"
    )
    quarantine_reason: str | None = Field(
        description="Why the node is quarantined: the failed launch's error, or why its "
        "agent's launcher did not warm up; None: not quarantined"
    )


NODES_PAGE_DEFAULT = 1000
"""Nodes per page of ``GET /v1/nodes`` when ``limit`` is not given (a small cluster is one
page)."""
NODES_PAGE_MAX = 10000
"""Most nodes a page of ``GET /v1/nodes`` may ask for (``limit``)."""


class NodesPublic(BaseModel):
    """A page of nodes, by name.

    Attributes:
        data: the page's nodes.
        count: nodes in all, on every page.
        next_cursor: the ``cursor`` that asks for the next page; None on the last page.
    """

    data: list[NodePublic]
    count: int
    next_cursor: str | None


class NodeHistoryPoint(BaseModel):
    """The nodes at one instant (the values hold until the next point).

    Attributes:
        at: the instant.
        idle: nodes the scheduler had reported idle.
        busy: nodes known then that were not idle (the scheduler's, reclaimed included).
        allocated: nodes held per job id (jobs holding none are left out).
        agents_alive: agents alive at the newest lease sweep before ``at``; None before this
            service process's first sweep (the count is kept in memory, see
            :class:`NodeHistoryPublic`).
    """

    at: datetime
    idle: int
    busy: int
    allocated: dict[str, int]
    agents_alive: int | None


class ReclaimPublic(BaseModel):
    """A node the scheduler took back from the job holding it (a ``busy`` event)."""

    at: datetime
    node: str
    job_id: str


class NodeHistoryPublic(BaseModel):
    """The nodes over time from ``since`` to ``until``.

    Idle and busy come from the scheduler's node events (idle intervals), allocations from
    the jobs' rescale records: a point at each change, or, when there are more changes than
    ``points``, at ``points`` evenly spaced instants. Alive agents are counted at each lease
    sweep of this process and kept in memory (at most the newest
    :data:`interstice.api.services.history.AGENT_COUNTS_KEPT` changes), from ``agents_alive_since``.

    Attributes:
        since: start of the window: the one asked for, or the first record when later.
        until: end of the window (now).
        data: the points, oldest first.
        count: number of points.
        reclaims: reclaims in the window, oldest first (at most the newest 1,000).
        agents_alive_since: when this process began counting alive agents.
    """

    since: datetime
    until: datetime
    data: list[NodeHistoryPoint]
    count: int
    reclaims: list[ReclaimPublic]
    agents_alive_since: datetime
