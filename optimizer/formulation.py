"""The allocation MILP: one binary per job, admissible node count and SPB depth.

Problem: at each event (a node becomes idle or is reclaimed, a job arrives or ends), give the
idle nodes to the elastic jobs so that the weighted progress they make over a forecast horizon
is largest; where the batch scheduler forecasts when it wants a node back, a node's work
counts only up to then (coefficient (h), constraints (3)). BFTrainer (Liu et al.,
"BFTrainer: Low-Cost Training of Neural Networks on Unfillable Supercomputer Nodes", arXiv
2106.12091; its MILP is ``progMIP.py`` of github.com/BFTrainer/BFTrainer) uses one binary
per (node, job) pair plus big-M and XOR binaries for the bounds and the no-migration rule.
This model has one binary per (job, count, depth) option instead, so its size does not grow
with the number of nodes: a multiple-choice knapsack (Sinha & Zoltners, "The multiple-choice
knapsack problem", Oper. Res. 27(3), 1979).

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
    O_j        j's options: (0, e_j), and (n, d) for d in D_j and m_j <= n <= M_j(d); with
               forecasts, (n, d, L) (below).

Forecast data (``Problem.idle_forecast_s``, :mod:`interstice.optimizer.forecast`; absent,
empty, or not used because too few of the ended holes had one (``Problem.forecasts_used``,
:mod:`interstice.optimizer.coverage`): none of this, and the model is the one above exactly):
    f_i        seconds idle node i is forecast to stay idle (the batch scheduler's ``until``
               minus now), where known; unknown: f_i = H (so with ``--horizon auto`` a node
               of unknown end is expected to stay the pool's expected remaining idle time).
    l_i        life min(f_i, H). The nodes with l_i < H fall into classes 1..K
               (K <= ``forecast_classes``, default 1): each distinct life its own class when
               there are that few, else contiguous runs of lives with about equal node
               counts; class k's life tau_k is the shortest in it (tau_1 < ... < tau_K < H);
               every other node is in class K + 1, tau_{K+1} = H. K = 0 when no node is
               forecast to leave within the horizon: then only the placement's order changes
               (below). With the default K = 1 every node forecast to leave within H counts
               as leaving when the first of them does (see "Cost, honestly" for why).
    keep order j keeps its held nodes longest-lived first (by f_i, then name): at count
               n < h_j it releases the h_j - n shortest-lived.
    L          the level of an option's new nodes: (n, d, L) with n > h_j takes its
               g = n - h_j new nodes from classes >= L (L = 1..K+1); n <= h_j has L = 0.
    F_t        idle nodes of class >= t that no job holds, t = 2..K+1.
    rho_j(n,t) held nodes of class >= t that j releases at count n <= h_j.

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
        The share is the user's, not the job's (``Job.user``; a job without one is a user of
        its own, and then (d) is this term of its options): the jobs J_u of a user u with
        two or more share one term w_f * ū_u * log2(1 + N_u), N_u = sum_{j in J_u} n_j,
        ū_u = the mean over J_u of u_j k_j q_j ** w_p / s_j (what one node over the horizon
        is worth to each, in objective units), outside the v_j (variables f_u, constraints
        (4)-(5)). So a user's weight in the share does not grow with its number of jobs:
        with per-job shares a user with 50 queued jobs holds 50 terms against another's one
        (Kelly, Maulloo & Tan, "Rate control for communication networks: shadow prices,
        proportional fairness and stability", J. Oper. Res. Soc. 49, 1998: proportional
        fairness between the users, maximising sum_u log of each user's share).
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
        finish it, so idle node time stays unused and nearly finished jobs wait; BFTrainer's
        MILP has no cap (beta = 1). With the
        term, (i) a node goes first to a job that turns it into goodput within the horizon
        when that job's marginal samples/s is above beta times the finishing job's;
        (ii) a finishable job still takes more nodes, so it finishes sooner, whenever its
        rate grows with the count and a grow's rescale_up_s pays back. The default beta
        (0.9) and the replays that chose it are in docs/design-notes.md ("The early-finish
        term").
    (h) forecast schedule (with forecasts, K > 0): the samples j trains within the horizon,
        replacing r_j(n, d) p_j(d) max(0, H - c_j(n, d)) in (a) and (g). Its kept held
        nodes leave at their classes' lives, its new nodes at tau_L; n_e is its count after
        the nodes of class e leave (n_0 = n); a fall to n_e < m_j stops it for the rest of
        the horizon (n_e' = 0 from there on, no pause: the replay's rule); any other fall
        is a reclaim and pauses it rescale_down_s + l_j (l_j = ``Job.reclaim_loss_s``, what a
        reclaim loses beyond a shrink), the pause ending at P_e = max(P_{e-1}, tau_e +
        rescale_down_s + l_j) (P_0 = c_j(n, d)); then
            trained = sum_{e=0..K} r_j(n_e, d) p_j(d) max(0, tau_{e+1} - max(tau_e, P_e))
        with tau_0 = 0 and tau_{K+1} = H: a node's goodput counts only up to its forecast
        end, and a reclaim costs the job's rescale_down_s + l_j as in the replay. A level is
        worth what its worst node set earns: v_j(n, d, L) = min_{L' = L..K+1} of the value
        with the new nodes at tau_{L'} (the same where rates grow with the count; with a
        dip, a job can earn more once a node leaves, and the least keeps every node set of
        level L worth at least v_j(n, d, L)). Consequences: a start or grow onto nodes
        forecast to leave before it pays back its rescale_up_s (and the rescale_down_s of
        their reclaim) is worth less than staying, so it is not taken; a job whose
        reclaim costs more values long-lived nodes more, so it takes the higher level;
        a shrinking job keeps its longest-lived nodes (keep order). A planned shrink: an
        option n < h_j releases the shortest-lived held nodes now, at rescale_down_s, instead
        of losing them to their reclaims at rescale_down_s + l_j each; it pays once a
        node's work until its forecast end is worth less than l_j of the job's (so, in the
        rolling horizon, at the first solve that close to the reclaim). With l_j = 0 (the
        replay's default: a reclaim costs what a shrink does) shrinking early only loses the
        node's work before its reclaim and never pays.
    (i) completion: j's whole term is multiplied by k_j = max(exp(-(t_j - t_0) / tau),
        1e-6), t_j its submission time (``Job.submitted_s``), t_0 the earliest of the
        problem's jobs, tau = ``Weights.completion_s`` (0: k_j = 1). Where nodes are scarce,
        a node goes to the earlier job unless the later one turns it into more than 1 / k
        times the goodput, so the admitted jobs finish about in the order they came instead
        of sharing the nodes out over all of them: with jobs of equal size this is
        shortest-remaining-first, which minimises the mean completion time (Schrage, "A
        proof of the optimality of the shortest remaining processing time discipline",
        Oper. Res. 16(3), 1968). The ratio k_j / k_i = exp(-(t_j - t_i) / tau) of two jobs
        is the same at every solve, so the term moves no node between solves by itself; a
        weight by remaining work, (R_0 / R_j) ** a, would change at every solve and make the
        MILP re-balance the nodes at each. The default tau = 100,000 s weighs a job
        submitted an hour later 3.5 % less; its effect on the replay's JCT, harvest and
        efficiency is in docs/benchmarks.md ("The completion term").
    v_j(n, d) = k_j q_j ** w_p / s_j * (w_t * (g_j(n, d) + (g)) + (d) + (e)).
    The defaults (w_t = 1, w_f = w_c = 0, w_p = 1, beta = 0.9, q_j = 1, s_j = rho_j,
    tau = 100,000 s) give goodput plus (g) in dedicated node-seconds, tilted toward the
    earlier jobs; ``Weights(node_seconds=False)`` gives it in samples (beta was chosen in
    samples, below).

Variables:
    z_{j}_{n}_{d} in {0, 1}: job j runs on n nodes at depth d (z_{j}_{0}_{e_j}: none); with
    forecasts z_{j}_{n}_{d}_{L}: and its new nodes are of level L.
    N_{u} >= 0, f_{u} >= 0, per user u with two or more jobs (only when w_f > 0): its nodes,
    and its share term (d), objective units.

Objective:
    maximize sum_j sum_{(n, d) in O_j} v_j(n, d) * z_{j}_{n}_{d} + sum_u f_{u}

Constraints:
    (1) each job takes exactly one option: sum_{(n, d) in O_j} z_{j}_{n}_{d} = 1, for all j.
    (2) capacity: sum_j sum_{(n, d) in O_j} n * z_{j}_{n}_{d} <= N.
    (3_t) classes of forecast life, t = 2..K+1 (with forecasts only):
        sum_j sum_{o in O_j} a_o(t) z_o <= F_t, a_o(t) = g_o [L_o >= t] - rho_j(n_o, t):
        the growing jobs that need nodes of class >= t take no more than are free (never
        held, or released by shrinking jobs). (2) is the same inequality at t = 1.
    (4) a user's nodes: N_u = sum_{j in J_u} sum_{o in O_j} n_o z_o, for each u.
    (5) a user's share, secants of log2(1 + N) between consecutive integers:
        f_u <= w_f ū_u (log2(1 + k) + (N_u - k) (log2(2 + k) - log2(1 + k))), k = 0..M_u - 1,
        M_u = min(N, sum_{j in J_u} max count of j). log2(1 + N) is concave, so the least of
        these lines at an integer N_u is log2(1 + N_u) itself, and the maximisation drives
        f_u up to it: the term is exact (CP-SAT states (5) as an element constraint,
        f_u = the table of w_f ū_u log2(1 + k) at index N_u, in its integer scale).
    With users of several jobs the objective is no longer a sum of per-job terms, so the
    greedy's LP shortcut is skipped, and reduction (iii) below runs on the values plus each
    user's share along its secant at the incumbent's N_u (``UserShares.secants``): a
    separable upper bound, exact at the incumbent, so what it drops cannot beat the
    incumbent. The backend then solves (1)-(5) over the options kept, from the incumbent:
    the better of the greedy on the values and the greedy on the values plus those secants.

Every solution of (1)-(2) maps to node names with nothing migrating
(:mod:`interstice.optimizer.placement`): a job keeps min(n_j, h_j) of its nodes, and the
free nodes (held ones released by shrinking jobs included) number
N - sum_j min(n_j, h_j) >= sum_j max(0, n_j - h_j), what the growing jobs need. With
forecasts, (2)-(3) are Hall's condition for the growing jobs' nested sets of acceptable
classes ({L..K+1}), so every solution of (1)-(3) maps to nodes too: the growing jobs, most
demanding level first, take the longest-lived free nodes left, each at its level or
longer-lived; the objective is then scored on the nodes placed (at least the solver's).

Exact reductions (they change no optimum):
    (i) since the constraints see only n, for each (j, n) only the depth of largest
        v_j(n, d) is kept (ties keep e_j, then the smallest depth);
    (ii) an option is dropped when an option of the same job with fewer nodes is worth at
        least as much (swapping to it keeps (1)-(2) and loses nothing). What remains has
        values strictly increasing in n per job: at most 1 + max count binaries per job,
        whatever N and the number of depths. With forecasts: dropped when an option of the
        same job with no more nodes and no higher level (L = 0 below every level) is worth
        at least as much (it needs fewer new nodes, from more classes, and releases at
        least as many: (3) keeps); and level L is not offered to j unless some idle node
        of class L is not j's and its g new nodes fit in those of class >= L not j's. At
        most (1 + max count) (K + 1) binaries per job. For the jobs of a user with several
        (constraints (4)-(5)) an option is dropped only for one with as many nodes: more
        nodes raise the user's share f_u, which the values v_j do not hold.
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
        leaves 300-1,400 of about 12,600 binaries (bench/solve.py instances). With
        forecasts (3) is priced too: L(lambda, mu) = lambda N + sum_t mu_t F_t +
        sum_j max_o (v_o - lambda n_o - sum_t mu_t a_o(t)), mu >= 0 from a few subgradient
        steps (``lagrangian_prices``), the same rule otherwise.

Solving (:func:`interstice.optimizer.solve`): the LP relaxation of (1)-(2) is solved exactly
by the greedy over each job's upper concave hull of (n, v) (Sinha & Zoltners); when that LP
optimum is integral (no hull step had to be cut: the idle pool covers every worthwhile step,
or runs out exactly at one) it is the MILP optimum and no solver runs (backend ``greedy``,
termination ``lp-integral``). With ``Problem.relative_gap`` g > 0, a greedy answer within g
of L(lambda) is returned as it is (termination ``within-gap``). Otherwise reduction (iii)
runs, then CBC or CP-SAT solves (1)-(2) over the kept options, with the greedy answer as
CP-SAT's hint and as the fallback, and stops once its incumbent is proven within g of the
optimum (CP-SAT's ``relative_gap_limit``, CBC's ``ratioGap``).

With forecasts the same runs on the relaxation without (3) (``Options.relaxed``: per job
and count the best level): when its LP optimum is integral and satisfies (3) it is optimal
(termination ``lp-integral``). Otherwise the incumbent is the best of the forecast greedy
(:func:`interstice.optimizer.policies.forecast_greedy_choice`), that greedy on the values
less the class prices mu, and the relaxation's answer where it satisfies (3); the bound is
L(lambda, mu) (never above the relaxation's LP bound); reduction (iii) runs with both prices,
and CBC or CP-SAT solve (1)-(3). Cost, honestly: the LP relaxation of (1)-(3) is weak where
(3) binds (it spreads the few long-lived nodes fractionally over many jobs' options: on the
slowest 192-node replay solves L(lambda, mu) was 1-17 % above the best answer found), so (iii)
keeps most options and the solvers must branch, the more the more classes. With K = 6 a solve
took up to 10 s (the replay's limit) when 110-170 of 192 nodes were idle with most of them
forecast to leave within the horizon, and one with 4 jobs 6.8 s; CP-SAT's parameters
(presolve, workers, linearization, a relative gap) changed that by less than 2x. So the
default is K = 1 (one class of short-lived nodes, valued at the shortest life among them). On
the 382 captured solves that took over 0.1 s at K = 6, p50 / p90 / p99 with a 2 s limit:
0.27 / 2.0 / 2.0 s at K = 6, 0.04 / 0.24 / 1.9 s at K = 2, 0.012 / 0.052 / 0.27 s at K = 1.
Over whole replays the coarser valuation decides better where ends are partly known and late
(P = F = 0.5: 0.3-0.7 points more efficiency than K = 6 on each 192-node window) and slightly
worse where they are exact (harvest 0.14-0.17 points lower), or where a reclaim costs more
than a shrink (docs/history.md, "One class of short-lived nodes"), where
``forecast_classes`` 6 may be worth its solve time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from interstice.optimizer.forecast import NodeLives, score_forecast_options
from interstice.optimizer.objective import score_options
from interstice.optimizer.problem import Problem


@dataclass(frozen=True)
class UserShares:
    """The users whose jobs share the fairness term (d): variables N_u, f_u and constraints
    (4)-(5) of the module docstring.

    Attributes:
        jobs: per user u, shape (|J_u|,), its jobs' indices in ``Problem.jobs``.
        unit: shape (U,), w_f ū_u, objective units per unit of log2(1 + N_u), each > 0.
        top: shape (U,), M_u, the most nodes the user's jobs can take together.
    """

    jobs: tuple[np.ndarray, ...]
    unit: np.ndarray
    top: np.ndarray

    def value(self, counts: np.ndarray) -> float:
        """sum_u w_f ū_u log2(1 + N_u) for ``counts``, nodes per job (shape (jobs,))."""
        totals = np.array([counts[jobs].sum() for jobs in self.jobs], dtype=float)
        return float(self.unit @ np.log2(1.0 + totals))

    def secants(self, options: Options, counts: np.ndarray) -> np.ndarray:
        """Per option of ``options``, what its nodes add to its user's share along the
        secant of log2(1 + N) between N*_u and N*_u + 1, N*_u the user's nodes at
        ``counts`` (nodes per job): w_f ū_u (log2(2 + N*_u) - log2(1 + N*_u)) n, 0 for the
        jobs of no such user. Shape (k,). The secant lies on or above log2(1 + N) at every
        integer N (concavity) and on it at N*_u, so these values plus a constant bound
        every answer's objective from above and equal it at ``counts``: reduction (iii)
        on them is exact (module docstring)."""
        slope = np.zeros(len(options.job))
        for u, jobs in enumerate(self.jobs):
            nodes = counts[jobs].sum()
            mine = np.isin(options.job, jobs)
            step = np.log2(2.0 + nodes) - np.log2(1.0 + nodes)
            slope[mine] = self.unit[u] * step * options.count[mine]
        return slope

    def table(self, u: int) -> np.ndarray:
        """w_f ū_u log2(1 + k) for k = 0..M_u, shape (M_u + 1,): f_u at each N_u."""
        return self.unit[u] * np.log2(1.0 + np.arange(int(self.top[u]) + 1))


def user_shares(problem: Problem, count: np.ndarray, start: np.ndarray) -> UserShares | None:
    """The users of ``problem`` whose jobs share (d), with M_u from the options' counts
    (``count``, ``start`` as in :class:`Options`); ``None`` when w_f = 0 or no user has
    two jobs."""
    units = problem.user_units
    keep = [u for u, unit in enumerate(units) if unit > 0]
    if not keep:
        return None
    largest = np.maximum.reduceat(count, start[:-1])
    jobs = tuple(np.array(problem.user_jobs[u]) for u in keep)
    top = np.array([min(len(problem.idle_nodes), int(largest[j].sum())) for j in jobs])
    return UserShares(jobs=jobs, unit=units[keep], top=top)


@dataclass(frozen=True)
class Options:
    """Every job's kept options, flattened, in job order; job j's are ``start[j]:start[j+1]``.

    Each job's first option is its zero option (0 nodes, current depth). Without forecasts
    counts and values strictly increase after it; with forecasts the options run by count,
    then level, and each is worth more than every option of its job with no more nodes and
    no higher level (reduction (ii)). The jobs of users with several (``users``) keep every
    count, by count (and level). Arrays have shape (k,) with k the number of options.

    Attributes:
        job: index of the option's job in ``Problem.jobs``.
        count: node count n.
        depth: SPB depth d.
        value: objective coefficient v_j(n, d) (with forecasts v_j(n, d, L)).
        samples_per_s: expected samples/s.
        goodput: expected goodput over the horizon, samples.
        rescaled: whether the option is a rescale.
        start: shape (jobs + 1,), offsets of each job's options.
        level: with forecasts, the level L of the option's new nodes (1..K+1), 0 where it
            has none (n <= h_j); ``None`` without forecasts.
        demand: with forecasts, shape (k, K): the option's coefficient in constraint (3_t)
            for t = 2..K+1 (column t - 2), nodes; ``None`` without forecasts.
        supply: with forecasts, shape (K,): the right-hand sides F_t of (3_t), nodes.
        users: the fairness term (d) of the users with several jobs (constraints (4)-(5));
            ``None`` where (d) is all in the options' values.
    """

    job: np.ndarray
    count: np.ndarray
    depth: np.ndarray
    value: np.ndarray
    samples_per_s: np.ndarray
    goodput: np.ndarray
    rescaled: np.ndarray
    start: np.ndarray
    level: np.ndarray | None = None
    demand: np.ndarray | None = None
    supply: np.ndarray | None = None
    users: UserShares | None = None

    def total(self, chosen: np.ndarray) -> float:
        """The objective of a choice (shape (jobs,), indices): its options' values plus the
        users' shares f_u."""
        value = float(self.value[chosen].sum())
        return value if self.users is None else value + self.users.value(self.count[chosen])

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
            level=None if self.level is None else self.level[keep],
            demand=None if self.demand is None else self.demand[keep],
            supply=self.supply,
            users=self.users,
        )

    def names(self) -> list[str]:
        """Variable names ``z_{j}_{n}_{d}`` (job index, count, depth), one per option;
        ``z_{j}_{n}_{d}_{L}`` with forecasts (L the level, 0 where no node is new)."""
        columns = [self.job.tolist(), self.count.tolist(), self.depth.tolist()]
        if self.level is not None:
            columns.append(self.level.tolist())
        return ["z_" + "_".join(map(str, key)) for key in zip(*columns, strict=True)]

    def fits(self, chosen: np.ndarray, capacity: int) -> bool:
        """Whether the choice ``chosen`` (shape (jobs,), indices) satisfies (2) and (3)."""
        if int(self.count[chosen].sum()) > capacity:
            return False
        return self.demand is None or bool(np.all(self.demand[chosen].sum(axis=0) <= self.supply))

    def relaxed(self) -> tuple[Options, np.ndarray]:
        """The options of the relaxation without constraints (3): per job and count the
        option of largest value (ties: the lowest level), kept while the values strictly
        increase with the count, as reduction (ii) does without forecasts (and without
        users of several jobs, whose options keep every count).

        Returns:
            The relaxation's options (a chain per job, what
            :func:`interstice.optimizer.policies.greedy_choice` takes) and, shape (k',),
            each one's index into these options.
        """
        if self.level is None and self.users is None:
            return self, np.arange(len(self.count))
        level = np.zeros(len(self.count), dtype=int) if self.level is None else self.level
        order = np.lexsort((level, -self.value, self.count, self.job))
        job, count = self.job[order], self.count[order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = (job[1:] != job[:-1]) | (count[1:] != count[:-1])
        best = order[first]  # per (job, count), by job then count
        keep = np.zeros(len(best), dtype=bool)
        starts = np.searchsorted(self.job[best], np.arange(len(self.start)))
        for lo, hi in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
            value = self.value[best[lo:hi]]
            keep[lo] = True  # the zero option
            keep[lo + 1 : hi] = value[1:] > np.maximum.accumulate(value)[:-1]
        index = np.sort(best[keep])
        mask = np.zeros(len(self.count), dtype=bool)
        mask[index] = True
        return replace(self.subset(mask), level=None, demand=None, supply=None), index


def build_options(problem: Problem) -> Options:
    """Score every job's admissible options and keep the undominated ones.

    Args:
        problem: the instance.

    Returns:
        The options of the formulation (module docstring), after its exact reductions;
        with forecasts (some idle node forecast to leave within the horizon) with their
        levels and constraints (3).
    """
    lives = problem.lives
    if lives is not None and lives.classes:
        return _build_forecast_options(problem, lives)
    weights, horizon_s = problem.weights, problem.horizon_s
    parts: list[tuple[np.ndarray, ...]] = []
    start = [0]
    for j, job in enumerate(problem.jobs):
        # The current depth first, so that ties between depths keep it (argmax takes the first).
        depths = sorted(problem.depths_of(job), key=lambda d: (d != job.spb_depth, d))
        top = max(problem.max_count(job, d) for d in depths)
        # The zero option, then min_nodes..top (none if top < min_nodes).
        counts = np.concatenate([[0], np.arange(job.min_nodes, top + 1)])
        grid = score_options(
            job, counts, depths, problem.table_of(job), weights, horizon_s,
            problem.completion_tilt(job), problem.own_share(job),
        )  # fmt: skip
        pick = grid.value.argmax(axis=0)  # the best depth of each count
        every = np.arange(len(counts))
        value = grid.value[pick, every]
        depth = np.array(depths)[pick]
        depth[0] = job.spb_depth  # at count 0 every depth scores the same; report the current
        # Keep an option only if it is worth more than every option with fewer nodes (every
        # count where the job's user shares (d): more nodes raise f_u).
        keep = np.isfinite(value)
        if problem.own_share(job) or problem.weights.fairness == 0:
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
    start = np.array(start)
    users = user_shares(problem, count, start) if problem.jobs else None
    return Options(job_, count, depth, value, rate, goodput, rescaled, start, users=users)


def _build_forecast_options(problem: Problem, lives: NodeLives) -> Options:
    """:func:`build_options` with forecasts: options (n, d, L), reductions (i)-(ii) over
    (n, L), and the coefficients of constraints (3) (module docstring)."""
    weights, horizon_s = problem.weights, problem.horizon_s
    top_level = lives.classes + 1
    thresholds = np.arange(2, top_level + 1)  # t of (3_t)
    held_by_any = {node for job in problem.jobs for node in job.nodes}
    never_held = lives.classes_of([n for n in problem.idle_nodes if n not in held_by_any])
    supply = (never_held[:, None] >= thresholds[None, :]).sum(axis=0)  # F_t
    columns: list[list[np.ndarray]] = [[] for _ in range(9)]
    start = [0]
    for j, job in enumerate(problem.jobs):
        depths = sorted(problem.depths_of(job), key=lambda d: (d != job.spb_depth, d))
        top = max(problem.max_count(job, d) for d in depths)
        counts = np.concatenate([[0], np.arange(job.min_nodes, top + 1)])
        keep_class = lives.classes_of(lives.keep_order(job.nodes))
        held = len(keep_class)
        grid = score_forecast_options(
            job, counts, depths, problem.table_of(job), weights, horizon_s, lives.life_s,
            keep_class, problem.completion_tilt(job), problem.own_share(job),
        )  # fmt: skip
        pick = grid.value.argmax(axis=0)[None]  # (i): the best depth of each (count, level)
        value = np.take_along_axis(grid.value, pick, axis=0)[0]  # (C, L)
        # Level L needs a node of class L that the job does not hold, and as many of
        # class >= L as it takes new ones.
        other = lives.pool(job.nodes)
        at_least = np.cumsum(other[::-1])[::-1]  # nodes of class >= L, L = 0..K+1
        new = np.maximum(counts - held, 0)
        grows = new > 0
        allowed = (other[1:] > 0)[None, :] & (new[:, None] <= at_least[None, 1:])
        # by count (rows) and level (columns 0..K+1; 0: no new node)
        table = np.full((len(counts), top_level + 1), -np.inf)
        table[~grows, 0] = value[~grows, -1]  # every level is the same there
        table[:, 1:] = np.where(grows[:, None] & allowed, value, -np.inf)
        # (ii): keep an option only if it is worth more than every option with no more nodes
        # (as many, where the job's user shares (d)) and no higher level.
        before = np.full(table.shape, -np.inf)
        if problem.own_share(job) or problem.weights.fairness == 0:
            prefix = np.maximum.accumulate(np.maximum.accumulate(table, axis=0), axis=1)
            before[1:] = prefix[:-1]
        else:
            prefix = np.maximum.accumulate(table, axis=1)
        before[:, 1:] = np.maximum(before[:, 1:], prefix[:, :-1])
        row, level = np.nonzero(np.isfinite(table) & (table > before))  # by count, then level
        layer = np.where(level == 0, top_level - 1, level - 1)
        at = (pick[0, row, layer], row, layer)
        depth = np.array(depths)[at[0]]
        depth[row == 0] = job.spb_depth  # at count 0 every depth scores the same
        # (3_t): a growing option takes its new nodes from classes >= L; one at n <= h
        # releases its held nodes beyond the first n (the shortest-lived).
        released = np.zeros((held + 1, len(thresholds)), dtype=np.int64)
        if held:
            above = keep_class[:, None] >= thresholds[None, :]
            released[:held] = np.cumsum(above[::-1], axis=0)[::-1]
        demand = np.where(
            grows[row, None],
            new[row, None] * (level[:, None] >= thresholds[None, :]),
            -released[np.minimum(counts[row], held)],
        )
        for column, part in zip(
            columns,
            (
                np.full(len(row), j),
                counts[row],
                depth,
                table[row, level],
                grid.samples_per_s[at],
                grid.goodput[at],
                grid.rescaled[at],
                level,
                demand.reshape(len(row), len(thresholds)),
            ),
            strict=True,
        ):
            column.append(part)
        start.append(start[-1] + len(row))
    if not problem.jobs:
        columns = [[np.zeros(0, int)]] * 3 + [[np.zeros(0)]] * 3 + [[np.zeros(0, bool)]]
        columns += [[np.zeros(0, int)], [np.zeros((0, len(thresholds)), int)]]
    job_, count, depth, value, rate, goodput, rescaled, level, demand = (
        np.concatenate(c) for c in columns
    )
    start = np.array(start)
    users = user_shares(problem, count, start) if problem.jobs else None
    return Options(
        job_, count, depth, value, rate, goodput, rescaled, start, level,
        demand.astype(np.int64), supply.astype(np.int64), users,
    )  # fmt: skip


BOUND_TOLERANCE = 1e-6
"""Relative slack of the bound reduction: an option is dropped only if its bound is below
the incumbent by more than this share of the incumbent's value (covers the solvers' own
tolerances and CP-SAT's integer scaling, at most 200 jobs x 1e-9 of the largest value)."""


def _lagrangian(
    options: Options, capacity: int, price: float, class_price: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Reduction (iii)'s terms at node price lambda (and class prices mu, with forecasts):
    v_j(n, d) - lambda n (- mu . a_o) per option, u_j per job, and L(lambda, mu)."""
    reduced = options.value - price * options.count
    if class_price is None:
        best = np.maximum.reduceat(reduced, options.start[:-1])
        return reduced, best, float(price * capacity + best.sum())
    reduced = reduced - options.demand @ class_price
    best = np.maximum.reduceat(reduced, options.start[:-1])
    constant = price * capacity + float(class_price @ options.supply)
    return reduced, best, float(constant + best.sum())


def lp_bound(
    options: Options, capacity: int, price: float, class_price: np.ndarray | None = None
) -> float:
    """L(lambda) of reduction (iii): an upper bound on every solution of (1)-(2), the LP
    relaxation's optimum when ``price`` is the LP's node price; with forecasts
    L(lambda, mu), a bound on every solution of (1)-(3).

    Args:
        options: the scored options.
        capacity: number of idle nodes N.
        price: lambda >= 0, value per node.
        class_price: mu >= 0, shape (K,), value per node of constraints (3_2..3_{K+1}).
    """
    return _lagrangian(options, capacity, price, class_price)[2]


LAGRANGE_STEPS = 30
"""Most subgradient steps of :func:`lagrangian_prices` (with forecasts)."""


def lagrangian_prices(
    options: Options, capacity: int, price: float, target: float
) -> tuple[float, np.ndarray, float]:
    """Prices of (2) and (3) for reduction (iii) with forecasts: projected subgradient
    descent on L(lambda, mu) (Held, Wolfe & Crowder, "Validation of subgradient
    optimization", Math. Programming 6, 1974) from (``price``, 0), with Polyak's step
    (L - target) / |g|^2 towards an incumbent's value ``target``; at most
    ``LAGRANGE_STEPS`` steps, fewer once L is within 1e-9 of ``target``.

    Args:
        options: the scored options, with forecasts (``options.demand`` set).
        capacity: number of idle nodes N.
        price: lambda to start from (the relaxation's LP node price).
        target: the value of a solution of (1)-(3).

    Returns:
        ``(lambda, mu, L(lambda, mu))`` at the lowest L seen: every solution of (1)-(3) is
        worth at most L.
    """
    rows = np.concatenate([options.count[:, None], options.demand], axis=1).astype(float)
    right = np.concatenate([[capacity], options.supply]).astype(float)
    prices = np.zeros(rows.shape[1])
    prices[0] = price
    best = (np.inf, prices)
    for _ in range(LAGRANGE_STEPS):
        reduced = options.value - rows @ prices
        top = np.maximum.reduceat(reduced, options.start[:-1])
        bound = float(prices @ right + top.sum())
        if bound < best[0]:
            best = (bound, prices)
        if bound - target <= 1e-9 * max(abs(target), 1.0):
            break
        hit = np.flatnonzero(reduced >= top[options.job])
        argmax = hit[np.unique(options.job[hit], return_index=True)[1]]  # first per job
        slope = right - rows[argmax].sum(axis=0)  # a subgradient of L at prices
        norm = float(slope @ slope)
        if norm == 0:
            break
        prices = np.maximum(0.0, prices - (bound - target) / norm * slope)
    bound, prices = best
    return float(prices[0]), prices[1:], bound


def bound_reduction(
    options: Options,
    capacity: int,
    price: float,
    incumbent: np.ndarray,
    class_price: np.ndarray | None = None,
) -> np.ndarray:
    """Reduction (iii) of the module docstring: the options a better answer may use.

    Args:
        options: the scored options.
        capacity: number of idle nodes N.
        price: lambda >= 0, value per node (any gives a valid bound; the LP's node price,
            :func:`interstice.optimizer.policies.greedy_choice`, the tightest).
        incumbent: shape (jobs,), a feasible choice (indices into ``options``).
        class_price: with forecasts, mu >= 0 of constraints (3), shape (K,)
            (:func:`lagrangian_prices`); ``None``: (3) unpriced (still a valid bound).

    Returns:
        Bool mask of shape (k,): the options kept; the incumbent's are always among them.
    """
    reduced, best, bound = _lagrangian(options, capacity, price, class_price)
    option_bound = bound - best[options.job] + reduced  # L(lambda) with option k forced
    target = options.value[incumbent].sum()
    keep = option_bound >= target - BOUND_TOLERANCE * max(abs(target), 1.0)
    keep[incumbent] = True
    return keep
