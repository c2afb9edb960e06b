"""Random small allocation problems and an exhaustive optimum, for the brute-force and
property tests.

The enumeration does not use the formulation: it tries every assignment of a count (0, or
min_nodes..max) and a depth to every job within the idle pool, by the rules written out
here (a job's own curve if it has one, its allowed depths less any derived depth > 0),
builds each Allocation with rates from the curve and goodput by eqs. (a)-(b) written out
here, and scores it with Problem.evaluate.
"""

import itertools
import math
import random

import pytest
from interstice.optimizer import (
    Allocation,
    Job,
    JobAllocation,
    Problem,
    ScalabilityPoint,
    ScalabilityTable,
    Weights,
)
from interstice.optimizer.placement import assign_nodes


def random_points(rng: random.Random, models: tuple[str, ...]) -> list[ScalabilityPoint]:
    """1-3 depths per model, measured at a random subset of 1, 2, 4, 6 nodes; a depth > 0 is
    derived (not measured) one time in four."""
    points = []
    for model in models:
        for depth in range(rng.randint(1, 3)):
            derived = depth > 0 and rng.random() < 0.25
            progress = 1.0 if depth == 0 else rng.uniform(0.5, 1.0)
            counts = sorted(rng.sample([1, 2, 4, 6], rng.randint(1, 4)))
            top = max(counts)
            counts = sorted({*counts, top})
            for n in counts:  # rates not always increasing, so dominance pruning matters
                rate = rng.uniform(50, 150) * n ** rng.uniform(0.3, 1.1)
                points.append(
                    ScalabilityPoint(model=model, nodes=n, samples_per_s=rate, spb_depth=depth,
                                     progress_per_sample=progress, derived=derived)
                )  # fmt: skip
    return points


def random_table(rng: random.Random) -> ScalabilityTable:
    """One or two models (:func:`random_points`)."""
    return ScalabilityTable(points=tuple(random_points(rng, ("m0", "m1")[: rng.randint(1, 2)])))


def random_problem(rng: random.Random) -> Problem:
    table = random_table(rng)
    nodes = [f"n{i}" for i in range(rng.randint(1, 8))]
    free = nodes[:]
    rng.shuffle(free)
    jobs = []
    for j in range(rng.randint(1, 4)):
        model = rng.choice(sorted(table.models))
        # One job in four brings its own curve (model "own", not in the table).
        rates = tuple(random_points(rng, ("x",))) if rng.random() < 0.25 else None
        curve = ScalabilityTable(points=rates) if rates else table
        depths = curve.depths("x" if rates else model)
        min_nodes = rng.randint(1, 3)
        held = rng.randint(0, min(len(free), 5))
        mine, free = free[:held], free[held:]
        # A depth > 0 with derived rows is never allowed to be asked for alone; one job in
        # five takes only depth 0 (plain data parallel, SplitBrain).
        offered = [d for d in depths if d == 0 or not any(
            p.derived for p in curve.points if p.spb_depth == d)]  # fmt: skip
        allowed = (
            (0,) if rng.random() < 0.2 else tuple(rng.sample(offered, rng.randint(1, len(offered))))
        )
        jobs.append(
            Job(
                job_id=f"j{j}",
                model="own" if rates else model,
                rates=rates,
                min_nodes=min_nodes,
                max_nodes=rng.randint(min_nodes, 7),
                nodes=tuple(mine),
                spb_depth=rng.choice(depths),
                spb_depths=allowed if rng.random() < 0.5 else None,
                priority=rng.uniform(0.5, 3.0),
                samples_remaining=rng.choice([1e9, rng.uniform(1e3, 2e4)]),
                rescale_up_s=rng.uniform(0, 40),
                rescale_down_s=rng.uniform(0, 20),
            )
        )
    weights = Weights(
        throughput=rng.choice([1.0, rng.uniform(0, 2)]),
        speedup=(normalise := rng.choice(["none", "speedup", "node_seconds"])) == "speedup",
        node_seconds=normalise == "node_seconds",
        fairness=rng.choice([0.0, rng.uniform(0, 1)]),
        priority=rng.choice([0.0, 1.0, rng.uniform(0, 2)]),
        churn=rng.choice([0.0, rng.uniform(0, 0.5)]),
        early_finish=rng.choice([0.0, 0.9, 1.0, rng.uniform(0, 1)]),
    )
    horizon_s = rng.uniform(10, 200)
    # Term (i): one instance in three tilts toward the earlier jobs (drawn last, so the
    # draws above are those of the instances before it).
    if rng.random() < 1 / 3:
        weights = weights.model_copy(update={"completion_s": rng.uniform(60, 3600)})
        jobs = [job.model_copy(update={"submitted_s": rng.uniform(0, 3600)}) for job in jobs]
    return Problem(idle_nodes=tuple(nodes), jobs=tuple(jobs), scalability=table,
                   weights=weights, horizon_s=horizon_s)  # fmt: skip


def curve_of(problem: Problem, job: Job) -> ScalabilityTable:
    """The job's rates as a table of its model, else the problem's table."""
    if job.rates is None:
        return problem.scalability
    points = tuple(p.model_copy(update={"model": job.model}) for p in job.rates)
    return ScalabilityTable(points=points)


def job_options(problem: Problem, job: Job) -> list[tuple[int, int]]:
    """Every (count, depth) the rules allow ``job``, from the rules, not the formulation:
    its own curve if it has one, its allowed depths less any derived depth > 0."""
    table = curve_of(problem, job)
    depths = job.spb_depths or table.depths(job.model)
    options = [(0, job.spb_depth)]
    for depth in depths:
        own = [p for p in table.points if (p.model, p.spb_depth) == (job.model, depth)]
        if depth > 0 and any(p.derived for p in own):  # a derived row of its own model
            continue
        top = min(job.max_nodes, table.max_nodes(job.model, depth), len(problem.idle_nodes))
        options += [(n, depth) for n in range(job.min_nodes, top + 1)]
    return options


def share(problem: Problem, job: Job, count: int, depth: int, names: tuple) -> JobAllocation:
    """A job's share with rate from the table and goodput by eqs. (a)-(b) of the formulation."""
    held = len(job.nodes)
    if count == 0 or (count == held and depth == job.spb_depth):
        cost_s = 0.0
    elif count > held:
        cost_s = job.rescale_up_s
    else:
        cost_s = job.rescale_down_s
    table = curve_of(problem, job)
    rate = table.samples_per_s(job.model, count, depth) if count else 0.0
    progress = table.progress_per_sample(job.model, depth)
    goodput = min(rate * progress * max(0.0, problem.horizon_s - cost_s), job.samples_remaining)
    rescaled = count != held or (count > 0 and depth != job.spb_depth)
    return JobAllocation(job_id=job.job_id, node_count=count, node_names=names, spb_depth=depth,
                         samples_per_s=rate, goodput=goodput, rescaled=rescaled)  # fmt: skip


def exhaustive_optimum(problem: Problem) -> float:
    best = -float("inf")
    capacity = len(problem.idle_nodes)
    for combo in itertools.product(*(job_options(problem, job) for job in problem.jobs)):
        counts = [n for n, _ in combo]
        if sum(counts) > capacity:
            continue
        names = assign_nodes(problem, counts)
        jobs = tuple(
            share(problem, job, n, d, job_names)
            for job, (n, d), job_names in zip(problem.jobs, combo, names, strict=True)
        )
        allocation = Allocation(status="optimal", objective=0.0, backend="brute", solve_time_s=0,
                                horizon_s=problem.horizon_s, jobs=jobs)  # fmt: skip
        best = max(best, problem.evaluate(allocation))
    return best


def assert_rules_hold(problem: Problem, allocation: Allocation) -> None:
    """min/max, capacity, held-node superset/subset and allowed depths (SplitBrain-style
    jobs at 0, no derived depth > 0), checked here besides evaluate."""
    assert [a.job_id for a in allocation.jobs] == [j.job_id for j in problem.jobs]
    assert sum(a.node_count for a in allocation.jobs) <= len(problem.idle_nodes)
    for job, a in zip(problem.jobs, allocation.jobs, strict=True):
        assert a.node_count == 0 or job.min_nodes <= a.node_count <= job.max_nodes
        assert set(a.node_names) <= set(job.nodes) or set(job.nodes) <= set(a.node_names)
        if a.node_count:
            assert (a.node_count, a.spb_depth) in job_options(problem, job)
            assert job.spb_depths != (0,) or a.spb_depth == 0
    assert problem.evaluate(allocation) == pytest.approx(allocation.objective, rel=1e-9, abs=1e-6)


# -- with idle-hole forecasts (formulation's coefficient (h) and constraints (3)) ------------


def random_forecast_problem(rng: random.Random) -> Problem:
    """:func:`random_problem` with forecasts: each idle node's end known with probability
    0.7, its remaining idle time drawn from a few shared values (so classes hold several
    nodes) or uniformly, some below the jobs' rescale costs and some beyond the horizon;
    1-3 classes, so lives are grouped too."""
    problem = random_problem(rng)
    horizon_s = problem.horizon_s
    shared = [rng.uniform(0, horizon_s) for _ in range(2)]
    forecast = {}
    for node in problem.idle_nodes:
        if rng.random() < 0.7:
            forecast[node] = rng.choice(
                [*shared, rng.uniform(0, 40), rng.uniform(0, 1.3 * horizon_s), 0.0]
            )
    if not forecast:
        forecast[problem.idle_nodes[0]] = rng.uniform(0, horizon_s)
    # One job in two loses more to a reclaim than to a shrink (drawn last, as above).
    jobs = tuple(
        job.model_copy(update={"reclaim_loss_s": rng.uniform(0, 60)}) if rng.random() < 0.5
        else job
        for job in problem.jobs
    )  # fmt: skip
    fields = {name: getattr(problem, name) for name in Problem.model_fields} | {"jobs": jobs}
    return Problem(**{**fields, "idle_forecast_s": forecast,
                      "forecast_classes": rng.randint(1, 3)})  # fmt: skip


def completion_tilt(problem: Problem, job: Job) -> float:
    """Term (i) written out: exp(-(t_j - t_0) / tau), floored at 1e-6; 1 when tau = 0."""
    tau_s = problem.weights.completion_s
    if tau_s == 0:
        return 1.0
    first_s = min(one.submitted_s for one in problem.jobs)
    return max(math.exp(-(job.submitted_s - first_s) / tau_s), 1e-6)


def keep_order(problem: Problem, nodes) -> list[str]:
    """Longest forecast first (H where unknown), ties by name: the rule by which a job keeps
    its held nodes, written out."""
    forecast = problem.idle_forecast_s or {}
    return sorted(nodes, key=lambda node: (-forecast.get(node, problem.horizon_s), node))


def forecast_trained(problem: Problem, job: Job, names, depth: int, level: int) -> float:
    """Samples ``job`` trains within the horizon on ``names`` at ``depth`` with its new nodes
    counted at class ``level``'s life, by coefficient (h) written out event by event: the
    kept held nodes leave at their class's life, a fall in the count pauses the job
    rescale_down_s + reclaim_loss_s (pause end = max(previous end, t + both)), a fall below
    min_nodes stops it."""
    lives, horizon_s = problem.lives, problem.horizon_s
    life_of = {k + 1: float(t) for k, t in enumerate(lives.life_s)}
    life_of[lives.classes + 1] = horizon_s
    held = set(job.nodes)
    life = [life_of[lives.node_class[n]] for n in names if n in held]
    life += [life_of[level]] * sum(n not in held for n in names)
    count, held_count = len(names), len(job.nodes)
    if count == 0:
        return 0.0
    if count > held_count:
        pause_end_s = job.rescale_up_s
    elif count < held_count or depth != job.spb_depth:
        pause_end_s = job.rescale_down_s
    else:
        pause_end_s = 0.0
    table = curve_of(problem, job)
    progress = table.progress_per_sample(job.model, depth)

    def rate(n: int) -> float:
        return table.samples_per_s(job.model, n, depth) * progress if n else 0.0

    total, since_s, stopped = 0.0, 0.0, False
    for t in sorted({t for t in life if t < horizon_s}) + [horizon_s]:
        total += rate(count) * max(0.0, t - max(since_s, pause_end_s))
        left = sum(1 for other in life if other > t)
        if t < horizon_s and not stopped:
            if left < job.min_nodes:
                stopped, count = True, 0
            elif left < count:
                reclaimed_s = t + job.rescale_down_s + job.reclaim_loss_s
                pause_end_s, count = max(pause_end_s, reclaimed_s), left
        since_s = t
    return total


def forecast_worst(problem: Problem, job: Job, names, depth: int) -> tuple[float, float]:
    """``(value, goodput)`` of ``job`` on ``names`` at ``depth`` by coefficient (h) written
    out: its new nodes at the level of the shortest-lived of them, worth the least of levels
    L..K+1 (ties: the lowest level); eqs. (a), (c)-(g) and (i) on that level's samples."""
    from interstice.optimizer.objective import option_value

    lives = problem.lives
    held = set(job.nodes)
    level = min((lives.node_class[n] for n in names if n not in held), default=lives.classes + 1)
    count = len(names)
    rescaled = count != len(job.nodes) or (count > 0 and depth != job.spb_depth)
    worst = None
    for at in range(level, lives.classes + 2):
        trained = forecast_trained(problem, job, names, depth, at)
        goodput, value = option_value(job, count, trained, rescaled, True, curve_of(problem, job),
                                      problem.weights, problem.horizon_s,
                                      completion_tilt(problem, job))  # fmt: skip
        if worst is None or value < worst[0]:
            worst = (float(value), float(goodput))
    return worst


def forecast_share(problem: Problem, job: Job, names, depth: int) -> JobAllocation:
    """A job's share on ``names`` with goodput by :func:`forecast_worst`."""
    count = len(names)
    table = curve_of(problem, job)
    rate = table.samples_per_s(job.model, count, depth) if count else 0.0
    rescaled = count != len(job.nodes) or (count > 0 and depth != job.spb_depth)
    goodput = forecast_worst(problem, job, names, depth)[1]
    return JobAllocation(job_id=job.job_id, node_count=count, node_names=tuple(sorted(names)),
                         spb_depth=depth, samples_per_s=rate, goodput=goodput,
                         rescaled=rescaled)  # fmt: skip


def exhaustive_forecast_optimum(problem: Problem) -> tuple[float, Allocation]:
    """The best allocation by enumeration, not by the formulation: every count per job;
    each job keeps its longest-lived held nodes (:func:`keep_order`); every way to give the
    growing jobs the free nodes, by how many of each class each takes (a job's new nodes
    count at the shortest-lived's class, so nodes of one class are interchangeable); each
    job at its best allowed depth. Scored by :func:`forecast_worst` and checked by
    Problem.evaluate.

    Returns:
        The optimum and an allocation that reaches it.
    """
    capacity = len(problem.idle_nodes)
    options = [job_options(problem, job) for job in problem.jobs]
    per_job = [sorted({n for n, _ in allowed}) for allowed in options]
    # A job's value and share depend only on its own nodes and depth, which many
    # combinations repeat: each is worked out once.
    values: dict[tuple, float] = {}
    shares_of: dict[tuple, JobAllocation] = {}

    def value_of(j: int, mine: tuple, depth: int) -> float:
        if (j, mine, depth) not in values:
            values[j, mine, depth] = forecast_worst(problem, problem.jobs[j], mine, depth)[0]
        return values[j, mine, depth]

    def share_of(j: int, mine: tuple, depth: int) -> JobAllocation:
        if (j, mine, depth) not in shares_of:
            shares_of[j, mine, depth] = forecast_share(problem, problem.jobs[j], mine, depth)
        return shares_of[j, mine, depth]

    best: list = [-float("inf"), None]
    for counts in itertools.product(*per_job):
        if sum(counts) > capacity:
            continue
        kept = [keep_order(problem, job.nodes)[: min(n, len(job.nodes))]
                for job, n in zip(problem.jobs, counts, strict=True)]  # fmt: skip
        in_use = {node for names in kept for node in names}
        free: dict[int, list[str]] = {}
        for node in sorted(set(problem.idle_nodes) - in_use):
            free.setdefault(problem.lives.node_class[node], []).append(node)
        growing = [j for j, n in enumerate(counts) if n > len(kept[j])]
        for names in _give(counts, growing, free, kept):
            shares = []
            for j, (n, mine) in enumerate(zip(counts, map(tuple, names), strict=True)):
                depths = [d for m, d in options[j] if m == n]
                d = max(depths, key=lambda d, j=j, mine=mine: value_of(j, mine, d))
                shares.append(share_of(j, mine, d))
            allocation = Allocation(status="optimal", objective=0.0, backend="brute",
                                    solve_time_s=0, horizon_s=problem.horizon_s,
                                    jobs=tuple(shares))  # fmt: skip
            value = problem.evaluate(allocation)
            if value > best[0]:
                best = [value, allocation]
    return best[0], best[1]


def _give(counts, growing: list[int], pool: dict[int, list[str]], names: list[list[str]]):
    """Every way to give ``growing[0]`` its new nodes from ``pool`` (nodes by class), by how
    many of each class it takes, then the rest of ``growing`` recursively: yields each
    job's node names."""
    if not growing:
        yield names
        return
    j, classes = growing[0], sorted(pool)
    need = counts[j] - len(names[j])
    for take in itertools.product(*(range(len(pool[k]) + 1) for k in classes)):
        if sum(take) != need:
            continue
        mine = [node for k, t in zip(classes, take, strict=True) for node in pool[k][:t]]
        rest = {k: pool[k][t:] for k, t in zip(classes, take, strict=True)}
        yield from _give(counts, growing[1:], rest, [*names[:j], names[j] + mine, *names[j + 1 :]])


# -- with users (the fairness term (d) per user, constraints (4)-(5)) ------------------------


def with_users(rng: random.Random, problem: Problem) -> Problem:
    """``problem`` with each job given one of two users (or none, one job in four) and a
    fairness weight in (0, 1], so that users with several jobs share (d)."""
    jobs = tuple(
        job.model_copy(update={"user": rng.choice(["alice", "bob", "alice", None])})
        for job in problem.jobs
    )
    weights = problem.weights.model_copy(update={"fairness": rng.uniform(0.05, 1.0)})
    fields = {name: getattr(problem, name) for name in Problem.model_fields}
    return Problem(**{**fields, "jobs": jobs, "weights": weights})


def user_share_written_out(problem: Problem, allocation: Allocation) -> float:
    """Term (d) of the users with two or more jobs, written out: w_f * mean over the user's
    jobs of :func:`share_unit` x log2(1 + the user's nodes)."""
    by_user: dict[str, list[tuple[Job, int]]] = {}
    for job, share_ in zip(problem.jobs, allocation.jobs, strict=True):
        if job.user is not None:
            by_user.setdefault(job.user, []).append((job, share_.node_count))
    total = 0.0
    for members in by_user.values():
        if len(members) < 2:
            continue
        units = [share_unit(problem, job) for job, _ in members]
        nodes = sum(count for _, count in members)
        total += problem.weights.fairness * sum(units) / len(units) * math.log2(1 + nodes)
    return total


def share_unit(problem: Problem, job: Job) -> float:
    """u_j k_j q_j ** w_p / s_j written out: the one-node rate at the smallest depth x H x
    priority ** w_p x tilt, over the normalisation."""
    weights = problem.weights
    table = curve_of(problem, job)
    one_node = max(table.samples_per_s(job.model, 1, table.depths(job.model)[0]), 1e-9)
    scale = job.priority**weights.priority * completion_tilt(problem, job)
    if weights.speedup:
        scale /= one_node
    elif weights.node_seconds:
        scale /= max(table.best_progress_per_node_s(job.model), 1e-9)
    return one_node * problem.horizon_s * scale
