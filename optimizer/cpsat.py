"""The CP-SAT backend (OR-Tools) of the allocation MILP.

Builds :mod:`interstice.optimizer.formulation` with integer coefficients: CP-SAT needs
integers, so every v_j(n, d) is multiplied by ``SCALE_TOP / max |v|`` and rounded; the
answer is optimal for the scaled objective, within jobs * max |v| / SCALE_TOP of the true
optimum (its objective is recomputed from the unscaled values).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from interstice.optimizer.answer import BackendAnswer
from interstice.optimizer.formulation import Options
from ortools.sat.python import cp_model

SCALE_TOP = 1e9
"""The largest |coefficient| after scaling."""

SEARCH_PARAMETERS = {
    "num_workers": 1,
    "cp_model_presolve": False,
    "symmetry_level": 0,
    "cp_model_probing_level": 0,
    "use_sat_inprocessing": False,
    "linearization_level": 2,
    "log_search_progress": False,
}
"""One sequential worker (two used more CPU and more wall time on 2 cores); presolve,
symmetry detection, probing and SAT inprocessing off: on this already-reduced multiple-choice
knapsack they only cost time; linearization level 2 (the constraints' full LP relaxation)
bounds the objective early: it cut the slowest of 15 capacity-binding 200-job instances from
1.65 s to 0.23 s CPU. Median CP-SAT CPU time against the defaults with one worker:
18.2 -> 3.1 ms (10 jobs x 128 nodes, 20 instances) and 2.7 s -> 0.17 s (200 jobs x 10,000
nodes x 4 depths, capacity binding, 8 instances), same optima (bench/solve.py instances)."""


def build(options: Options, capacity: int) -> cp_model.CpModel:
    """The formulation as a CP-SAT model with integer-scaled objective coefficients.

    Written straight into the model's proto with list extends: the Python expression API
    (``maximize(weighted_sum(...))``) took ~6x longer on 200 jobs x 10,000 nodes.

    Args:
        options: the scored options.
        capacity: number of idle nodes N.

    Returns:
        The model; its variable i is the binary z of option i (named ``z_{j}_{n}_{d}``),
        followed by N_u and f_u of constraints (4)-(5) where users share (d).
    """
    model = cp_model.CpModel()
    proto = model.proto
    for name in options.names():
        z = proto.variables.add()
        z.name = name
        z.domain.extend((0, 1))
    starts = options.start.tolist()
    for lo, hi in zip(starts[:-1], starts[1:], strict=True):
        proto.constraints.add().exactly_one.literals.extend(range(lo, hi))  # (1)
    used = proto.constraints.add().linear  # (2)
    used.vars.extend(range(len(options.count)))
    used.coeffs.extend(options.count.tolist())
    used.domain.extend((0, capacity))
    if options.demand is not None:  # (3_t), t = 2..K+1: the classes of forecast life
        for column, free in zip(options.demand.T, options.supply, strict=True):
            nonzero = np.flatnonzero(column)
            if len(nonzero):
                needs = proto.constraints.add().linear
                needs.vars.extend(nonzero.tolist())
                needs.coeffs.extend(column[nonzero].tolist())
                needs.domain.extend((int(np.minimum(column, 0).sum()), int(free)))
    users = options.users
    tables = [users.table(u) for u in range(len(users.jobs))] if users is not None else []
    top = max([float(np.abs(options.value).max()) if len(options.value) else 0.0]
              + [float(table[-1]) for table in tables])  # fmt: skip
    top = top if top > 0 else 1.0

    def scale(values: np.ndarray) -> np.ndarray:
        # divided by top first: SCALE_TOP / top overflows where every |v| is below ~1e-300
        return np.rint(values / top * SCALE_TOP).astype(np.int64)

    # CP-SAT minimizes: maximize sum(c z) as minimize sum(-c z), reported times -1.
    proto.objective.vars.extend(range(len(options.value)))
    proto.objective.coeffs.extend((-scale(options.value)).tolist())
    proto.objective.scaling_factor = -1.0
    for u, table in enumerate(tables):
        mine = np.flatnonzero(np.isin(options.job, users.jobs[u]))
        scaled = scale(table).tolist()
        nodes = model.new_int_var(0, len(scaled) - 1, f"N_{u}")
        share = model.new_int_var(0, scaled[-1], f"f_{u}")
        used = proto.constraints.add().linear  # (4)
        used.vars.extend([*mine.tolist(), nodes.index])
        used.coeffs.extend([*options.count[mine].tolist(), -1])
        used.domain.extend((0, 0))
        model.add_element(nodes, scaled, share)  # (5), exact at every integer N_u
        proto.objective.vars.append(share.index)
        proto.objective.coeffs.append(-1)
    return model


def run(model: cp_model.CpModel, time_limit_s: float, relative_gap: float) -> BackendAnswer:
    """Solve ``model`` within ``time_limit_s`` seconds, log off, stopping once the incumbent
    is proven within ``relative_gap`` of the optimum (CP-SAT's ``relative_gap_limit``).

    Returns:
        The binaries' values; status ``optimal`` if CP-SAT proved it (for the scaled
        objective, within ``relative_gap``), ``feasible`` for an incumbent at the time limit,
        ``None`` with none.
    """
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.relative_gap_limit = relative_gap
    for name, value in SEARCH_PARAMETERS.items():
        setattr(solver.parameters, name, value)
    code = solver.solve(model)
    termination = solver.status_name(code)
    if code == cp_model.OPTIMAL:
        status = "optimal"
    elif code == cp_model.FEASIBLE:
        status = "feasible"
    else:
        return BackendAnswer(values=None, status=None, termination=termination)
    values = np.array(solver.response_proto.solution, dtype=float)
    return BackendAnswer(values=values, status=status, termination=termination)


def solve(
    options: Options,
    capacity: int,
    time_limit_s: float,
    hint: np.ndarray,
    relative_gap: float = 0.0,
) -> BackendAnswer:
    """Build and solve the formulation with CP-SAT, starting from ``hint``.

    Args:
        options: the scored options.
        capacity: number of idle nodes N.
        time_limit_s: wall-clock limit of the search, seconds.
        hint: shape (jobs,), a feasible choice (the greedy one) given as the solution hint:
            it cut CP-SAT's CPU time by about a third on 200 jobs x 10,000 nodes.
        relative_gap: stop once proven within this fraction of the optimum (0: optimal).
    """
    model = build(options, capacity)
    model.proto.solution_hint.vars.extend(range(len(options.count)))
    on = np.zeros(len(options.count), dtype=np.int64)
    on[hint] = 1
    model.proto.solution_hint.values.extend(on.tolist())
    answer = run(model, time_limit_s, relative_gap)
    if answer.values is None:
        return answer
    return replace(answer, values=answer.values[: len(options.count)])  # the z only
