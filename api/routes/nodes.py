"""Scheduler-facing routes: node events, the node list and the nodes over time; an admin's
release of a quarantined node."""

from typing import Annotated

import anyio
from fastapi import APIRouter, Path, Query
from interstice.api.deps import AdminToken, NodeReader, SchedulerToken, ServiceDep, roles
from interstice.api.schemas.common import NAME_PATTERN, UTCTime
from interstice.api.schemas.nodes import (
    NODES_PAGE_DEFAULT,
    NODES_PAGE_MAX,
    NodeEventsCreate,
    NodeEventsResult,
    NodeHistoryPublic,
    NodePublic,
    NodesPublic,
)
from interstice.api.services import nodes, reports

router = APIRouter(prefix="/v1/nodes", tags=["nodes"])


@router.post("/events", **roles("scheduler", errors=(400, 409)))
async def post_node_events(
    body: NodeEventsCreate, service: ServiceDep, _: SchedulerToken
) -> NodeEventsResult:
    """Apply a batch of node-state changes in order. Roles: scheduler.

    ``busy`` on a node that a job holds is a reclaim: at once (without waiting for the
    solver) the node's agent gets ``stop`` with deadline ``at + grace_s`` and the job's other
    agents ``rescale`` (or ``stop`` below ``min_nodes``). A repeated ``event_id`` changes
    nothing and answers the same; 409 when it is reused for a different event (nothing of
    the batch is applied). A batch is written 1,000 events per transaction: a reclaim
    posted meanwhile is applied between two of them, before the other writes waiting.

    The node's state follows its event with the latest ``at``: an event older than one
    the node already took changes nothing (no state change, no reclaim) and answers
    ``applied: false`` with ``reason`` ``superseded by a newer event at <at>``. 422 for a
    malformed event (nothing of the batch is applied), naming it, e.g. a NUL character in
    ``event_id``.
    """
    return await anyio.to_thread.run_sync(
        nodes.node_events, service, body, limiter=service.event_writes
    )


@router.get("", **roles("scheduler", "admin"))
def get_nodes(
    service: ServiceDep,
    _: NodeReader,
    limit: Annotated[
        int,
        Query(ge=1, le=NODES_PAGE_MAX, description="most nodes on the page"),
    ] = NODES_PAGE_DEFAULT,
    cursor: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            pattern=NAME_PATTERN,
            description="the previous page's ``next_cursor``; none: the first page",
        ),
    ] = None,
) -> NodesPublic:
    """The nodes by name, a page at a time: scheduler state, agent, holder and whether it is
    allocatable (idle with an alive agent, not quarantined), and since when and why it is
    quarantined. Roles: scheduler, admin.

    A page holds at most ``limit`` nodes (default 1,000, at most 10,000: a small cluster is
    one page); ``count`` is the number of all nodes; ``next_cursor``, an opaque string, asks
    for the next page (``?cursor=``) and is null on the last. A node added meanwhile shows
    on a later page when its name sorts after the cursor. 422 names ``limit`` or ``cursor``
    when out of range or malformed.
    """
    return nodes.list_nodes(service, limit, cursor)


@router.post("/{name}/release", **roles("admin", errors=(404,)))
async def release_node(
    name: Annotated[str, Path(min_length=1, max_length=200, pattern=NAME_PATTERN)],
    service: ServiceDep,
    who: AdminToken,
) -> NodePublic:
    """End the node's quarantine: a node whose launch failed for a reason of its own (its
    launcher could not start, the job's owner is unknown there, a full disk) gets no job
    until its agent registers with a warm launcher or an admin releases it here. An idle
    node with an alive agent is allocatable again at once. Idempotent: a node not
    quarantined is answered as it is. Audited (``node.release``). 404 for an unknown node.
    Roles: admin."""
    return await anyio.to_thread.run_sync(nodes.release_node, service, name, who)


@router.get("/history", **roles("scheduler", "admin"))
def get_node_history(
    service: ServiceDep,
    _: NodeReader,
    since: Annotated[
        UTCTime | None,
        Query(description="start of the window (ISO 8601); default: an hour ago"),
    ] = None,
) -> NodeHistoryPublic:
    """The nodes over time, from ``since`` to now: idle, busy and held per job (from the
    node events and the jobs' rescale records, a point per change or at most 2,000 evenly
    spaced), alive agents (counted by this process at each lease sweep) and the reclaims.
    Roles: scheduler, admin."""
    return reports.node_history(service, since)
