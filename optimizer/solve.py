"""``solve``: the allocation MILP on a chosen backend, with the greedy policy as fallback."""

from __future__ import annotations

import importlib
import time
from dataclasses import replace
from typing import Literal

import numpy as np
from interstice.optimizer.formulation import (
    Options,
    bound_reduction,
    build_options,
    lagrangian_prices,
    lp_bound,
)
from interstice.optimizer.placement import make_allocation
from interstice.optimizer.policies import forecast_greedy_choice, greedy_choice
from interstice.optimizer.problem import Allocation, Problem

Backend = Literal["cbc", "cpsat"]
BACKENDS: tuple[Backend, ...] = ("cbc", "cpsat")

LP_INTEGRAL = "lp-integral"
"""Termination of an answer proven optimal by the greedy LP relaxation, no solver called."""

WITHIN_GAP = "within-gap"
"""Termination of a greedy answer proven within ``Problem.relative_gap`` of the optimum by the
LP bound, no solver called."""


def chosen_options(options: Options, values: np.ndarray) -> np.ndarray:
    """Round a solver's binaries: the index of each job's chosen option, shape (jobs,).

    The one place binaries are rounded: z > 0.5 is chosen. Constraint (1) makes exactly
    one per job.

    Raises:
        ValueError: a job has not exactly one chosen option (a solver bug).
    """
    on = values > 0.5
    per_job = np.add.reduceat(on.astype(int), options.start[:-1]) if len(on) else np.zeros(0)
    if np.any(per_job != 1):
        raise ValueError("solver answer violates constraint (1): not one option per job")
    return np.flatnonzero(on)


def _forecast_start(
    options: Options, capacity: int
) -> tuple[np.ndarray, float, np.ndarray | None, float | None]:
    """With forecasts: the incumbent, the prices of reduction (iii) and the bound.

    The relaxation without constraints (3) (:meth:`Options.relaxed`) is solved as the
    problem without forecasts is: when its LP optimum is integral and that answer satisfies
    (3), it is optimal here too (bound ``None``). Otherwise the incumbent is the best of the
    forecast greedy (:func:`interstice.optimizer.policies.forecast_greedy_choice`), the
    relaxation's answer where it satisfies (3), and the forecast greedy on the values less
    the class prices mu (what the Lagrangian says a long-lived node is worth); the bound is
    L(lambda, mu) of :func:`~interstice.optimizer.formulation.lagrangian_prices`, started
    from the relaxation's LP node price (0 where its LP is integral), and never above the
    relaxation's own bound.

    Returns:
        ``(chosen, lambda, mu, bound)``: indices into ``options`` (shape (jobs,)), the prices
        for reduction (iii), and the bound or ``None``.
    """
    relaxed, index = options.relaxed()
    relaxed_chosen, price = greedy_choice(relaxed, capacity)
    candidate = index[relaxed_chosen]
    fits = options.fits(candidate, capacity)
    if price is None and fits:
        return candidate, 0.0, None, None
    relaxed_bound = (
        float(options.value[candidate].sum())
        if price is None
        else lp_bound(relaxed, capacity, price)
    )
    chosen = forecast_greedy_choice(options, capacity)
    if fits and options.value[candidate].sum() > options.value[chosen].sum():
        chosen = candidate
    price, class_price, bound = lagrangian_prices(
        options, capacity, price or 0.0, float(options.value[chosen].sum())
    )
    priced = replace(options, value=options.value - options.demand @ class_price)
    guided = forecast_greedy_choice(priced, capacity)
    if options.value[guided].sum() > options.value[chosen].sum():
        chosen = guided
    return chosen, price, class_price, min(bound, relaxed_bound)


def _secant_greedy(
    options: Options, capacity: int, incumbent: np.ndarray
) -> tuple[Options, np.ndarray, float | None]:
    """The values plus each user's secant at ``incumbent``'s nodes
    (:meth:`~interstice.optimizer.formulation.UserShares.secants`: a separable upper bound
    of the objective, equal to it at ``incumbent``), and the greedy on them.

    Returns:
        ``(linear, chosen, price)``: those options (no users), the greedy's choice
        (indices into ``options``, shape (jobs,)) and its LP node price (None: integral).
    """
    counts = options.count[incumbent]
    linear = replace(options, value=options.value + options.users.secants(options, counts))
    chain, index = linear.relaxed()  # each job's options of increasing value
    chosen, price = greedy_choice(replace(chain, users=None), capacity)
    return replace(linear, users=None), index[chosen], price


def _user_reduction(
    options: Options, capacity: int, incumbent: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Reduction (iii) where users share (d) (formulation, "With users of several jobs"),
    on the values plus the users' secants at the incumbent (:func:`_secant_greedy`), whose
    greedy answer replaces the incumbent when it is worth more.

    Returns:
        ``(incumbent, keep)``: the incumbent (shape (jobs,)) and the options a better
        answer may use (bool, shape (k,)).
    """
    linear, guided, price = _secant_greedy(options, capacity, incumbent)
    if options.total(guided) > options.total(incumbent):
        incumbent = guided
        linear, _, price = _secant_greedy(options, capacity, incumbent)
    keep = bound_reduction(linear, capacity, price or 0.0, incumbent)
    return incumbent, keep


def solve(problem: Problem, backend: Backend = "cbc") -> Allocation:
    """Allocate the idle nodes by solving the formulation (:mod:`.formulation`).

    No solver runs when the answer is known: with no jobs or no idle nodes (status
    ``optimal``, backend ``none``, termination ``trivial``), or when the greedy marginal-gain
    allocation solves the LP relaxation integrally (there are nodes for every job's hull
    steps, or they run out exactly at a step: status ``optimal``, backend ``greedy``,
    termination ``lp-integral``; see
    :func:`interstice.optimizer.policies.greedy_choice`). Otherwise the options that cannot
    beat the greedy answer are dropped (exact reduction (iii) of the formulation) and the
    backend solves the rest, from the greedy answer. Where users with several jobs share the
    fairness term (constraints (4)-(5)) the objective is not a sum of per-job terms: no
    shortcut, and reduction (iii) runs on the values plus the users' secants at the
    incumbent (without forecasts; with them every option is kept). With
    ``problem.relative_gap`` g > 0 "optimal" means proven within g of the optimum: the
    greedy answer itself when the LP bound proves it (backend ``greedy``, termination
    ``within-gap``), else the backend
    stops at that gap. When the time limit ends without a proof, the solver's best incumbent
    is returned (``feasible``); with no incumbent, or one worth less than the greedy answer,
    the greedy allocation (``fallback``, backend ``greedy``). So the answer is never worth
    less than the greedy one, and never empty.

    Args:
        problem: the instance; ``problem.time_limit_s`` bounds the solver.
        backend: ``cbc`` (PuLP's CBC) or ``cpsat`` (OR-Tools CP-SAT).

    Returns:
        One JobAllocation per job, in the problem's order; the solver's termination
        reason in ``termination``; ``solve_time_s`` includes model building.

    Raises:
        ValueError: unknown backend.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    started_s = time.perf_counter()
    options = build_options(problem)
    capacity = len(problem.idle_nodes)
    if len(options.count) == len(problem.jobs):  # only zero options: nothing to decide
        return make_allocation(
            problem,
            options,
            options.start[:-1],
            status="optimal",
            backend="none",
            termination="trivial",
            started_s=started_s,
        )
    class_price = None
    if options.level is None:
        relaxed, index = options.relaxed()  # itself, unless users share (d)
        greedy_chosen, price = greedy_choice(relaxed, capacity)
        greedy_chosen = index[greedy_chosen]
        # no bound when the LP relaxation's optimum is integral: the greedy answer is optimal
        bound = None if price is None else lp_bound(options, capacity, price)
    else:
        greedy_chosen, price, class_price, bound = _forecast_start(options, capacity)
    greedy_value = options.total(greedy_chosen)
    coupled = options.users is not None  # (4)-(5): no per-job bound, so no shortcut
    if not coupled and (bound is None or bound - greedy_value <= problem.relative_gap * abs(bound)):
        return make_allocation(
            problem,
            options,
            greedy_chosen,
            status="optimal",
            backend="greedy",
            termination=LP_INTEGRAL if bound is None else WITHIN_GAP,
            started_s=started_s,
        )
    module = importlib.import_module(f"interstice.optimizer.{backend}")
    if coupled and options.level is None:
        greedy_chosen, keep = _user_reduction(options, capacity, greedy_chosen)
        greedy_value = options.total(greedy_chosen)
    elif coupled:  # with forecasts, (3) unpriced: every option
        keep = np.ones(len(options.count), dtype=bool)
    else:
        keep = bound_reduction(options, capacity, price, greedy_chosen, class_price)  # (iii)
    remaining_s = max(problem.time_limit_s - (time.perf_counter() - started_s), 1e-3)
    kept = np.flatnonzero(keep)
    reduced = options.subset(keep)
    hint = np.searchsorted(kept, greedy_chosen)
    answer = module.solve(reduced, capacity, remaining_s, hint, problem.relative_gap)
    chosen = None if answer.values is None else kept[chosen_options(reduced, answer.values)]
    if chosen is None or options.total(chosen) < greedy_value:
        return make_allocation(
            problem,
            options,
            greedy_chosen,
            status="fallback",
            backend="greedy",
            termination=answer.termination,
            started_s=started_s,
        )
    return make_allocation(
        problem,
        options,
        chosen,
        status=answer.status,
        backend=backend,
        termination=answer.termination,
        started_s=started_s,
    )
