"""The objective's value of a job's options: (node count, SPB depth) pairs.

This is the one coefficient computation of the optimizer: the MILP backends, the greedy
policy and :meth:`Problem.evaluate` all score options here, so they cannot disagree on the
objective. The terms are eqs. (a)-(g) of :mod:`interstice.optimizer.formulation` (with
idle-hole forecasts, coefficient (h) of :mod:`interstice.optimizer.forecast` replaces (b)'s
r p max(0, H - c) before (a) and (g)). A job's whole grid of options (depths x counts) is
scored at once with numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from interstice.optimizer.problem import Job, ScalabilityTable, Weights


@dataclass(frozen=True, slots=True)
class OptionScores:
    """What one job earns over the forecast horizon with each (depth, count) option.

    Arrays have shape (D, k): one row per depth, one column per count; with forecasts
    (:func:`interstice.optimizer.forecast.score_forecast_options`) shape (D, k, L), one
    layer per level L of the job's new nodes.

    Attributes:
        samples_per_s: expected throughput, samples/s.
        goodput: expected full-backprop progress over the horizon, samples, capped at the
            job's ``samples_remaining``.
        rescaled: whether the option changes the job's count or depth.
        value: the job's term in the objective, weighted samples; ``-inf`` where the count
            is above the depth's largest measured count (inadmissible).
    """

    samples_per_s: np.ndarray
    goodput: np.ndarray
    rescaled: np.ndarray
    value: np.ndarray


def one_node_rate(job: Job, table: ScalabilityTable) -> float:
    """The job's one-node samples/s at its model's smallest measured depth (0 normally).

    The unit of the fairness, churn and speedup terms (BFTrainer's speedup objective, arXiv
    2106.12091, divides by this rate). Floored at 1e-9 so a zero row cannot divide
    by zero.
    """
    depth = table.depths(job.model)[0]
    return max(table.samples_per_s(job.model, 1, depth), 1e-9)


def best_per_node_rate(job: Job, table: ScalabilityTable) -> float:
    """The best progress per node-second of the job's model, samples/s (rho_j of eq. (f)).

    The unit of the ``node_seconds`` normalisation; floored at 1e-9.
    """
    return max(table.best_progress_per_node_s(job.model), 1e-9)


def score_options(
    job: Job,
    counts: np.ndarray,
    spb_depths: Sequence[int],
    table: ScalabilityTable,
    weights: Weights,
    horizon_s: float,
    tilt: float = 1.0,
    own_share: bool = True,
) -> OptionScores:
    """Score ``job`` on each of ``counts`` nodes at each of ``spb_depths`` over ``horizon_s``.

    Eqs. (a)-(g) and (i) of :mod:`interstice.optimizer.formulation`.

    Args:
        job: the job.
        counts: node counts, int array of shape (k,), each >= 0.
        spb_depths: D SPB depths, each measured for the job's model.
        table: the scalability table.
        weights: the objective weights.
        horizon_s: forecast horizon H, seconds.
        tilt: the completion tilt of (i), in (0, 1] (:meth:`Problem.completion_tilt`).
        own_share: whether the fairness term (d) counts on this job's nodes alone (its user
            has no other job, :meth:`Problem.own_share`); ``False``: (d) is the user's,
            over all its jobs' nodes (:meth:`Problem.user_share`), and is left out here.

    Returns:
        Arrays of shape (D, k): throughput, goodput, rescale flag and objective term.

    Raises:
        KeyError: the model or a depth is not in the table.
    """
    depths = np.array(spb_depths)[:, None]  # (D, 1)
    rate = np.zeros((len(depths), len(counts)))
    measured = np.zeros(rate.shape, dtype=bool)
    progress = np.empty((len(depths), 1))
    for i, d in enumerate(spb_depths):
        top = table.max_nodes(job.model, d)
        measured[i] = counts <= top
        rate[i, measured[i]] = table.samples_per_s_array(job.model, counts[measured[i]], d)
        progress[i] = table.progress_per_sample(job.model, d)
    cost_s, rescaled = rescale_cost_s(job, counts, spb_depths)
    trained = rate * progress * np.maximum(0.0, horizon_s - cost_s)
    goodput, value = option_value(
        job, counts, trained, rescaled, measured, table, weights, horizon_s, tilt, own_share
    )
    return OptionScores(samples_per_s=rate, goodput=goodput, rescaled=rescaled, value=value)


def rescale_cost_s(
    job: Job, counts: np.ndarray, spb_depths: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (b) and the rescale flag of (e) for each (depth, count) option.

    Args:
        job: the job.
        counts: node counts, int array of shape (k,).
        spb_depths: D SPB depths.

    Returns:
        ``(cost_s, rescaled)``, shape (D, k): the seconds of lost progress the option
        starts with, and whether it is a rescale.
    """
    held = len(job.nodes)
    depth_changed = np.array(spb_depths)[:, None] != job.spb_depth  # (D, 1)
    # (b): growing (a start included) costs rescale_up_s; shrinking, or a depth change at the
    # same count, costs rescale_down_s; stopping costs nothing (it has no progress anyway).
    cost_s = np.where(
        counts > held,
        job.rescale_up_s,
        np.where((counts < held) | depth_changed, job.rescale_down_s, 0.0),
    )
    cost_s[:, counts == 0] = 0.0
    rescaled = (counts != held) | ((counts > 0) & depth_changed)  # (e)
    return cost_s, rescaled


def option_value(
    job: Job,
    counts: np.ndarray,
    trained: np.ndarray,
    rescaled: np.ndarray,
    measured: np.ndarray,
    table: ScalabilityTable,
    weights: Weights,
    horizon_s: float,
    tilt: float = 1.0,
    own_share: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. (a), (c)-(g) and (i) on the samples each option trains within the horizon.

    Args:
        job: the job.
        counts: node counts, broadcastable to ``trained``.
        trained: samples of progress each option trains within the horizon, before the cap
            at ``samples_remaining``: r p max(0, H - c) by (b), or coefficient (h) with
            forecasts.
        rescaled: whether each option is a rescale, broadcastable to ``trained``.
        measured: whether each option's count is measured (else inadmissible).
        table: the job's rates.
        weights: the objective weights.
        horizon_s: H, seconds.
        tilt: the completion tilt of (i), in (0, 1].
        own_share: whether (d) counts here (:func:`score_options`).

    Returns:
        ``(goodput, value)``, each shaped like ``trained``: goodput capped at the job's
        remaining samples (a), and the job's term in the objective, ``-inf`` where not
        ``measured``.
    """
    goodput = np.minimum(trained, job.samples_remaining)  # (a)
    early_finish = weights.early_finish * (trained - goodput)  # (g)
    unit = one_node_rate(job, table) * horizon_s  # samples one node earns over H
    fairness = weights.fairness * unit * np.log2(1.0 + counts) if own_share else 0.0  # (d)
    term = weights.throughput * (goodput + early_finish) + fairness
    term = term - np.where(rescaled, weights.churn * unit, 0.0)  # (e)
    scale = term_scale(job, table, weights, tilt)
    return goodput, np.where(measured, scale * term, -np.inf)


def term_scale(job: Job, table: ScalabilityTable, weights: Weights, tilt: float = 1.0) -> float:
    """The factor k_j q_j ** w_p / s_j of the job's whole term: (c), (f) and (i)."""
    scale = job.priority**weights.priority * tilt  # (c), (i)
    if weights.speedup:
        scale /= one_node_rate(job, table)  # (f)
    elif weights.node_seconds:
        scale /= best_per_node_rate(job, table)  # (f)
    return scale


def share_unit(
    job: Job, table: ScalabilityTable, weights: Weights, horizon_s: float, tilt: float = 1.0
) -> float:
    """What one node over the horizon is worth to ``job`` in the objective's units:
    u_j k_j q_j ** w_p / s_j, the coefficient of w_f log2(1 + n) in (d)."""
    return one_node_rate(job, table) * horizon_s * term_scale(job, table, weights, tilt)
