"""``solve``: the allocation MILP on a chosen backend, with the greedy policy as fallback."""

from __future__ import annotations

import importlib
import time
from typing import Literal

import numpy as np
from interstice.optimizer.formulation import Options, bound_reduction, build_options, lp_bound
from interstice.optimizer.placement import make_allocation
from interstice.optimizer.policies import greedy_choice
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


def solve(problem: Problem, backend: Backend = "cbc") -> Allocation:
    """Allocate the idle nodes by solving the formulation (:mod:`.formulation`).

    No solver runs when the answer is known: with no jobs or no idle nodes (status
    ``optimal``, backend ``none``, termination ``trivial``), or when the greedy marginal-gain
    allocation solves the LP relaxation integrally (there are nodes for every job's hull
    steps, or they run out exactly at a step: status ``optimal``, backend ``greedy``,
    termination ``lp-integral``; see
    :func:`interstice.optimizer.policies.greedy_choice`). Otherwise the options that cannot
    beat the greedy answer are dropped (exact reduction (iii) of the formulation) and the
    backend solves the rest, from the greedy answer. With ``problem.relative_gap`` g > 0
    "optimal" means proven within g of the optimum: the greedy answer itself when the LP
    bound proves it (backend ``greedy``, termination ``within-gap``), else the backend
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
    greedy_chosen, price = greedy_choice(options, capacity)
    greedy_value = options.value[greedy_chosen].sum()
    # no bound when the LP relaxation's optimum is integral: the greedy answer is optimal
    bound = None if price is None else lp_bound(options, capacity, price)
    if bound is None or bound - greedy_value <= problem.relative_gap * abs(bound):
        return make_allocation(
            problem,
            options,
            greedy_chosen,
            status="optimal",
            backend="greedy",
            termination=LP_INTEGRAL if price is None else WITHIN_GAP,
            started_s=started_s,
        )
    module = importlib.import_module(f"interstice.optimizer.{backend}")
    remaining_s = max(problem.time_limit_s - (time.perf_counter() - started_s), 1e-3)
    keep = bound_reduction(options, capacity, price, greedy_chosen)  # reduction (iii)
    kept = np.flatnonzero(keep)
    reduced = options.subset(keep)
    hint = np.searchsorted(kept, greedy_chosen)
    answer = module.solve(reduced, capacity, remaining_s, hint, problem.relative_gap)
    chosen = None if answer.values is None else kept[chosen_options(reduced, answer.values)]
    if chosen is None or options.value[chosen].sum() < greedy_value:
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
