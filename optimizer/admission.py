"""Which queued jobs the optimizer sees: capacity-based first-come-first-served admission.

Rule: queued jobs are admitted in queue order while the admitted jobs (those already
active, then each one admitted here) cannot between them use every idle node, i.e. while
sum of their usable nodes < idle nodes; and, if ``max_active_jobs`` is set, while fewer than
that many are admitted. A job's *usable nodes* is the most it can run on: its
``max_nodes`` capped by the largest count of its throughput curve
(:meth:`interstice.optimizer.Problem.max_count` before the pool's cap).

Why: a fixed count of active jobs either leaves idle nodes no admitted job can take (few
jobs, each capped) or hands the solver jobs it cannot give a node (many); admitting until
the admitted jobs could fill the pool gives the optimizer every node and as few jobs as
that needs; the rest wait in order. The last job admitted is the one whose usable nodes
take the sum to or over the idle count.
"""

from __future__ import annotations

from collections.abc import Sequence


def admit(
    queued_usable_nodes: Sequence[int],
    active_usable_nodes: Sequence[int],
    idle_nodes: int,
    max_active_jobs: int | None = None,
) -> int:
    """How many of the queued jobs, from the front of the queue, to admit now.

    Args:
        queued_usable_nodes: usable nodes of each queued job, in queue (arrival) order.
        active_usable_nodes: usable nodes of each job already admitted (running or not).
        idle_nodes: nodes available to elastic jobs now, held ones included.
        max_active_jobs: cap on admitted jobs (active ones included); ``None``: no cap.

    Returns:
        k: admit ``queued[:k]``.

    Raises:
        ValueError: a negative count, or ``max_active_jobs`` < 1.

    Examples:
        >>> admit([64, 64, 64], [32], idle_nodes=100)  # 32 < 100, 96 < 100, 160: stop
        2
        >>> admit([8, 8], [], idle_nodes=100, max_active_jobs=1)
        1
    """
    if idle_nodes < 0 or any(n < 0 for n in (*queued_usable_nodes, *active_usable_nodes)):
        raise ValueError("admit: node counts must be >= 0")
    if max_active_jobs is not None and max_active_jobs < 1:
        raise ValueError(f"admit: max_active_jobs must be >= 1, got {max_active_jobs}")
    usable = sum(active_usable_nodes)
    admitted = len(active_usable_nodes)
    k = 0
    for nodes in queued_usable_nodes:
        if usable >= idle_nodes:
            break
        if max_active_jobs is not None and admitted >= max_active_jobs:
            break
        usable += nodes
        admitted += 1
        k += 1
    return k
