"""The CBC backend (COIN-OR branch and cut, through PuLP) of the allocation MILP.

Builds :mod:`interstice.optimizer.formulation` with ``LpAffineExpression`` from lists (no
repeated ``+=`` on sums) and solves it with PuLP's bundled CBC in a subprocess, log off.
"""

from __future__ import annotations

import warnings

import numpy as np
import pulp
from interstice.optimizer.answer import BackendAnswer
from interstice.optimizer.formulation import Options

CBC_OPTIONS = {
    "presolve": False,
    "cuts": False,
    "options": ["strong 0", "preprocess off", "heuristics off"],
}
"""CBC with presolve, cuts, strong branching, preprocessing and heuristics off: the model's
LP relaxation is nearly integral (a multiple-choice knapsack's has at most two fractional
binaries), so they only cost time. Median CBC CPU time against the defaults: 20 -> 6.1 ms
(10 jobs x 128 nodes, 8 instances) and 0.78 -> 0.12 s (200 jobs x 10,000 nodes x 4 depths,
capacity binding, 3 instances), same optima (bench/solve.py instances)."""


def build(options: Options, capacity: int) -> tuple[pulp.LpProblem, list[pulp.LpVariable]]:
    """The formulation as a PuLP model.

    Args:
        options: the scored options.
        capacity: number of idle nodes N.

    Returns:
        The model and its binaries z, one per option in ``options`` order.
    """
    model = pulp.LpProblem("interstice_allocation", pulp.LpMaximize)
    z = [model.add_variable(name, cat=pulp.LpBinary) for name in options.names()]
    # In units of the largest |coefficient|: CBC's tolerances are absolute, so values all
    # near 0 (a tiny throughput weight) would otherwise all look alike to it.
    users = options.users
    tables = [users.table(u) for u in range(len(users.jobs))] if users is not None else []
    top = max([float(np.abs(options.value).max()) if len(options.value) else 0.0]
              + [float(table[-1]) for table in tables]) or 1.0  # fmt: skip
    value = (options.value / top).tolist()
    model.setObjective(pulp.LpAffineExpression(zip(z, value, strict=True)))
    starts = options.start.tolist()
    for j, (lo, hi) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        one = pulp.LpAffineExpression([(v, 1) for v in z[lo:hi]])
        model.addConstraint(pulp.LpConstraint(one, pulp.LpConstraintEQ, f"one_{j}", 1))  # (1)
    used = pulp.LpAffineExpression(zip(z, options.count.tolist(), strict=True))
    model.addConstraint(pulp.LpConstraint(used, pulp.LpConstraintLE, "capacity", capacity))  # (2)
    if options.demand is not None:  # (3_t), t = 2..K+1: the classes of forecast life
        for t, (column, free) in enumerate(zip(options.demand.T, options.supply, strict=True), 2):
            nonzero = np.flatnonzero(column).tolist()
            if nonzero:
                needs = pulp.LpAffineExpression([(z[i], int(column[i])) for i in nonzero])
                model.addConstraint(
                    pulp.LpConstraint(needs, pulp.LpConstraintLE, f"class_{t}", int(free))
                )
    if options.users is not None:
        model.setObjective(model.objective + _user_shares(model, options, z, tables, top))
    return model, z


def _user_shares(
    model: pulp.LpProblem,
    options: Options,
    z: list[pulp.LpVariable],
    tables: list[np.ndarray],
    top: float,
) -> pulp.LpAffineExpression:
    """Variables N_u, f_u and constraints (4)-(5), f_u in units of ``top`` as the
    objective's other coefficients (``tables``: each user's f_u at N_u = 0..M_u); returns
    sum_u f_u, the objective's part."""
    shares = []
    for u, jobs in enumerate(options.users.jobs):
        mine = np.flatnonzero(np.isin(options.job, jobs)).tolist()
        nodes = model.add_variable(f"N_{u}", lowBound=0)
        table = tables[u] / top
        share = model.add_variable(f"f_{u}", lowBound=0, upBound=float(table[-1]))
        used = pulp.LpAffineExpression([(z[i], int(options.count[i])) for i in mine])
        used.addterm(nodes, -1)
        model.addConstraint(pulp.LpConstraint(used, pulp.LpConstraintEQ, f"nodes_{u}", 0))  # (4)
        for k, (low, high) in enumerate(zip(table[:-1].tolist(), table[1:].tolist(), strict=True)):
            # (5): f_u - (high - low) N_u <= low - k (high - low)
            secant = pulp.LpAffineExpression([(share, 1), (nodes, low - high)])
            rhs = low - k * (high - low)
            cut = pulp.LpConstraint(secant, pulp.LpConstraintLE, f"share_{u}_{k}", rhs)
            model.addConstraint(cut)
        shares.append((share, 1))
    return pulp.LpAffineExpression(shares)


def run(
    model: pulp.LpProblem, z: list[pulp.LpVariable], time_limit_s: float, relative_gap: float
) -> BackendAnswer:
    """Solve ``model`` within ``time_limit_s`` seconds, stopping once the incumbent is proven
    within ``relative_gap`` of the optimum (CBC's ``ratioGap``, PuLP's ``gapRel``).

    Returns:
        The binaries' values; status ``optimal`` if CBC proved it (within ``relative_gap``),
        ``feasible`` for an incumbent at the time limit, ``None`` with no incumbent (or when
        CBC failed to run, with termination ``error: ...``).
    """
    # No ``threads``: CBC 2.10's threaded mode, even at 1 thread, sometimes hung until the
    # time limit on a tiny model (10 s in 1 of 60 runs of one 10-binary model); serial CBC
    # never did.
    # PuLP 3.3 deprecates its bundled CBC (PULP_CBC_CMD) for 4.0; pin pulp < 4 until moving
    # to ``pulp[cbc]`` + COIN_CMD.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        solver = pulp.PULP_CBC_CMD(
            msg=False, timeLimit=time_limit_s, gapRel=relative_gap or None, **CBC_OPTIONS
        )
    try:
        model.solve(solver)
    except pulp.PulpSolverError as exc:  # CBC missing or crashed: no incumbent, say why
        return BackendAnswer(values=None, status=None, termination=f"error: {exc}")
    termination = pulp.LpStatus[model.status]
    if model.sol_status == pulp.LpSolutionOptimal:
        status = "optimal"
    elif model.sol_status == pulp.LpSolutionIntegerFeasible:
        status = "feasible"
    else:
        return BackendAnswer(values=None, status=None, termination=termination)
    values = np.array([v.varValue or 0.0 for v in z])
    return BackendAnswer(values=values, status=status, termination=termination)


def solve(
    options: Options,
    capacity: int,
    time_limit_s: float,
    hint: np.ndarray,
    relative_gap: float = 0.0,
) -> BackendAnswer:
    """Build and solve the formulation with CBC.

    Args:
        options: the scored options.
        capacity: number of idle nodes N.
        time_limit_s: wall-clock limit of CBC, seconds.
        hint: the greedy choice; unused: a CBC warm start (PuLP writes it to an .mst file)
            made CBC slower, not faster, on the benchmark instances.
        relative_gap: stop once proven within this fraction of the optimum (0: optimal).
    """
    model, z = build(options, capacity)
    return run(model, z, time_limit_s, relative_gap)
