"""An admin's replay choices turned into what the simulator takes: the policy of each name,
the objective's normalisation, and the seeded sample of nodes.

``interstice replay`` and ``bench/replay_windows.py`` build their runs from these, so that a
window of the bench replays exactly as the same flags do on the command line.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from interstice.optimizer import Allocation, Problem, equal_share, greedy, solve

POLICIES = ("milp", "greedy", "equal-share", "rigid")
"""Every replay policy; ``rigid`` is its own simulator (:mod:`interstice.replay.rigid`)."""
OBJECTIVES = ("throughput", "speedup", "node-seconds")
"""The objective's normalisations an admin can name."""


def allocators(backend: str) -> dict[str, Callable[[Problem], Allocation]]:
    """The elastic policies by name: the MILP on ``backend`` (cbc or cpsat), the greedy and
    equal share."""
    return {
        "milp": lambda problem: solve(problem, backend=backend),
        "greedy": greedy,
        "equal-share": equal_share,
    }


def normalisation(objective: str | None) -> dict[str, bool]:
    """The :class:`~interstice.optimizer.Weights` fields that select ``objective`` (one of
    :data:`OBJECTIVES`); empty for None (the Weights default)."""
    if objective is None:
        return {}
    return {"speedup": objective == "speedup", "node_seconds": objective == "node-seconds"}


def sample_nodes(n_nodes: int, count: int, seed: int) -> np.ndarray:
    """Indices of ``count`` of the trace's ``n_nodes`` nodes, drawn without replacement with
    ``seed`` and sorted (``--nodes COUNT --seed SEED``)."""
    return np.sort(np.random.default_rng(seed).choice(n_nodes, count, replace=False))
