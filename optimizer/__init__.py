"""The allocation engine: a rolling MILP over node counts per job and SPB depth.

Pure: no I/O, no torch, no web. See :mod:`interstice.optimizer.formulation` for the model;
:func:`solve` runs it on CBC or CP-SAT, :func:`greedy` and :func:`equal_share` are the
solver-free policies, :func:`expected_remaining_idle_s` estimates an automatic horizon.

Imports: numpy, ortools, pulp and pydantic only, and nothing else of interstice
(tests/test_import_rules.py).
"""

from interstice.optimizer.horizon import expected_remaining_idle_s, pool_remaining_idle_s
from interstice.optimizer.policies import equal_share, greedy
from interstice.optimizer.problem import (
    Allocation,
    Job,
    JobAllocation,
    Problem,
    ScalabilityPoint,
    ScalabilityTable,
    SolveStatus,
    Weights,
)
from interstice.optimizer.solve import BACKENDS, Backend, solve

__all__ = [
    "BACKENDS",
    "Allocation",
    "Backend",
    "Job",
    "JobAllocation",
    "Problem",
    "ScalabilityPoint",
    "ScalabilityTable",
    "SolveStatus",
    "Weights",
    "equal_share",
    "expected_remaining_idle_s",
    "pool_remaining_idle_s",
    "greedy",
    "solve",
]
