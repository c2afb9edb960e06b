"""Bad problems fail at construction with a message naming the field; evaluate rejects
infeasible answers."""

import pytest
from interstice.optimizer import Job, Problem, ScalabilityPoint, ScalabilityTable, solve
from pydantic import ValidationError

TABLE = ScalabilityTable(
    points=(
        ScalabilityPoint(model="m", nodes=1, samples_per_s=10.0),
        ScalabilityPoint(model="m", nodes=4, samples_per_s=30.0),
        ScalabilityPoint(model="m", nodes=4, samples_per_s=36.0, spb_depth=1,
                         progress_per_sample=0.5),
    )
)  # fmt: skip


def job(**fields) -> Job:
    return Job(**{"job_id": "a", "model": "m", "min_nodes": 1, "max_nodes": 4,
                  "samples_remaining": 1e9, **fields})  # fmt: skip


def problem(**fields) -> Problem:
    return Problem(**{"idle_nodes": ("n1", "n2", "n3"), "jobs": (job(),),
                      "scalability": TABLE, "horizon_s": 100.0, **fields})  # fmt: skip


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: job(min_nodes=3, max_nodes=2), "min_nodes 3 > max_nodes 2"),
        (lambda: job(min_nodes=-1), "min_nodes"),
        (lambda: job(nodes=("n1", "n1")), "listed twice"),
        (lambda: job(spb_depths=()), "spb_depths is empty"),
        (lambda: problem(jobs=(job(model="x"),)), "model 'x' is not in the scalability table"),
        (lambda: problem(jobs=(job(nodes=("n9",)),)), "holds node 'n9' that is not idle"),
        (lambda: problem(jobs=(job(spb_depths=(2,)),)), "spb_depths [2] are not measured"),
        (lambda: problem(idle_nodes=("n1", "n1")), "idle_nodes: a node is listed twice"),
        (lambda: problem(horizon_s=0), "horizon_s"),
        (
            lambda: problem(jobs=(job(nodes=("n1",)), job(job_id="b", nodes=("n1",)))),
            "held by both job 'a' and 'b'",
        ),
    ],
)
def test_bad_input_is_named(build, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build()


def test_table_rejects_duplicates_and_bad_csv() -> None:
    with pytest.raises(ValidationError, match="duplicate row"):
        ScalabilityTable(points=(TABLE.points[0], TABLE.points[0]))
    with pytest.raises(ValueError, match="line 3"):
        ScalabilityTable.from_csv("model,nodes,samples_per_s\nm,1,10\nm,two,20\n")


def test_interpolation_and_no_extrapolation() -> None:
    assert TABLE.samples_per_s("m", 2) == pytest.approx(10 + (30 - 10) / 3)
    assert TABLE.samples_per_s("m", 0) == 0.0
    with pytest.raises(ValueError, match="leave the measured range 0..4"):
        TABLE.samples_per_s("m", 5)
    # max_nodes 9 is capped at the table's 4: no count above 4 is ever given.
    answer = solve(problem(idle_nodes=tuple(f"n{i}" for i in range(9)), jobs=(job(max_nodes=9),)))
    assert answer.jobs[0].node_count == 4


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"node_count": 4, "node_names": ("n1", "n2", "n3", "n4")}, "not idle"),
        ({"node_count": 1, "node_names": ("n3",)}, "would migrate"),
        ({"node_count": 2, "node_names": ("n1",)}, "node_count distinct"),
        ({"spb_depth": 7}, "spb_depth 7 is not allowed"),
        ({"goodput": 1.0}, "misreported"),
    ],
)
def test_evaluate_rejects_infeasible_answers(change: dict, message: str) -> None:
    instance = problem(jobs=(job(nodes=("n1", "n2")),))
    answer = solve(instance)
    assert answer.jobs[0].node_names == ("n1", "n2", "n3")
    bad = answer.model_copy(update={"jobs": (answer.jobs[0].model_copy(update=change),)})
    with pytest.raises(ValueError, match=message):
        instance.evaluate(bad)


def test_evaluate_rejects_a_count_below_min_and_two_jobs_on_one_node() -> None:
    instance = problem(jobs=(job(min_nodes=2), job(job_id="b")))
    answer = solve(instance)
    a, b = answer.jobs
    short = a.model_copy(update={"node_count": 1, "node_names": ("n1",)})
    with pytest.raises(ValueError, match="outside 2..3"):
        instance.evaluate(answer.model_copy(update={"jobs": (short, b)}))
    shared = b.model_copy(update={"node_count": 1, "node_names": a.node_names[:1]})
    with pytest.raises(ValueError, match="another job has"):
        instance.evaluate(answer.model_copy(update={"jobs": (a, shared)}))


# Depth 1 of "m" is derived (depth-0 rates times a ratio), not measured; 36 samples/s on 4
# nodes at progress 0.9 would beat depth 0's 30 (32.4 samples of progress per second).
DERIVED = ScalabilityTable.from_csv(
    "model,nodes,samples_per_s,spb_depth,progress_per_sample,derived\n"
    "m,1,10,0,1,false\nm,4,30,0,1,false\nm,4,36,1,0.9,true\n"
)


def test_a_derived_depth_is_never_offered_and_depth_zero_only_jobs_stay_at_zero() -> None:
    instance = problem(scalability=DERIVED, idle_nodes=("n1", "n2", "n3", "n4"))
    assert instance.depths_of(instance.jobs[0]) == (0,)
    assert solve(instance).jobs[0].spb_depth == 0
    # A job running at the derived depth may be moved off it, never put on it.
    running = problem(scalability=DERIVED, jobs=(job(spb_depth=1),))
    assert solve(running).jobs[0].spb_depth == 0
    with pytest.raises(ValidationError, match="every depth it may run at has derived"):
        problem(scalability=DERIVED, jobs=(job(spb_depths=(1,)),))
    # Measured, the same row is chosen; a job whose workers take only depth 0 is not.
    measured = ScalabilityTable(points=tuple(p.model_copy(update={"derived": False})
                                             for p in DERIVED.points))  # fmt: skip
    four = ("n1", "n2", "n3", "n4")
    assert solve(problem(scalability=measured, idle_nodes=four)).jobs[0].spb_depth == 1
    only_zero = problem(scalability=measured, idle_nodes=four, jobs=(job(spb_depths=(0,)),))
    answer = solve(only_zero)
    assert answer.jobs[0].spb_depth == 0
    bad = answer.jobs[0].model_copy(update={"spb_depth": 1, "samples_per_s": 36.0,
                                            "goodput": 36.0 * 0.9 * 100})  # fmt: skip
    with pytest.raises(ValueError, match="spb_depth 1 is not allowed"):
        only_zero.evaluate(answer.model_copy(update={"jobs": (bad,)}))
    with pytest.raises(ValueError, match="derived must be true or false, got 'yes'"):
        ScalabilityTable.from_csv("model,nodes,samples_per_s,derived\nm,1,10,yes\n")


@pytest.mark.timeout(60)  # the check was quadratic: this table took many minutes
def test_a_table_of_20000_models_is_checked_in_linear_time() -> None:
    rows = [f"m{m},{n},{10 * n}" for m in range(20000) for n in (1, 2)]
    table = ScalabilityTable.from_csv("\n".join(["model,nodes,samples_per_s", *rows]) + "\n")
    assert len(table.models) == 20000
    assert table.samples_per_s("m19999", 2) == 20.0
    # the rules still hold, the first broken one named
    rows[-1] = "m19999,1,30"
    with pytest.raises(ValueError, match="duplicate row for model 'm19999', nodes 1"):
        ScalabilityTable.from_csv("\n".join(["model,nodes,samples_per_s", *rows]) + "\n")


def test_a_line_may_end_in_a_carriage_return() -> None:
    table = ScalabilityTable.from_csv("model,nodes,samples_per_s\rm,1,10\r\nm,2,18\n")
    assert [p.nodes for p in table.points] == [1, 2]


def test_each_rule_of_a_table_is_named() -> None:
    def check(csv: str) -> None:
        ScalabilityTable.from_csv("model,nodes,samples_per_s,spb_depth,progress_per_sample\n" + csv)

    with pytest.raises(ValueError, match="model 'a' depth 1 has more than one progress_per"):
        check("a,1,10,0,1\na,1,5,1,0.5\na,2,9,1,0.6\n")
    with pytest.raises(ValueError, match="model 'b' depth 0 has no row with nodes > 0"):
        check("a,1,10,0,1\nb,0,0,0,1\n")
