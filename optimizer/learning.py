"""Throughput curves learned online from what a job's workers report.

Model: a job's samples/s on n nodes at one SPB depth is a power law r(n) = a * n**b with
0 <= b <= 1: monotone (b >= 0) and concave (b <= 1), with diminishing returns as data
parallelism's communication grows. It fits every model of the Summit ImageNet table
(BFTrainer's ``imagenet-scalability.csv``, 1-64 nodes) within 8 % at every measured count
(AlexNet, the least regular, worst), with exponents 0.82 (AlexNet) to 0.98 (DenseNet).
Pollux (Qiao et al., "Pollux: Co-adaptive Cluster Scheduling for Goodput-Optimized Deep
Learning", OSDI'21, section 3.2) fits its throughput model's parameters online from the
iteration times a job reports the same way; its model has five parameters per job (compute,
synchronisation and overlap), more than a few reports at one or two sizes determine, so this
one keeps two.

Fit (:func:`fit_curve`), per depth, in log space (x = log n, y = log r): the exponent
b_0 of the prior's points (their least-squares slope), then a and b minimising
sum_i w_i (y_i - log a - b x_i)**2 + lambda (b - b_0)**2 over the observations i (weight
``RateObservation.weight``), with lambda = ``PRIOR_WEIGHT`` x the prior's spread
mean_p (x_p - mean x_p)**2: the prior weighs on the slope as ``PRIOR_WEIGHT`` observations
spread over its counts would, and not at all on the level. Closed form:
b = (S_xy + lambda b_0) / (S_xx + lambda) (S: weighted sums of centred products), clipped to
[0, 1]; log a = weighted mean of y - b x. So reports at one count give the table's shape at
the job's own level; reports at several counts soon give the job's own shape. A depth with no
observation keeps the prior's points unchanged. Limit: a job is observed only at the counts
it is given; one the optimizer stops because its fitted curve looks poor reports nothing
more, so an underestimate at small counts is not corrected (no exploration). In
tests/optimizer/test_learning.py a job whose true curve differs from its table row in level
or in shape, or that starts from the default curve, gets its true allocation from the
second solve on.

Default (:func:`default_curve`), for a job whose model has no table row: the power law with
the median exponent and the median one-node rate of the Summit table's seven models.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from interstice.optimizer.problem import ScalabilityPoint
from pydantic import BaseModel, ConfigDict, Field

DEFAULT_MODEL = "default"
"""The ``model`` name of :func:`default_curve`'s points (the optimizer reads a job's
``rates`` as its own, whatever the name)."""

DEFAULT_EXPONENT = 0.9475
"""b of the default curve: the median of the seven log-log least-squares exponents of the
Summit table (AlexNet 0.819, DenseNet 0.976, mnasnet1 0.943, mobilenet 0.948, resnet18
0.944, shufflenet 0.951, vgg16 0.980); its per-node efficiency at 64 nodes is
64**(b - 1) = 0.80 (the table's median: 0.798)."""

DEFAULT_ONE_NODE_SAMPLES_PER_S = 3039.9
"""a of the default curve, samples/s: the median one-node rate of the Summit table
(mobilenet's; the seven range 989.9 to 7115.3). The default node_seconds objective divides
a job's level out of its own term (but for the cap at its remaining samples); raw samples
(``Weights(node_seconds=False)``) weigh it against the other jobs'."""

PRIOR_WEIGHT = 1.0
"""How many observations the prior's slope counts as in the fit (it never weighs on the
level): after a few reports at two or more counts the job's own slope dominates."""


class RateObservation(BaseModel):
    """A throughput a job's workers reported.

    Attributes:
        nodes: node count it ran on, >= 1.
        spb_depth: SPB depth it ran at.
        samples_per_s: the whole job's training throughput, samples/s, > 0.
        weight: how much the fit trusts it (e.g. the seconds it averages over), > 0.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: int = Field(ge=1)
    spb_depth: int = Field(default=0, ge=0)
    samples_per_s: float = Field(gt=0)
    weight: float = Field(default=1.0, gt=0)


def curve_counts(max_nodes: int) -> list[int]:
    """1, 2, 4, ... below ``max_nodes``, then ``max_nodes``: where a curve gets points.

    Raises:
        ValueError: ``max_nodes`` < 1.
    """
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    counts = [1 << k for k in range(max_nodes.bit_length()) if 1 << k < max_nodes]
    return [*counts, max_nodes]


def power_law_points(
    model: str,
    counts: Iterable[int],
    level: float,
    exponent: float,
    spb_depth: int = 0,
    progress_per_sample: float = 1.0,
) -> tuple[ScalabilityPoint, ...]:
    """Points of r(n) = level * n**exponent at ``counts`` (samples/s)."""
    return tuple(
        ScalabilityPoint(
            model=model,
            nodes=n,
            samples_per_s=level * n**exponent,
            spb_depth=spb_depth,
            progress_per_sample=progress_per_sample,
        )
        for n in counts
    )


def default_curve(max_nodes: int) -> tuple[ScalabilityPoint, ...]:
    """The default throughput curve, depth 0, for a job whose model has no table row.

    r(n) = ``DEFAULT_ONE_NODE_SAMPLES_PER_S`` * n ** ``DEFAULT_EXPONENT`` (module
    docstring), at n = 1, 2, 4, ... and ``max_nodes``.

    Args:
        max_nodes: the largest count the job may get, >= 1.

    Returns:
        Points named ``DEFAULT_MODEL``, ascending counts.

    Raises:
        ValueError: ``max_nodes`` < 1.
    """
    return power_law_points(
        DEFAULT_MODEL, curve_counts(max_nodes), DEFAULT_ONE_NODE_SAMPLES_PER_S, DEFAULT_EXPONENT
    )


def fit_curve(
    prior: tuple[ScalabilityPoint, ...] | None,
    observations: Iterable[RateObservation],
    max_nodes: int,
) -> tuple[ScalabilityPoint, ...]:
    """Fit a job's throughput curve to its reported rates (module docstring).

    Per depth of the prior: with no observation at that depth, the prior's points unchanged;
    with some, the fitted power law at n = 1, 2, 4, ... and ``max_nodes`` (its
    ``progress_per_sample`` from the prior). Observations at depths the prior lacks are not
    used: only the table knows what a sample at that depth is worth.

    Args:
        prior: the job's curve so far (its model's table rows, or :func:`default_curve`);
            ``None`` means ``default_curve(max_nodes)``.
        observations: the rates its workers reported.
        max_nodes: the largest count the job may get, >= 1.

    Returns:
        Points of one model (the prior's name), ascending by depth then count.

    Raises:
        ValueError: ``max_nodes`` < 1.
    """
    counts = curve_counts(max_nodes)
    prior = default_curve(max_nodes) if prior is None else prior
    seen = list(observations)
    fitted: list[ScalabilityPoint] = []
    for depth in sorted({p.spb_depth for p in prior}):
        rows = sorted((p for p in prior if p.spb_depth == depth), key=lambda p: p.nodes)
        mine = [o for o in seen if o.spb_depth == depth]
        if not mine:
            fitted.extend(rows)
            continue
        known = [p for p in rows if p.nodes > 0 and p.samples_per_s > 0]
        prior_n = np.array([p.nodes for p in known])
        prior_rate = np.array([p.samples_per_s for p in known])
        n = np.array([o.nodes for o in mine], dtype=float)
        rate = np.array([o.samples_per_s for o in mine])
        weight = np.array([o.weight for o in mine])
        level, exponent = _log_log_fit(n, rate, weight, prior_n, prior_rate)
        fitted.extend(
            power_law_points(
                rows[0].model, counts, level, exponent, depth, rows[0].progress_per_sample
            )
        )
    return tuple(fitted)


def _log_log_fit(
    n: np.ndarray,
    rate: np.ndarray,
    weight: np.ndarray,
    prior_n: np.ndarray,
    prior_rate: np.ndarray,
) -> tuple[float, float]:
    """(a, b) of rate = a * n**b fitted to observations with the prior's slope as a penalty.

    The module docstring's closed form. Arrays: observations' counts, rates and weights,
    shape (k,), k >= 1; the prior's counts and rates, shape (m,) (m = 0: b_0 = 1, no
    penalty).
    """
    x, y = np.log(n), np.log(rate)
    x_mean, y_mean = np.average(x, weights=weight), np.average(y, weights=weight)
    s_xx = float(np.sum(weight * (x - x_mean) ** 2))
    s_xy = float(np.sum(weight * (x - x_mean) * (y - y_mean)))
    prior_x = np.log(prior_n.astype(float))
    prior_spread = float(np.mean((prior_x - prior_x.mean()) ** 2)) if len(prior_x) else 0.0
    if prior_spread > 0:
        slope_0 = float(np.polyfit(prior_x, np.log(prior_rate), 1)[0])
        slope_0 = min(max(slope_0, 0.0), 1.0)
    else:
        slope_0 = 1.0  # one prior count or none: linear scaling until reports say otherwise
    penalty = PRIOR_WEIGHT * prior_spread
    if s_xx + penalty > 1e-12:
        exponent = (s_xy + penalty * slope_0) / (s_xx + penalty)
    else:
        exponent = slope_0
    exponent = min(max(exponent, 0.0), 1.0)
    return float(np.exp(y_mean - exponent * x_mean)), exponent
