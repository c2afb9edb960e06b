"""The ``rigid`` baseline: what a centre does today with a scavenger partition and torchrun.

Model (Slurm with a preemptible scavenger partition, each job a ``torchrun`` script that
checkpoints; no interstice):

- Each job asks for a fixed node count k: its ``max_nodes`` or, with ``rigid_nodes``, that
  count, at most the window's node count (Slurm refuses a job larger than its partition, so
  no user asks for more), clamped to ``min_nodes..max_nodes``. It trains at the table's
  ``r(k, 0)`` (plain data parallel, no SPB) and never resizes.
- Jobs queue on arrival, all of them (a batch queue has no admission limit). After every
  event the queue is walked in submission order and each waiting job starts if k idle nodes
  are free, on the free idle nodes of lowest id: first come first served with backfill (a
  later, smaller job starts when an earlier one does not fit; no reservation is held for the
  earlier one, because no idle node's end is known in advance).
- A start (or restart) loads the last checkpoint: ``rescale_up_s`` seconds without progress,
  then ``r(k, 0)`` samples/s. It checkpoints every ``checkpoint_interval_s`` seconds of training
  (counted from the end of that pause), at no cost (a favourable assumption for the baseline).
- When the owner takes back any of its nodes, the job is killed (Slurm preempts the whole
  allocation with ``PreemptMode=REQUEUE``): it loses every sample since its last checkpoint,
  releases its other nodes and waits in the queue again in its original place.
- It completes when its kept progress reaches ``total_samples``.

Accounting is the elastic replay's (:mod:`interstice.replay.simulator`): ``samples`` counts
every sample trained, lost ones included; ``goodput`` only the kept progress;
``lost_goodput`` what the kills threw away; held nodes count as allocated, pauses included.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from interstice.optimizer import Allocation, Problem, ScalabilityTable
from interstice.replay.horizon import FixedHorizon
from interstice.replay.jobs import JobSpec
from interstice.replay.simulator import Replay, ReplayOptions, ReplayResult
from interstice.replay.trace import TraceWindow

DEFAULT_CHECKPOINT_INTERVAL_S = 600.0
"""Seconds of training between two checkpoints of a rigid job (10 minutes)."""


def _no_policy(problem: Problem) -> Allocation:
    raise RuntimeError("the rigid replay allocates by itself")


class RigidReplay(Replay):
    """The elastic replay's event loop with the rigid rules of the module docstring."""

    def __init__(
        self,
        window: TraceWindow,
        jobs: list[JobSpec],
        table: ScalabilityTable,
        rigid_nodes: int | None,
        checkpoint_interval_s: float,
        name: str,
    ) -> None:
        super().__init__(window, jobs, table, _no_policy, FixedHorizon(1.0), ReplayOptions(), name)
        self.interval_s = checkpoint_interval_s
        machine = len(window.node_names)
        self.want = [
            max(spec.min_nodes, min(rigid_nodes or spec.max_nodes, spec.max_nodes, machine))
            for spec in (rec.spec for rec in self.result.jobs)
        ]
        self.run_from_s = [math.inf] * len(self.result.jobs)
        self.checkpoint_goodput = [0.0] * len(self.result.jobs)

    def admit(self, now_s: float) -> None:
        """Every arrival joins the queue (the active list, in submission order) at once."""
        jobs = self.result.jobs
        while self.arrivals and jobs[self.arrivals[0]].arrival_s <= now_s:
            j = self.arrivals.popleft()
            self.active.append(j)
            jobs[j].admitted_s = now_s
            jobs[j].progress_points.append((now_s, 0.0))
            self.jobs_changed = True

    def solve(self, now_s: float) -> None:
        """Start every waiting job, in submission order, whose k nodes are free now."""
        free = np.flatnonzero(self.idle & (self.holder < 0)).tolist()
        for j in self.active:
            rec = self.result.jobs[j]
            k = self.want[j]
            if rec.nodes or k > len(free):
                continue
            nodes, free = set(free[:k]), free[k:]
            self.set_nodes(j, nodes, 0, now_s)
            self.run_from_s[j] = rec.paused_until_s
            self.checkpoint_goodput[j] = rec.goodput
        self.result.solves += 1
        self.last_solve_s = now_s
        self.changed = self.jobs_changed = False

    def reclaim(self, nodes: np.ndarray, now_s: float) -> None:
        """Kill every job that lost a node: back to its last checkpoint, back to the queue."""
        hit = {int(self.holder[node]) for node in nodes[self.holder[nodes] >= 0].tolist()}
        for j in sorted(hit):
            rec = self.result.jobs[j]
            trained_s = max(0.0, now_s - self.run_from_s[j])
            saved_s = math.floor(trained_s / self.interval_s) * self.interval_s
            kept = min(rec.goodput, self.checkpoint_goodput[j] + self.progress_rate[j] * saved_s)
            rec.progress_points.append((now_s, rec.goodput))
            rec.lost_goodput += rec.goodput - kept
            rec.goodput = kept
            rec.preemptions += 1
            self.set_nodes(j, set(), 0, now_s)


def replay_rigid(
    window: TraceWindow,
    jobs: list[JobSpec],
    table: ScalabilityTable,
    *,
    rigid_nodes: int | None = None,
    checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
    name: str = "rigid",
    on_progress: Callable[[float], None] | None = None,
) -> ReplayResult:
    """Replay ``jobs`` on ``window`` as rigid, checkpointing, requeued jobs (module docstring).

    Args:
        window: the trace window.
        jobs: the jobs in arrival order; arrivals at or after the window's end are dropped.
        table: the scalability table (the jobs train at its depth-0 rates).
        rigid_nodes: every job's node count, or ``None``: its ``max_nodes``; at most the
            window's node count, clamped to the job's min..max.
        checkpoint_interval_s: seconds of training between checkpoints, > 0.
        name: the policy's name in the result.
        on_progress: called with the simulated time after each step.

    Returns:
        The replay's totals, timeline and per-job records (``lost_goodput`` filled in).

    Raises:
        ValueError: ``checkpoint_interval_s`` <= 0 or ``rigid_nodes`` < 1.
    """
    if not 0 < checkpoint_interval_s < math.inf:
        raise ValueError(f"checkpoint interval must be > 0 s, got {checkpoint_interval_s}")
    if rigid_nodes is not None and rigid_nodes < 1:
        raise ValueError(f"rigid node count must be >= 1, got {rigid_nodes}")
    replay = RigidReplay(window, jobs, table, rigid_nodes, checkpoint_interval_s, name)
    return replay.run(on_progress)
