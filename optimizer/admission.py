"""Which queued jobs the optimizer sees: capacity-based first-come-first-served admission.

Rule: queued jobs are admitted in queue order while the admitted jobs (those already
active, then each one admitted here) cannot between them use every idle node, i.e. while
sum of their usable nodes < idle nodes; and, if ``max_active_jobs`` is set, while fewer than
that many are admitted. A job's *usable nodes* (:func:`usable_nodes`) is the most it runs on
*efficiently*: the largest count at which its curve keeps a parallel efficiency of
``min_efficiency`` (:meth:`interstice.optimizer.ScalabilityTable.efficient_nodes`), within
its ``min_nodes``..``max_nodes`` and its curve's largest count; 0 while its ``min_nodes``
exceed the idle nodes, or while its ``rescale_up_s`` is not below the forecast horizon (a
start would earn it nothing within the horizon, so no policy starts it): a job that cannot
start now must not hold the pool's place. The optimizer may still give an admitted job up to
its ``max_nodes``.

Why: a fixed count of active jobs either leaves idle nodes no admitted job can take (few
jobs, each capped) or hands the solver jobs it cannot give a node (many); admitting until
the admitted jobs could fill the pool gives the optimizer every node and as few jobs as
that needs; the rest wait in order. Queue order is fair between users
(:func:`fair_order`): a user's next queued job comes after every other user's whose count of
admitted jobs is lower, so a user with many queued jobs cannot keep another's single job out
of the optimizer's view. The last job admitted is the one whose usable nodes
take the sum to or over the idle count. Counting a job at its efficient size rather than its
``max_nodes`` admits enough jobs that no node has to go to a job past the knee of its
curve: on the eight 48-hour Summit windows of ``bench/replay_windows.py`` it raised
harvest (docs/engine.md, "Admission by capacity").
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from interstice.optimizer.problem import ScalabilityTable

ADMISSION_EFFICIENCY = 0.9
"""Default ``min_efficiency`` of :func:`usable_nodes` (chosen by replay, docs/benchmarks.md)."""


def usable_nodes(
    table: ScalabilityTable,
    model: str,
    min_nodes: int,
    max_nodes: int,
    idle_nodes: int,
    min_efficiency: float = ADMISSION_EFFICIENCY,
    rescale_up_s: float = 0.0,
    horizon_s: float = math.inf,
) -> int:
    """A job's usable nodes for :func:`admit` (module docstring), nodes.

    Args:
        table: the job's rates (its own curve or the scalability table).
        model: its model, a model of ``table``.
        min_nodes, max_nodes: its bounds, 1 <= min_nodes <= max_nodes.
        idle_nodes: nodes available to elastic jobs now.
        min_efficiency: least parallel efficiency, in [0, 1]; 0 counts every job at its
            ``max_nodes`` (capped by its curve).
        rescale_up_s: seconds a start costs the job, >= 0.
        horizon_s: the forecast horizon of the next solve, seconds.

    Raises:
        KeyError: ``model`` is not in ``table``.
        ValueError: ``min_efficiency`` outside [0, 1].

    Examples:
        >>> from interstice.optimizer import ScalabilityPoint
        >>> rows = [(1, 100.0), (2, 190.0), (4, 300.0)]  # efficiency 1, 0.95, 0.75
        >>> t = ScalabilityTable(points=tuple(
        ...     ScalabilityPoint(model="m", nodes=n, samples_per_s=r) for n, r in rows))
        >>> usable_nodes(t, "m", 1, 8, idle_nodes=10, min_efficiency=0.9)
        2
        >>> usable_nodes(t, "m", 3, 8, idle_nodes=10, min_efficiency=0.9)  # at least min
        3
        >>> usable_nodes(t, "m", 3, 8, idle_nodes=2)  # cannot start now
        0
        >>> usable_nodes(t, "m", 1, 8, idle_nodes=10, rescale_up_s=90, horizon_s=60)
        0
    """
    if min_nodes > idle_nodes or rescale_up_s >= horizon_s:
        return 0
    largest = min(max_nodes, table.max_nodes(model))
    return max(min_nodes, min(largest, table.efficient_nodes(model, min_efficiency)))


def fair_order(queued_users: Sequence[str | None], active_users: Sequence[str | None]) -> list[int]:
    """The queue in fair-share order: repeatedly the next job of the user with the fewest
    admitted jobs so far (the active ones, then those ordered before it), ties by queue
    position, each user's jobs in their own queue order. A job with user ``None`` is a user
    of its own, so with no users the order is the queue's.

    Round-robin between users by service received, the job-count form of Slurm's fair-share
    factor (a user's priority falls with its usage) and of max-min fairness (Bertsekas &
    Gallager, "Data Networks", 1992, 6.5.2).

    Args:
        queued_users: each queued job's user, in queue order.
        active_users: each admitted job's user.

    Returns:
        Indices into ``queued_users``, in the order to admit.

    Examples:
        >>> fair_order(["a", "a", "a", "b"], [])
        [0, 3, 1, 2]
        >>> fair_order(["a", "a", "b"], ["b", "b"])
        [0, 1, 2]
        >>> fair_order([None, None], [])
        [0, 1]
    """
    served: dict[str, int] = {}
    for user in active_users:
        if user is not None:
            served[user] = served.get(user, 0) + 1
    waiting: dict[object, list[int]] = {}
    for i, user in enumerate(queued_users):
        waiting.setdefault(("job", i) if user is None else user, []).append(i)
    heap = [(served.get(user, 0), jobs[0], user) for user, jobs in waiting.items()]
    heapq.heapify(heap)
    order: list[int] = []
    taken = dict.fromkeys(waiting, 0)
    while heap:
        count, first, user = heapq.heappop(heap)
        order.append(first)
        taken[user] += 1
        if taken[user] < len(waiting[user]):
            heapq.heappush(heap, (count + 1, waiting[user][taken[user]], user))
    return order


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
