"""Idle-hole forecasts in the allocation model: node classes by forecast life, and what a
job trains while its nodes leave within the horizon.

The batch scheduler often knows when it wants an idle node back (Slurm's backfill plan,
reservations, maintenance: a node event's ``until``). ``Problem.idle_forecast_s`` carries
it as seconds of idle time left per node; this module turns it into the formulation's
data (classes 1..K with lives tau_k, class K+1 for the nodes that stay through the
horizon) and computes coefficient (h), the forecast schedule, of
:mod:`interstice.optimizer.formulation`, whose docstring states the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from interstice.optimizer.objective import OptionScores, option_value, rescale_cost_s

if TYPE_CHECKING:
    from interstice.optimizer.problem import Job, ScalabilityTable, Weights


@dataclass(frozen=True)
class NodeLives:
    """The idle nodes' forecast lives, as the formulation sees them.

    Attributes:
        life_s: tau_1 < ... < tau_K, the life of each class of short-lived nodes, seconds,
            shape (K,), each in [0, H): the shortest forecast life of the nodes in it.
            Empty (K = 0) when no node is forecast to leave within the horizon.
        node_class: class of every idle node, 1..K, or K + 1 for a node that stays through
            the horizon (its forecast is H or more, or unknown).
        order_s: every idle node's forecast remaining idle seconds, H where unknown:
            placement hands out (and a shrinking job keeps) the longest-lived first.
        per_class: idle nodes per class, shape (K + 2,) (index 0 unused).
    """

    life_s: np.ndarray
    node_class: Mapping[str, int]
    order_s: Mapping[str, float]
    per_class: np.ndarray

    def pool(self, held: Sequence[str]) -> np.ndarray:
        """Idle nodes per class that a job holding ``held`` does not hold, shape (K + 2,):
        where its new nodes come from."""
        return self.per_class - np.bincount(self.classes_of(held), minlength=len(self.per_class))

    @property
    def classes(self) -> int:
        """K, the number of classes of nodes forecast to leave within the horizon."""
        return len(self.life_s)

    def keep_order(self, nodes: Sequence[str]) -> list[str]:
        """``nodes`` longest-lived first (ties by name): the order in which a job keeps its
        held nodes (it releases the shortest-lived) and placement hands out free ones."""
        return sorted(nodes, key=lambda node: (-self.order_s[node], node))

    def classes_of(self, nodes: Sequence[str]) -> np.ndarray:
        """The class (1..K+1) of each of ``nodes``, int array of shape (len(nodes),)."""
        return np.array([self.node_class[node] for node in nodes], dtype=np.int64)


def node_lives(
    idle_nodes: Sequence[str],
    forecast_s: Mapping[str, float] | None,
    horizon_s: float,
    max_classes: int,
) -> NodeLives | None:
    """Group the idle nodes by forecast life (the formulation's classes).

    A node's life is min(forecast, H). The nodes whose life is below H are split into at
    most ``max_classes`` classes: every distinct life its own class when there are that
    few, else contiguous runs of distinct lives holding about equal numbers of nodes
    (distinct life u goes to group floor(max_classes x (nodes with a shorter life) /
    short-lived nodes)). A class's life is the shortest in it, so the model never counts a
    node as staying longer than its forecast.

    Args:
        idle_nodes: the idle pool's names.
        forecast_s: forecast remaining idle seconds per node where known (>= 0).
        horizon_s: H, seconds, > 0.
        max_classes: the most classes of short-lived nodes, >= 1.

    Returns:
        The classes, or ``None`` when no forecast is given (``forecast_s`` None or empty):
        then the model and the placement are exactly those without forecasts.
    """
    if not forecast_s:
        return None
    order_s = {node: float(forecast_s.get(node, horizon_s)) for node in idle_nodes}
    lives = {node: min(life, horizon_s) for node, life in order_s.items()}
    short = np.array(sorted(life for life in lives.values() if life < horizon_s))
    distinct, first = np.unique(short, return_index=True)
    if len(distinct) <= max_classes:
        group = np.arange(len(distinct))
    else:
        group = np.unique(max_classes * first // len(short), return_inverse=True)[1]
    life_s = distinct[np.unique(group, return_index=True)[1]]  # each group's shortest
    class_of_life = dict(zip(distinct.tolist(), (group + 1).tolist(), strict=True))
    top = len(life_s) + 1
    node_class = {
        node: class_of_life[life] if life < horizon_s else top for node, life in lives.items()
    }
    per_class = np.bincount(list(node_class.values()), minlength=top + 1)
    return NodeLives(life_s=life_s, node_class=node_class, order_s=order_s, per_class=per_class)


def score_forecast_options(
    job: Job,
    counts: np.ndarray,
    spb_depths: Sequence[int],
    table: ScalabilityTable,
    weights: Weights,
    horizon_s: float,
    life_s: np.ndarray,
    keep_class: np.ndarray,
    tilt: float = 1.0,
    own_share: bool = True,
) -> OptionScores:
    """Score ``job`` on each count, depth and level of its new nodes, with forecast lives.

    Coefficient (h) of :mod:`interstice.optimizer.formulation`, then eqs. (a)-(g) on the
    samples it trains, then the guaranteed value over levels (the formulation's (h)).

    Args:
        job: the job.
        counts: node counts, int array of shape (C,), each >= 0.
        spb_depths: D SPB depths, each measured for the job's model.
        table: the job's rates.
        weights: the objective weights.
        horizon_s: H, seconds.
        life_s: tau_1..tau_K, seconds, shape (K,), ascending, each < H.
        keep_class: the classes (1..K+1) of the job's held nodes in the order it keeps them,
            shape (h,): at count n <= h it keeps the first n.
        tilt: the completion tilt of (i), in (0, 1].
        own_share: whether (d) counts on this job's nodes alone
            (:func:`interstice.optimizer.objective.score_options`).

    Returns:
        Arrays of shape (D, C, K + 1); the last axis is the level L = 1..K+1 of the new
        nodes (all counted at life tau_L, tau_{K+1} = H; at counts <= h, where no node is
        new, every level is the same). ``goodput`` and ``value`` are those of the level in
        L..K+1 that earns least (the guaranteed value).
    """
    classes = len(life_s)
    held = len(keep_class)
    tau = np.concatenate([[0.0], life_s, [horizon_s]])  # event e at tau[e], e = 1..K
    # alive[e, i]: of the first i held nodes, those still idle after event e.
    alive = np.zeros((classes + 1, held + 1), dtype=np.int64)
    for e in range(classes + 1):
        alive[e, 1:] = np.cumsum(keep_class > e)
    kept = np.minimum(counts, held)
    new = np.maximum(counts - held, 0)
    levels = np.arange(1, classes + 2)  # (L,)
    tops = [table.max_nodes(job.model, d) for d in spb_depths]
    curve = np.zeros((len(spb_depths), max(tops) + 1))
    progress = np.empty((len(spb_depths), 1, 1))
    for i, d in enumerate(spb_depths):
        curve[i, : tops[i] + 1] = table.samples_per_s_array(job.model, np.arange(tops[i] + 1), d)
        progress[i] = table.progress_per_sample(job.model, d)
    measured = counts[None, :] <= np.array(tops)[:, None]  # (D, C)
    cost_s, rescaled = rescale_cost_s(job, counts, spb_depths)  # the option's own pause
    top_count = curve.shape[1] - 1
    shape = (len(spb_depths), len(counts), len(levels))
    count = np.broadcast_to(counts[:, None], shape[1:])
    stopped = np.zeros(shape[1:], dtype=bool)
    pause_end_s = np.broadcast_to(cost_s[:, :, None], shape)
    trained = np.zeros(shape)
    for e in range(classes + 1):  # segment e: [tau_e, tau_{e+1})
        if e > 0:  # event e: the nodes of class e leave
            left = alive[e, kept][:, None] + new[:, None] * (levels[None, :] > e)
            stopped = stopped | (left < job.min_nodes)  # below min_nodes: it stops
            now = np.where(stopped, 0, left)
            dropped = (now < count) & (now > 0)  # it goes on, paused by the reclaim
            reclaimed_s = tau[e] + job.rescale_down_s + job.reclaim_loss_s
            pause_end_s = np.where(dropped[None], np.maximum(pause_end_s, reclaimed_s), pause_end_s)
            count = now
        run_s = np.maximum(0.0, tau[e + 1] - np.maximum(tau[e], pause_end_s))
        trained = trained + curve[:, np.minimum(count, top_count)] * progress * run_s
    rate = np.where(measured, curve[:, np.minimum(counts, top_count)], 0.0)
    goodput, value = option_value(
        job,
        counts[:, None],
        trained,
        rescaled[:, :, None],
        measured[:, :, None],
        table,
        weights,
        horizon_s,
        tilt,
        own_share,
    )
    # The guaranteed value: level L is worth what the worst level in L..K+1 earns (ties:
    # the lowest such level, whose goodput is reported).
    least = np.minimum.accumulate(value[:, :, ::-1], axis=2)[:, :, ::-1]  # (D, C, L)
    later = levels[None, :] >= levels[:, None]  # [L, L']: L' >= L
    hits = later & (value[:, :, None, :] == least[:, :, :, None])  # (D, C, L, L')
    worst = hits.argmax(axis=3)
    value = least
    goodput = np.take_along_axis(goodput, worst, axis=2)
    return OptionScores(
        samples_per_s=np.broadcast_to(rate[:, :, None], shape),
        goodput=goodput,
        rescaled=np.broadcast_to(rescaled[:, :, None], shape),
        value=value,
    )
