"""The allocation engine: a rolling MILP over node counts per job and SPB depth.

Pure: no I/O, no torch, no web. See :mod:`interstice.optimizer.formulation` for the model.
"""

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

__all__ = [
    "Allocation",
    "Job",
    "JobAllocation",
    "Problem",
    "ScalabilityPoint",
    "ScalabilityTable",
    "SolveStatus",
    "Weights",
]
