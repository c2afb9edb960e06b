"""What admins read of the service's past: the stats of the idle nodes' use and the
applied solves."""

from datetime import datetime

from pydantic import BaseModel


class StatsPublic(BaseModel):
    """What the service did with the idle nodes from ``since`` to ``until`` (the measures
    named as in the replay's ``report.json``).

    Attributes:
        since: start of the window (the first record when not asked for).
        until: end of the window (now).
        idle_node_hours: node-hours the scheduler reported nodes idle in the window.
        harvested_node_hours: node-hours jobs held nodes in the window.
        utilization: harvested / idle node-hours; None with no idle time.
        harvest: Σ over jobs of samples trained in the window ÷ the job's best per-node
            samples/s (its model's table rows, else its own measured rates), ÷ idle
            node-seconds: the share of idle node time turned into dedicated-node work. Jobs
            with neither a table row nor a measured rate are left out. None with no idle time.
        jobs_finished: jobs that finished in the window.
        jct_mean_s: mean job completion time (submission to finish) of those, seconds.
        jct_p50_s: its median, seconds.
        jct_p95_s: its 95th percentile (nearest rank), seconds.
        wait_mean_s: mean time from submission to first node of the jobs that got their first
            node in the window, seconds.
    """

    since: datetime | None
    until: datetime
    idle_node_hours: float
    harvested_node_hours: float
    utilization: float | None
    harvest: float | None
    jobs_finished: int
    jct_mean_s: float | None
    jct_p50_s: float | None
    jct_p95_s: float | None
    wait_mean_s: float | None


class SolveJobPublic(BaseModel):
    """One job's share in a solve.

    Attributes:
        node_count: nodes the solve gave it.
        spb_depth: SPB depth it was to run at.
        samples_per_s: expected throughput at that count and depth, samples/s.
        rescaled: whether the solve changed its node count or depth.
    """

    job_id: str
    node_count: int
    spb_depth: int
    samples_per_s: float
    rescaled: bool


class SolvePublic(BaseModel):
    """One solve of the control loop that was applied.

    Attributes:
        id: its number, increasing.
        at: when its allocation was written.
        status: ``optimal``, ``feasible`` or ``fallback``.
        backend: what decided (``cbc``, ``cpsat``, ``greedy``, ...).
        objective: objective value of the allocation.
        solve_time_s: wall-clock seconds of the solve, model building included.
        horizon_s: forecast horizon it used, seconds.
        rescales: jobs whose node count or SPB depth it changed.
        jobs: each job's share.
    """

    id: int
    at: datetime
    status: str
    backend: str
    objective: float
    solve_time_s: float
    horizon_s: float
    rescales: int
    jobs: list[SolveJobPublic]


class SolvesPublic(BaseModel):
    """Solves, newest first; ``count`` is the total before ``limit``/``offset``."""

    data: list[SolvePublic]
    count: int
