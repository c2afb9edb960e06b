"""The allocation MILP: one binary per job, admissible node count and SPB depth.

Problem: at each event (a node becomes idle or is reclaimed, a job arrives or ends), give the
idle nodes to the elastic jobs so that the weighted progress they make over a forecast horizon
is largest. BFTrainer (Liu et al., "BFTrainer: Low-Cost Training of Neural Networks on
Unfillable Supercomputer Nodes", arXiv 2106.12091; its MILP is ``progMIP.py`` of
github.com/BFTrainer/BFTrainer) uses one binary per (node, job) pair plus big-M and XOR
binaries for the bounds and the no-migration rule. This model has one binary per (job, count,
depth) option instead, so its size does not grow with the number of nodes: a multiple-choice
knapsack (Sinha & Zoltners, "The multiple-choice knapsack problem", Oper. Res. 27(3), 1979).

Data:
    N          number of idle nodes (``Problem.idle_nodes``), held ones included.
    j          a job, by its index in ``Problem.jobs``: min_nodes m_j; max count
               M_j(d) = min(max_nodes, its curve's largest count at depth d, N)
               (``Problem.max_count``: no extrapolation); held count h_j = len(nodes);
               current depth e_j; priority q_j; samples_remaining R_j (samples of
               full-backprop progress still to train); allowed depths D_j
               (``Problem.depths_of``): ``Job.spb_depths`` (a job whose workers accept only
               depth 0, plain data parallel or SplitBrain, has D_j = {0}) or every depth of
               its curve, less every depth > 0 with a derived (not measured) row.
    r_j(n, d)  samples/s of j on n nodes at depth d, linear between the points of its curve:
               ``Job.rates`` when set (its own curve, e.g. learned online,
               :mod:`interstice.optimizer.learning`), else its model's table rows (BFTrainer's
               MILP interpolates the same way, with SOS2 weights).
    p_j(d)     progress_per_sample at depth d (1 at depth 0).
    u_j        r_j(1, d0) * H, what one node earns j over the horizon, samples (d0: the
               model's smallest measured depth, normally 0): the unit of (d), (e), (f).
    H          forecast horizon, seconds (``horizon_s``: fixed, or the expected remaining
               idle time, :func:`interstice.optimizer.horizon.expected_remaining_idle_s`).
    w          ``Weights``: throughput w_t, fairness w_f, churn w_c, priority exponent w_p,
               normalisation (speedup or node_seconds flag), early-finish weight beta.
    O_j        j's options: (0, e_j), and (n, d) for d in D_j and m_j <= n <= M_j(d).

Coefficients: v_j(n, d), the objective's value of option (n, d) (``objective.py``):
    (a) goodput g_j(n, d) = min(r_j(n, d) * p_j(d) * max(0, H - c_j(n, d)), R_j), samples.
    (b) rescale cost c_j(n, d), seconds of lost progress: rescale_up_s if n > h_j (a start
        0 -> n included); rescale_down_s if 0 < n < h_j, or if n = h_j and d != e_j (a depth
        change re-forms the group on the same nodes, like a shrink); 0 if (n, d) = (h_j, e_j)
        or n = 0 (a stopped job makes no progress either way).
    (c) priority: j's whole term is multiplied by q_j ** w_p (w_p = 0 ignores priorities;
        the default w_p = 1 with every q_j = 1 is plain throughput).
    (d) fairness: + w_f * u_j * log2(1 + n), a concave share term (proportional fairness,
        with log2(1 + n) so that n = 0 is defined; one node is worth u_j, three nodes 2 u_j):
        in samples, comparable with goodput; its diminishing returns spread nodes over jobs.
    (e) churn: - w_c * u_j if the option is a rescale (n != h_j, or n > 0 and d != e_j;
        stopping a running job counts): w_c = 0.1 prices a rescale at a tenth of one node's
        work over the horizon, on top of the seconds lost in (b).
    (f) normalisation s_j: j's whole term is divided by s_j = 1 (raw samples, the default
        weights), r_j(1, d0) with ``Weights.speedup`` (goodput in one-node equivalents: the
        "speedup" variant of BFTrainer's admin-defined metrics), or
        rho_j = max_{n >= 1, d} r_j(n, d) p_j(d) / n (over depth 0 and the measured depths)
        with ``Weights.node_seconds`` (goodput in dedicated node-seconds: what the replay's
        ``harvest`` counts, so every model's node time weighs alike and a slow model is not
        starved by a fast one).
    (g) early finish: + beta * max(0, r_j(n, d) * p_j(d) * max(0, H - c_j(n, d)) - R_j),
        samples: what the option would train beyond R_j within the horizon, at weight
        beta = ``Weights.early_finish``, default 0.9, in [0, 1]. A job that finishes within the
        horizon does so at T_j = c_j(n, d) + R_j / (r_j(n, d) p_j(d)) < H, and the term
        equals beta * r_j(n, d) p_j(d) * (H - T_j): the horizon time its nodes are freed
        for, valued at beta times its own rate. Justification: in the rolling horizon the
        completion re-solves and the freed nodes go to the next job, which trains at about
        the same rate on them (the jobs share a scalability table); beta < 1 discounts the
        successor's rescale_up_s and the chance that no job wants them. With (a)'s cap alone
        (beta = 0) a job that can finish within H values no node beyond the fewest that
        finish it: at H = 300 s 41 % of the idle node time stayed unused and nearly
        finished jobs waited for hours; BFTrainer's MILP has no cap (beta = 1). With the
        term, (i) a node goes first to a job that turns it into goodput within the horizon
        when that job's marginal samples/s is above beta times the finishing job's;
        (ii) a finishable job still takes more nodes, so it finishes sooner, whenever its
        rate grows with the count and a grow's rescale_up_s pays back. beta was chosen by
        the 24 h replay (README): goodput in 1e10 samples at H = 60 / 300 s / auto, CP-SAT:
        beta = 0: 2.01 / 1.47 / 0.91; 0.01: 2.11 / 2.06 / 2.04; 0.5: 2.12 / 2.10 / 2.08;
        0.9: 2.12 / 2.12 / 2.10; 1: 2.11 / 2.12 / 2.10.
    v_j(n, d) = q_j ** w_p / s_j * (w_t * (g_j(n, d) + (g)) + (d) + (e)).
    The defaults (w_t = 1, w_f = w_c = 0, w_p = 1, beta = 0.9, q_j = 1, s_j = rho_j) give
    goodput plus (g) in dedicated node-seconds; ``Weights(node_seconds=False)`` gives it in
    samples (beta was chosen in samples, below).

Variables:
    z_{j}_{n}_{d} in {0, 1}: job j runs on n nodes at depth d (z_{j}_{0}_{e_j}: none).

Objective:
    maximize sum_j sum_{(n, d) in O_j} v_j(n, d) * z_{j}_{n}_{d}

Constraints:
    (1) each job takes exactly one option: sum_{(n, d) in O_j} z_{j}_{n}_{d} = 1, for all j.
    (2) capacity: sum_j sum_{(n, d) in O_j} n * z_{j}_{n}_{d} <= N.

Every solution of (1)-(2) maps to node names with nothing migrating
(:mod:`interstice.optimizer.placement`): a job keeps min(n_j, h_j) of its nodes, and the
free nodes (held ones released by shrinking jobs included) number
N - sum_j min(n_j, h_j) >= sum_j max(0, n_j - h_j), what the growing jobs need.

Exact reductions (they change no optimum):
    (i) since the constraints see only n, for each (j, n) only the depth of largest
        v_j(n, d) is kept (ties keep e_j, then the smallest depth);
    (ii) an option is dropped when an option of the same job with fewer nodes is worth at
        least as much (swapping to it keeps (1)-(2) and loses nothing). What remains has
        values strictly increasing in n per job: at most 1 + max count binaries per job,
        whatever N and the number of depths.
    (iii) bound reduction (reduced-cost fixing on the Lagrangian relaxation of (2); Nemhauser
        & Wolsey, "Integer and Combinatorial Optimization", 1988, II.6; the core of Pisinger's
        "A minimal algorithm for the multiple-choice knapsack problem", EJOR 83, 1995): for
        a node price lambda >= 0, L(lambda) = lambda N + sum_j u_j with
        u_j = max_{(n, d) in O_j} (v_j(n, d) - lambda n) bounds every solution of (1)-(2)
        from above, and L(lambda) - u_j + v_j(n, d) - lambda n bounds every solution that
        gives j the option (n, d). Options whose bound is below the greedy answer's value
        (less a relative 1e-6, ``BOUND_TOLERANCE``) cannot be in a better answer and are
        dropped; lambda is the LP's node price (the gain per node of the LP's fractional
        step), which makes L(lambda) the LP bound. On 200 jobs x 10,000 nodes x 4 depths it
        leaves 300-1,400 of about 12,600 binaries (bench/solve.py instances).

Solving (:func:`interstice.optimizer.solve`): the LP relaxation of (1)-(2) is solved exactly
by the greedy over each job's upper concave hull of (n, v) (Sinha & Zoltners); when that LP
optimum is integral (no hull step had to be cut: the idle pool covers every worthwhile step,
or runs out exactly at one) it is the MILP optimum and no solver runs (backend ``greedy``,
termination ``lp-integral``). With ``Problem.relative_gap`` g > 0, a greedy answer within g
of L(lambda) is returned as it is (termination ``within-gap``). Otherwise reduction (iii)
runs, then CBC or CP-SAT solves (1)-(2) over the kept options, with the greedy answer as
CP-SAT's hint and as the fallback, and stops once its incumbent is proven within g of the
optimum (CP-SAT's ``relative_gap_limit``, CBC's ``ratioGap``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from interstice.optimizer.objective import score_options
from interstice.optimizer.problem import Problem


@dataclass(frozen=True)
class Options:
    """Every job's kept options, flattened, in job order; job j's are ``start[j]:start[j+1]``.

    Each job's first option is its zero option (0 nodes, current depth); counts and values
    strictly increase after it. Arrays have shape (k,) with k the number of options.

    Attributes:
        job: index of the option's job in ``Problem.jobs``.
        count: node count n.
        depth: SPB depth d.
        value: objective coefficient v_j(n, d).
        samples_per_s: expected samples/s.
        goodput: expected goodput over the horizon, samples.
        rescaled: whether the option is a rescale.
        start: shape (jobs + 1,), offsets of each job's options.
    """

    job: np.ndarray
    count: np.ndarray
    depth: np.ndarray
    value: np.ndarray
    samples_per_s: np.ndarray
    goodput: np.ndarray
    rescaled: np.ndarray
    start: np.ndarray

    def subset(self, keep: np.ndarray) -> Options:
        """The options where ``keep`` (bool, shape (k,)) holds; it must keep one per job."""
        kept_per_job = np.add.reduceat(keep.astype(int), self.start[:-1]) if len(keep) else []
        start = np.concatenate([[0], np.cumsum(kept_per_job)]).astype(int)
        return Options(
            job=self.job[keep],
            count=self.count[keep],
            depth=self.depth[keep],
            value=self.value[keep],
            samples_per_s=self.samples_per_s[keep],
            goodput=self.goodput[keep],
            rescaled=self.rescaled[keep],
            start=start,
        )

    def names(self) -> list[str]:
        """Variable names ``z_{j}_{n}_{d}`` (job index, count, depth), one per option."""
        return [
            f"z_{j}_{n}_{d}"
            for j, n, d in zip(
                self.job.tolist(), self.count.tolist(), self.depth.tolist(), strict=True
            )
        ]


def build_options(problem: Problem) -> Options:
    """Score every job's admissible options and keep the undominated ones.

    Args:
        problem: the instance.

    Returns:
        The options of the formulation (module docstring), after its exact reductions.
    """
    weights, horizon_s = problem.weights, problem.horizon_s
    parts: list[tuple[np.ndarray, ...]] = []
    start = [0]
    for j, job in enumerate(problem.jobs):
        # The current depth first, so that ties between depths keep it (argmax takes the first).
        depths = sorted(problem.depths_of(job), key=lambda d: (d != job.spb_depth, d))
        top = max(problem.max_count(job, d) for d in depths)
        # The zero option, then min_nodes..top (none if top < min_nodes).
        counts = np.concatenate([[0], np.arange(job.min_nodes, top + 1)])
        grid = score_options(job, counts, depths, problem.table_of(job), weights, horizon_s)
        pick = grid.value.argmax(axis=0)  # the best depth of each count
        every = np.arange(len(counts))
        value = grid.value[pick, every]
        depth = np.array(depths)[pick]
        depth[0] = job.spb_depth  # at count 0 every depth scores the same; report the current
        # Keep an option only if it is worth more than every option with fewer nodes.
        keep = np.ones(len(counts), dtype=bool)
        keep[1:] = value[1:] > np.maximum.accumulate(value)[:-1]
        columns = (
            counts,
            depth,
            value,
            grid.samples_per_s[pick, every],
            grid.goodput[pick, every],
            grid.rescaled[pick, every],
        )
        parts.append((np.full(int(keep.sum()), j), *(column[keep] for column in columns)))
        start.append(start[-1] + int(keep.sum()))
    if not parts:
        parts.append((np.zeros(0, int),) * 3 + (np.zeros(0),) * 3 + (np.zeros(0, bool),))
    columns = (np.concatenate(c) for c in zip(*parts, strict=True))
    job_, count, depth, value, rate, goodput, rescaled = columns
    return Options(job_, count, depth, value, rate, goodput, rescaled, np.array(start))


BOUND_TOLERANCE = 1e-6
"""Relative slack of the bound reduction: an option is dropped only if its bound is below
the incumbent by more than this share of the incumbent's value (covers the solvers' own
tolerances and CP-SAT's integer scaling, at most 200 jobs x 1e-9 of the largest value)."""


def _lagrangian(
    options: Options, capacity: int, price: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """Reduction (iii)'s terms at node price lambda: v_j(n, d) - lambda n per option, u_j per
    job, and L(lambda)."""
    reduced = options.value - price * options.count
    best = np.maximum.reduceat(reduced, options.start[:-1])
    return reduced, best, float(price * capacity + best.sum())


def lp_bound(options: Options, capacity: int, price: float) -> float:
    """L(lambda) of reduction (iii): an upper bound on every solution of (1)-(2), the LP
    relaxation's optimum when ``price`` is the LP's node price.

    Args:
        options: the scored options.
        capacity: number of idle nodes N.
        price: lambda >= 0, value per node.
    """
    return _lagrangian(options, capacity, price)[2]


def bound_reduction(
    options: Options, capacity: int, price: float, incumbent: np.ndarray
) -> np.ndarray:
    """Reduction (iii) of the module docstring: the options a better answer may use.

    Args:
        options: the scored options.
        capacity: number of idle nodes N.
        price: lambda >= 0, value per node (any gives a valid bound; the LP's node price,
            :func:`interstice.optimizer.policies.greedy_choice`, the tightest).
        incumbent: shape (jobs,), a feasible choice (indices into ``options``).

    Returns:
        Bool mask of shape (k,): the options kept; the incumbent's are always among them.
    """
    reduced, best, bound = _lagrangian(options, capacity, price)
    option_bound = bound - best[options.job] + reduced  # L(lambda) with option k forced
    target = options.value[incumbent].sum()
    keep = option_bound >= target - BOUND_TOLERANCE * max(abs(target), 1.0)
    keep[incumbent] = True
    return keep
