"""A trivial local policy and a runner for the hand-worked replays on the tiny trace.

``take_all``: jobs in order keep their nodes and take free idle ones up to ``max_nodes``,
nothing below ``min_nodes``. ``run`` replays jobs on ``(trace, table)`` under it with a fixed
300 s horizon.
"""

from interstice.optimizer import Allocation, JobAllocation, Problem
from interstice.replay.horizon import FixedHorizon
from interstice.replay.jobs import JobSpec
from interstice.replay.simulator import ReplayOptions, replay


def take_all(problem: Problem) -> Allocation:
    """Jobs in order keep their nodes and take free ones up to max_nodes."""
    held = {node for job in problem.jobs for node in job.nodes}
    free = sorted(set(problem.idle_nodes) - held)
    shares = []
    for job in problem.jobs:
        want = job.max_nodes - len(job.nodes)
        names = tuple(sorted(job.nodes)) + tuple(free[:want])
        free = free[want:]
        if len(names) < job.min_nodes:
            free, names = sorted(free + list(names)), ()
        rate = problem.scalability.samples_per_s(job.model, len(names))
        shares.append(
            JobAllocation(
                job_id=job.job_id,
                node_count=len(names),
                node_names=tuple(sorted(names)),
                spb_depth=0,
                samples_per_s=rate,
                goodput=0.0,
                rescaled=len(names) != len(job.nodes),
            )
        )
    return Allocation(
        status="feasible",
        objective=0.0,
        backend="take_all",
        solve_time_s=0.0,
        horizon_s=problem.horizon_s,
        jobs=tuple(shares),
    )


def spec(
    job_id: str,
    total: float,
    min_nodes: int = 1,
    offset_s: float = 0.0,
    max_nodes: int = 4,
    model: str = "m",
) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        model=model,
        submit_offset_s=offset_s,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        total_samples=total,
        rescale_up_s=10.0,
        rescale_down_s=5.0,
    )


def run(inputs, jobs, end_s=200.0, **options):
    trace, table = inputs
    return replay(
        trace.window(0, end_s),
        jobs,
        table,
        take_all,
        horizon=FixedHorizon(300),
        options=ReplayOptions(**options),
        name="take_all",
    )
