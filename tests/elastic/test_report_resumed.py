"""A process's reports say its first step and when it first reported beyond it: where its
generation's rescale cost ends, the ``time`` of its second line in ``metrics.jsonl``."""

import json

from test_state import job  # noqa: F401  (the fixture: a world of one with a job's env)

from interstice import elastic, wire


def test_the_first_report_beyond_the_first_step_is_the_resumed_time(job) -> None:  # noqa: F811
    assert elastic.report(step=5, samples=50) is True  # a process's first report: at once
    progress = json.loads(wire.progress_path(job.run_dir, 0).read_text())
    assert (progress["first_step"], progress["resumed_time"]) == (5, None)
    assert elastic.report(step=6, samples=60) is False  # rate-limited: not written
    assert elastic.report(step=7, samples=70, state="stopped") is True
    progress = json.loads(wire.progress_path(job.run_dir, 0).read_text())
    lines = [json.loads(x) for x in wire.metrics_path(job.job_dir).read_text().splitlines()]
    assert [line["step"] for line in lines] == [5, 7]
    assert (progress["first_step"], progress["resumed_time"]) == (5, lines[1]["time"])
    elastic.report(step=8, samples=80, state="stopped")
    resumed = json.loads(wire.progress_path(job.run_dir, 0).read_text())["resumed_time"]
    assert resumed == lines[1]["time"]  # kept: the first one beyond
