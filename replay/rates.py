"""What the optimizer is told about throughput in a replay: a perturbed table, learned curves.

:func:`perturb` gives the optimizer a wrong table (``--rate-error F``); :class:`Learner` feeds
back what the jobs really train (``--learn``) through
:func:`interstice.optimizer.learning.fit_curve`, as the service does from its agents' reports.
"""

from __future__ import annotations

import math

import numpy as np
from interstice.optimizer import ScalabilityPoint, ScalabilityTable
from interstice.optimizer.learning import RateObservation, fit_curve
from interstice.replay.jobs import JobSpec


def perturb(table: ScalabilityTable, error: float, seed: int) -> ScalabilityTable:
    """``table`` with every measured rate multiplied by its own seeded random factor.

    Each row (model, nodes, depth) gets a factor ``(1 + error) ** u`` with u uniform in
    [-1, 1] (log-uniform in [1/(1+error), 1+error], so too high and too low are alike);
    rows are drawn in sorted (model, depth, nodes) order, so a seed gives the same table
    whatever the CSV's row order. The curve's shape changes too, not only its scale.

    Args:
        table: the true table.
        error: F >= 0; 0 returns ``table`` itself.
        seed: the generator's seed.

    Returns:
        The believed table (same rows, rates scaled; progress per sample unchanged).

    Raises:
        ValueError: ``error`` < 0 or not finite.
    """
    if not 0 <= error < math.inf:
        raise ValueError(f"rate error must be a finite number >= 0, got {error}")
    if error == 0:
        return table
    rng = np.random.default_rng(seed)
    rows = sorted(table.points, key=lambda p: (p.model, p.spb_depth, p.nodes))
    factors = (1.0 + error) ** rng.uniform(-1.0, 1.0, len(rows))
    return ScalabilityTable(
        points=tuple(
            p.model_copy(update={"samples_per_s": p.samples_per_s * float(f)})
            for p, f in zip(rows, factors, strict=True)
        )
    )


class Learner:
    """Per job, the true rates seen at each (nodes, depth), and the curve fitted from them."""

    def __init__(self, believed: ScalabilityTable) -> None:
        """Args: believed: the table the optimizer starts from (each model's prior)."""
        self.believed = believed
        self.seen: dict[int, dict[tuple[int, int], float]] = {}
        self.fitted: dict[int, tuple[ScalabilityPoint, ...]] = {}

    def observe(self, job: int, nodes: int, spb_depth: int, samples_per_s: float) -> None:
        """Job ``job`` trained ``samples_per_s`` on ``nodes`` nodes at ``spb_depth``."""
        seen = self.seen.setdefault(job, {})
        if seen.get((nodes, spb_depth)) != samples_per_s:
            seen[(nodes, spb_depth)] = samples_per_s
            self.fitted.pop(job, None)

    def rates(self, job: int, spec: JobSpec) -> tuple[ScalabilityPoint, ...] | None:
        """``Job.rates`` for job ``job``: ``None`` until it has run, then the fitted curve."""
        if job not in self.seen:
            return None
        if job not in self.fitted:
            prior = tuple(p for p in self.believed.points if p.model == spec.model)
            observations = [
                RateObservation(nodes=n, spb_depth=d, samples_per_s=rate)
                for (n, d), rate in sorted(self.seen[job].items())
            ]
            self.fitted[job] = fit_curve(prior, observations, spec.max_nodes)
        return self.fitted[job]
