"""``--rate-error`` and ``--learn``: the optimizer told wrong rates, and learning them back."""

from pathlib import Path

import numpy as np
import pytest
from interstice.optimizer import ScalabilityTable, greedy
from interstice.replay.horizon import FixedHorizon
from interstice.replay.jobs import JobSpec
from interstice.replay.rates import perturb
from interstice.replay.simulator import ReplayOptions, replay
from interstice.replay.trace import load_trace

# True rates: "fast" trains 200/s per node, "slow" 100/s (both linear, as a power law with
# exponent 1, the learning module's model).
TRUE_TABLE = """model,nodes,samples_per_s
fast,1,200
fast,2,400
fast,4,800
slow,1,100
slow,2,200
slow,4,400
"""
# n1..n4 idle at 0 s; n4 is busy in odd minutes, idle in even ones (an event, a solve, each).
TRACE = (
    "timestamp,node,state\n"
    + "".join(f"2021-02-01T00:00:00,n{k},idle\n" for k in range(1, 5))
    + "".join(f"2021-02-01T00:{m:02d}:00,n4,{'busy' if m % 2 else 'idle'}\n" for m in range(1, 6))
)


def job(job_id: str, model: str) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        model=model,
        submit_offset_s=0.0,
        min_nodes=1,
        max_nodes=3,
        total_samples=1e12,
        rescale_up_s=0.0,
        rescale_down_s=0.0,
    )


def test_perturb_scales_every_rate_within_the_bounds_and_is_seeded():
    table = ScalabilityTable.from_csv(TRUE_TABLE)
    assert perturb(table, 0.0, seed=1) is table
    believed = perturb(table, 0.5, seed=1)
    truth = {(p.model, p.nodes): p.samples_per_s for p in table.points}
    factors = np.array([p.samples_per_s / truth[(p.model, p.nodes)] for p in believed.points])
    assert np.all((factors >= 1 / 1.5) & (factors <= 1.5)) and len(set(factors)) == 6
    assert perturb(table, 0.5, seed=1) == believed != perturb(table, 0.5, seed=2)
    with pytest.raises(ValueError, match="rate error"):
        perturb(table, -0.1, seed=1)


def test_learning_recovers_the_true_allocation_from_the_second_solve(tmp_path: Path):
    """Worked by hand (greedy marginal gain; no rescale cost).

    The optimizer believes "slow" trains 300/s per node (3x the truth). Both jobs may use
    1..3 nodes. On 4 idle nodes it gives slow 3 and fast 1 (believed 900 + 200 > 600 + 300),
    on 3 nodes slow 3 (900 > 400 + 300), where the truth calls for fast 3 and slow 1
    (600 + 100 > 300 + 200), and fast 3 on 3 nodes (600 > 400 + 100).
    Without learning it keeps the believed allocation at every solve. With it, once slow has
    run at 3 nodes (300/s observed) its fitted curve keeps the prior's slope with a level
    pulled down to at most 173/s per node, and from the second solve (60 s) on every
    allocation is the true optimum.
    """
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    window = load_trace(path).window(0, 330)
    table = ScalabilityTable.from_csv(TRUE_TABLE)
    believed = ScalabilityTable.from_csv(
        TRUE_TABLE.replace("slow,1,100", "slow,1,300")
        .replace("slow,2,200", "slow,2,600")
        .replace("slow,4,400", "slow,4,1200")
    )

    def allocations(learn: bool) -> list[tuple[int, int, int]]:
        seen = []

        def policy(problem):
            allocation = greedy(problem)
            seen.append((len(problem.idle_nodes), *(j.node_count for j in allocation.jobs)))
            return allocation

        replay(
            window,
            [job("F", "fast"), job("S", "slow")],
            table,
            policy,
            horizon=FixedHorizon(60),
            options=ReplayOptions(learn=learn),
            believed=believed,
        )
        return seen

    # (idle nodes, fast's nodes, slow's nodes) at the solves of 0, 60, ..., 300 s.
    assert allocations(False) == [(4, 1, 3), (3, 0, 3)] * 3
    assert allocations(True) == [(4, 1, 3), (3, 3, 0), (4, 3, 1), (3, 3, 0), (4, 3, 1), (3, 3, 0)]
