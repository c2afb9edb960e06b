"""What a solver backend hands back, before it becomes an Allocation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from interstice.optimizer.problem import SolveStatus


@dataclass(frozen=True)
class BackendAnswer:
    """A backend's raw result.

    Attributes:
        values: the solver's value of each binary z, shape (options,); ``None`` when it has
            no incumbent.
        status: ``optimal`` or ``feasible`` when ``values`` is set, else ``None``.
        termination: the solver's own termination reason, verbatim.
    """

    values: np.ndarray | None
    status: SolveStatus | None
    termination: str
