"""The fairness term (d) per user (``Job.user``, constraints (4)-(5) of the formulation):
a tiny instance worked out by hand, random instances against enumeration, and jobs without
users scoring exactly as before."""

import importlib
import math
import random

import pytest
from interstice.optimizer import (
    BACKENDS,
    Job,
    Problem,
    ScalabilityPoint,
    ScalabilityTable,
    Weights,
    equal_share,
    greedy,
    solve,
)
from interstice.optimizer.formulation import build_options
from interstice.optimizer.solve import chosen_options
from random_instances import (
    assert_rules_hold,
    exhaustive_forecast_optimum,
    exhaustive_optimum,
    random_forecast_problem,
    random_problem,
    share_unit,
    user_share_written_out,
    with_users,
)

# Two models, linear in the count: a trains 110 samples/s per node, b 100; H = 100 s, so one
# node over the horizon earns an a job u_a = 11,000 samples and the b job u_b = 10,000.
# Weights in samples, fairness w_f = 1, no rescale costs, nothing finishes. Three idle
# nodes; user alice has 50 jobs of model a, user bob one job of model b; each job takes 1-2.
# Goodput is 11,000 per node given to alice and 10,000 per node given to bob.
#
# Per job (no users: 51 users of one job each), (d) is u_j log2(1 + n_j) per job: alice's
# jobs on one node each, 3 x (11,000 + 11,000) = 66,000, beat every answer that gives bob a
# node (at best 2 x 22,000 + 10,000 + 10,000 = 64,000): bob gets nothing.
#
# Per user, (d) is ū log2(1 + N) per user, ū_alice = 11,000 (the mean over her jobs),
# ū_bob = 10,000; by (N_alice, N_bob):
#   (3, 0): 33,000 + 11,000 log2 4 = 55,000
#   (2, 1): 22,000 + 10,000 + 11,000 log2 3 + 10,000 log2 2 = 42,000 + 11,000 log2 3
#           = 59,434.59
#   (1, 2): 11,000 + 20,000 + 11,000 log2 2 + 10,000 log2 3 = 42,000 + 10,000 log2 3
#           = 57,849.63
# so the optimum gives bob one node and alice two, worth 42,000 + 11,000 log2 3.
TABLE = ScalabilityTable(
    points=tuple(
        ScalabilityPoint(model=model, nodes=n, samples_per_s=rate * n)
        for model, rate in (("a", 110.0), ("b", 100.0))
        for n in (1, 2)
    )
)


def fifty_to_one(users: bool) -> Problem:
    jobs = [
        Job(job_id=f"a{i}", model="a", min_nodes=1, max_nodes=2, samples_remaining=1e9,
            user="alice" if users else None)
        for i in range(50)
    ]  # fmt: skip
    jobs.append(Job(job_id="b", model="b", min_nodes=1, max_nodes=2, samples_remaining=1e9,
                    user="bob" if users else None))  # fmt: skip
    return Problem(idle_nodes=("n1", "n2", "n3"), jobs=tuple(jobs), scalability=TABLE,
                   weights=Weights(node_seconds=False, fairness=1.0), horizon_s=100.0)  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_user_with_fifty_jobs_leaves_a_node_to_a_user_with_one(backend: str) -> None:
    problem = fifty_to_one(users=True)
    allocation = solve(problem, backend=backend)
    assert allocation.status == "optimal"
    assert_rules_hold(problem, allocation)
    assert allocation.objective == pytest.approx(42_000 + 11_000 * math.log2(3))
    assert allocation.jobs[-1].node_count == 1
    assert sum(share.node_count for share in allocation.jobs[:-1]) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_job_shares_let_the_fifty_jobs_take_every_node(backend: str) -> None:
    problem = fifty_to_one(users=False)
    allocation = solve(problem, backend=backend)
    assert problem.evaluate(allocation) == pytest.approx(66_000)
    assert allocation.jobs[-1].node_count == 0


def test_jobs_of_distinct_users_score_as_jobs_without_users() -> None:
    """A user with one job is the job's own user: options and answers are the same."""
    for seed in range(20):
        problem = random_problem(random.Random(seed))
        named = problem.model_copy(
            update={
                "jobs": tuple(job.model_copy(update={"user": job.job_id}) for job in problem.jobs)
            }  # fmt: skip
        )
        plain, users = build_options(problem), build_options(named)
        assert users.users is None
        assert (plain.value == users.value).all()
        assert solve(named, "cpsat").objective == solve(problem, "cpsat").objective


USER_INSTANCES = 40


@pytest.mark.parametrize("seed", range(USER_INSTANCES))
def test_backends_reach_the_exhaustive_optimum_with_users(seed: int) -> None:
    rng = random.Random(seed)
    problem = with_users(rng, random_problem(rng))
    optimum = exhaustive_optimum(problem)
    close = pytest.approx(optimum, rel=1e-7, abs=1e-6)
    options = build_options(problem)
    for backend in BACKENDS:
        allocation = solve(problem, backend=backend)
        assert allocation.status == "optimal"
        assert_rules_hold(problem, allocation)
        assert allocation.objective == close
        # The backend itself on every option, from every job at its zero option.
        module = importlib.import_module(f"interstice.optimizer.{backend}")
        answer = module.solve(options, len(problem.idle_nodes), 10.0, options.start[:-1])
        assert answer.status == "optimal"
        assert options.total(chosen_options(options, answer.values)) == close
    for policy in (greedy, equal_share):
        allocation = policy(problem)
        assert_rules_hold(problem, allocation)
        assert allocation.objective <= optimum + 1e-6 * max(1.0, abs(optimum))


@pytest.mark.parametrize("seed", range(USER_INSTANCES))
def test_evaluate_adds_the_users_shares_written_out(seed: int) -> None:
    """evaluate with users = evaluate with every job its own user, less the coupled jobs'
    own shares, plus the users' shares, all written out."""
    rng = random.Random(seed)
    problem = with_users(rng, random_problem(rng))
    alone = problem.model_copy(
        update={"jobs": tuple(job.model_copy(update={"user": None}) for job in problem.jobs)}
    )
    allocation = solve(problem, backend="cbc")
    coupled = {j for jobs in problem.user_jobs for j in jobs}
    own_shares = sum(
        problem.weights.fairness * share_unit(problem, job) * math.log2(1 + share.node_count)
        for j, (job, share) in enumerate(zip(problem.jobs, allocation.jobs, strict=True))
        if j in coupled
    )
    expected = alone.evaluate(allocation) - own_shares + user_share_written_out(problem, allocation)
    assert problem.evaluate(allocation) == pytest.approx(expected, rel=1e-9, abs=1e-6)


def test_random_user_instances_couple_jobs() -> None:
    """The random instances above do put several jobs under one user."""
    coupled = 0
    for seed in range(USER_INSTANCES):
        rng = random.Random(seed)
        coupled += build_options(with_users(rng, random_problem(rng))).users is not None
    assert coupled >= USER_INSTANCES // 3


@pytest.mark.parametrize("seed", range(12))
def test_forecasts_with_users_reach_the_exhaustive_optimum(seed: int) -> None:
    rng = random.Random(1000 + seed)
    problem = with_users(rng, random_forecast_problem(rng))
    optimum, _ = exhaustive_forecast_optimum(problem)
    for backend in BACKENDS:
        allocation = solve(problem, backend=backend)
        assert allocation.status == "optimal"
        assert problem.evaluate(allocation) == pytest.approx(optimum, rel=1e-7, abs=1e-6)
