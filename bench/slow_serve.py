"""``interstice serve`` whose every solve takes ``FACTOR`` times as long: for benchmarks only.

``python bench/slow_serve.py FACTOR serve [serve's options]`` runs ``interstice serve`` with
its solver wrapped in :class:`Slowed`: after each solve it computes on, where the solve ran
(the solver process, or the service's worker thread with ``INTERSTICE_SOLVER_PROCESS=false``),
for ``FACTOR - 1`` times the solve's own wall time, holding the CPU and the interpreter as a
solve that long would, and reports the whole time as the solve's ``solve_time_s``. It stands
for a slower host or a busier problem (``bench/agents_load.py --slow-solver``); the service
itself has no such setting.
"""

from __future__ import annotations

import sys
import time

from interstice.api import main as api_main
from interstice.api.control.loop import optimizer_solver
from interstice.optimizer import Allocation, Problem


class Slowed:
    """The production solver, made ``factor`` times as slow by computing on after it.

    Args:
        factor: the solve's wall time is multiplied by it, >= 1.
    """

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, problem: Problem, backend: str) -> Allocation:
        began = time.perf_counter()
        allocation = optimizer_solver(problem, backend)
        until = began + self.factor * (time.perf_counter() - began)
        while time.perf_counter() < until:
            pass
        return allocation.model_copy(update={"solve_time_s": time.perf_counter() - began})


def main() -> None:
    factor = float(sys.argv[1])
    if not factor >= 1:
        sys.exit("FACTOR must be a number >= 1")
    api_main.optimizer_solver = Slowed(factor)  # type: ignore[assignment]
    sys.argv = ["interstice", *sys.argv[2:]]
    from interstice.cli import app

    app()


if __name__ == "__main__":
    main()
