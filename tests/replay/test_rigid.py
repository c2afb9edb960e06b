"""The rigid baseline (scavenger partition, torchrun jobs that checkpoint) on the tiny trace.

Trace (``replay_inputs.TINY_TRACE``): n1..n3 idle at 0 s, n4 busy until 60 s, n1 reclaimed at
100 s; window 0..200 s. Table: 100 samples/s per node. Every job asks for 2 nodes, restarts
in 10 s (``rescale_up_s``) and checkpoints every 40 s of training.

Worked by hand:

- 0 s: A arrives and takes the two free idle nodes of lowest id, n1 and n2; it trains at
  200/s from 10 s.
- 5 s: B arrives; only n3 is free: it waits.
- 60 s: n4 comes idle: B starts on n3 and n4, trains at 200/s from 70 s.
- 100 s: n1 is reclaimed: A is killed. It trained 90 s since 10 s; its checkpoints were at
  50 s and 90 s of that (40 s and 80 s of training), so it keeps 200 x 80 = 16,000 samples
  and loses 200 x 10 = 2,000. It is requeued; only n2 is free: it waits.
- 120 s: B completes its 10,000 samples (200/s x 50 s): n3 and n4 are free again.
  A restarts on n2 and n3 (lowest ids), trains from 130 s: 200 x 70 = 14,000 by 200 s.

So A: goodput 30,000, samples 32,000, lost 2,000, 1 preemption; B: JCT 115 s, wait 55 s.
Held node-seconds: A 2 x 100 + B 2 x 60 + A 2 x 80 = 480; idle node-seconds 3 x 60 + 4 x 40
+ 3 x 100 = 640.
"""

from pathlib import Path

import pytest
from interstice.optimizer import ScalabilityTable
from interstice.replay.jobs import JobSpec
from interstice.replay.report import summarize
from interstice.replay.rigid import replay_rigid
from interstice.replay.trace import load_trace
from replay_inputs import TINY_TABLE


def job(job_id: str, total: float, offset_s: float) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        model="m",
        submit_offset_s=offset_s,
        min_nodes=1,
        max_nodes=4,
        total_samples=total,
        rescale_up_s=10.0,
        rescale_down_s=5.0,
    )


@pytest.fixture
def rigid_result(tiny_files: dict[str, Path]):
    trace = load_trace(tiny_files["--trace"])
    return replay_rigid(
        trace.window(0, 200),
        [job("A", 1e9, 0.0), job("B", 10_000, 5.0)],
        ScalabilityTable.from_csv(TINY_TABLE),
        rigid_nodes=2,
        checkpoint_interval_s=40.0,
    )


def test_a_reclaim_loses_the_work_since_the_last_checkpoint_and_requeues(rigid_result):
    a, b = rigid_result.jobs
    assert a.goodput == pytest.approx(16_000 + 14_000)
    assert a.samples == pytest.approx(18_000 + 14_000)
    assert a.lost_goodput == pytest.approx(2_000)
    assert (a.preemptions, a.first_node_s, a.finished_s) == (1, 0.0, None)
    assert sorted(a.nodes) == [1, 2]  # n2 and n3
    assert (b.first_node_s, b.finished_s, b.goodput, b.lost_goodput) == (60.0, 120.0, 10_000, 0)


def test_rigid_figures(rigid_result):
    figures = summarize(rigid_result)
    assert figures["allocated_node_s"] == pytest.approx(480)
    assert figures["idle_node_s"] == pytest.approx(640)
    assert figures["lost_samples"] == pytest.approx(2_000)
    assert (figures["jobs_finished"], figures["jct_mean_s"]) == (1, 115.0)
    assert figures["wait_mean_s"] == pytest.approx((0 + 55) / 2)
    # 40,000 samples at 100/s per node at best: 400 node-seconds of dedicated work.
    assert figures["harvest"] == pytest.approx(400 / 640)


def test_rigid_nodes_default_to_max_nodes(tiny_files: dict[str, Path]):
    # Asking for max_nodes = 4, A waits for n4 at 60 s, starts, and is killed at 100 s
    # (30 s trained from 70 s: no checkpoint yet at a 40 s interval), never to restart.
    trace = load_trace(tiny_files["--trace"])
    result = replay_rigid(
        trace.window(0, 200),
        [job("A", 1e9, 0.0)],
        ScalabilityTable.from_csv(TINY_TABLE),
        checkpoint_interval_s=40.0,
    )
    (a,) = result.jobs
    assert (a.first_node_s, a.goodput, a.lost_goodput) == (60.0, 0.0, pytest.approx(400 * 30))


def test_rigid_nodes_are_at_most_the_machine(tiny_files: dict[str, Path]):
    # On n1..n3 alone (a 3-node machine), A asks for 3 of its max 4 nodes and starts at
    # once; it is killed at 100 s (80 s trained from 10 s: checkpointed at 40 s and 80 s).
    trace = load_trace(tiny_files["--trace"])
    result = replay_rigid(
        trace.window(0, 200, [0, 1, 2]),
        [job("A", 1e9, 0.0)],
        ScalabilityTable.from_csv(TINY_TABLE),
        checkpoint_interval_s=40.0,
    )
    (a,) = result.jobs
    assert (a.first_node_s, a.preemptions) == (0.0, 1)
    assert (a.goodput, a.lost_goodput) == (pytest.approx(300 * 80), pytest.approx(300 * 10))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"checkpoint_interval_s": 0.0}, "checkpoint interval"), ({"rigid_nodes": 0}, "rigid node")],
)
def test_bad_rigid_settings_are_refused(tiny_files, kwargs, message):
    trace = load_trace(tiny_files["--trace"])
    table = ScalabilityTable.from_csv(TINY_TABLE)
    with pytest.raises(ValueError, match=message):
        replay_rigid(trace.window(0, 200), [job("A", 1e9, 0.0)], table, **kwargs)
