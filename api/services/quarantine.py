"""Quarantined nodes: a node whose launch failed for a reason of its own gets no job until its
agent proves it healthy again or an admin releases it, as Slurm drains a node whose Prolog
fails.

A node is quarantined (``Node.quarantined_at``, ``Node.quarantine_reason``):

- when its agent acknowledges a ``start`` or ``rescale`` with ``node_fault`` (the launcher
  could not start, e.g. torch missing; the job's owner is unknown on the node; the run
  directory cannot be made, e.g. a full disk), in
  :func:`interstice.api.services.state.ack_command`; the job is released from its nodes and
  placed again by the next solve, within ``max_command_failures``;
- when its agent registers with a ``fault``: its spare launcher did not warm up.

It ends when the node's agent registers without a fault (an agent does so only with a warm
launcher: at its start, or when its health check passes again, see
:mod:`interstice.agents.health`), or when an admin releases it
(``POST /v1/nodes/{name}/release``). A quarantined node is not allocatable
(:data:`interstice.api.services.state.ALLOCATABLE`): the optimizer never counts it as idle
capacity.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from interstice.api.store.tables import Node, utcnow

from interstice.wire import HEARTBEAT_ERROR_MAX_CHARS

if TYPE_CHECKING:
    from interstice.api.services.state import Changes

log = logging.getLogger("interstice.api")

REASON_MAX_CHARS = HEARTBEAT_ERROR_MAX_CHARS
"""A quarantine reason is kept up to this length (an agent's error, the launcher's last lines)."""


def quarantine(node: Node, reason: str, changes: Changes) -> None:
    """Quarantine ``node`` because of ``reason``: a node quarantined already keeps its
    ``quarantined_at`` and takes the newer reason. An idle node leaves the pool: a solve
    follows."""
    if node.quarantined_at is None:
        node.quarantined_at = utcnow()
        changes.stale = changes.stale or node.state == "idle"
        log.warning("node %s quarantined: %s", node.name, reason.splitlines()[0] if reason else "")
    node.quarantine_reason = reason[:REASON_MAX_CHARS]


def lift(node: Node, changes: Changes, why: str) -> bool:
    """End ``node``'s quarantine (``why``: for the log); an idle node is back in the pool.

    Returns:
        Whether it was quarantined.
    """
    if node.quarantined_at is None:
        return False
    node.quarantined_at = node.quarantine_reason = None
    changes.stale = changes.stale or node.state == "idle"
    log.info("node %s out of quarantine: %s", node.name, why)
    return True
