"""The committed example snapshots load as Problems and hold what make_snapshots.py says."""

from pathlib import Path

from interstice.optimizer import Problem, greedy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> Problem:
    return Problem.model_validate_json((EXAMPLES / name).read_text())


def test_small_snapshot():
    problem = load("snapshot-small.json")
    assert 30 <= len(problem.idle_nodes) <= 50
    assert [len(job.nodes) for job in problem.jobs] == [8, 4, 0, 0, 0, 0]
    assert problem.evaluate(greedy(problem)) >= 0


def test_summit_snapshot_is_the_idle_peak():
    problem = load("snapshot-summit-4734.json")
    assert len(problem.idle_nodes) == 4654  # the data README's peak, 2021-02-17 05:08
    assert len(problem.jobs) == 24
    assert sum(len(job.nodes) for job in problem.jobs) == 8 * 32
    assert len((EXAMPLES / "snapshot-summit-4734.json").read_bytes()) < 300_000
