"""Reduction (iii), the bound reduction: it drops options, never the optimum."""

import numpy as np
import pytest
from interstice.optimizer import ScalabilityTable
from interstice.optimizer import cbc as cbc_backend
from interstice.optimizer.formulation import bound_reduction, build_options
from interstice.optimizer.policies import greedy_choice
from interstice.optimizer.solve import chosen_options
from interstice.optimizer.synthetic import random_problem, with_synthetic_depths

from interstice import data


@pytest.fixture(scope="module")
def deep_table(bftrainer_dir) -> ScalabilityTable:
    table = ScalabilityTable.from_csv((bftrainer_dir / data.SCALABILITY_FILE).read_text())
    return with_synthetic_depths(table, 4)


def optimum(options, capacity: int) -> float:
    answer = cbc_backend.solve(options, capacity, 30.0, options.start[:-1])
    assert answer.status == "optimal"
    return float(options.value[chosen_options(options, answer.values)].sum())


def test_the_reduced_model_has_the_full_models_optimum(deep_table) -> None:
    solved, dropped = 0, []
    for seed in range(12):
        problem = random_problem(deep_table, jobs=20, nodes=300, seed=seed,
                                 max_nodes_range=(16, 32))  # fmt: skip
        options = build_options(problem)
        capacity = len(problem.idle_nodes)
        chosen, price = greedy_choice(options, capacity)
        if price is None:
            continue
        keep = bound_reduction(options, capacity, price, chosen)
        assert keep[chosen].all()  # the incumbent survives
        assert np.add.reduceat(keep.astype(int), options.start[:-1]).min() >= 1
        reduced = options.subset(keep)
        assert optimum(reduced, capacity) == pytest.approx(optimum(options, capacity), rel=1e-9)
        solved += 1
        dropped.append(1 - keep.mean())
    assert solved >= 6
    assert np.median(dropped) > 0.5  # it does reduce: most options go
