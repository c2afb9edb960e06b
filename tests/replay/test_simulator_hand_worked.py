"""The event loop on tiny hand-made inputs whose every figure is worked out in comments.

Table: model ``m`` trains 100 samples/s per node (1, 2, 4 nodes measured; 3 nodes
interpolate to 300). The policy is a trivial local one: jobs in order take every idle node
they can (up to max_nodes, nothing below min_nodes), keeping the nodes they hold.
"""

from dataclasses import replace
from pathlib import Path

import pytest
from interstice.optimizer import ScalabilityTable
from interstice.replay.jobs import load_jobs
from interstice.replay.report import summarize
from interstice.replay.simulator import ReplayOptions, replay
from replay_inputs import TINY_TABLE
from tiny_replay import run, spec, take_all


def test_grow_then_reclaim(inputs):
    # n1..n3 idle at 0: A starts on 3 nodes, pauses 10 s (rescale_up): 300/s on 10..60.
    # n4 idle at 60: A grows to 4, pauses to 70: 400/s on 70..100.
    # n1 reclaimed at 100: A shrinks to 3, pauses to 105 (rescale_down): 300/s on 105..200.
    result = run(inputs, [spec("A", 1e9)])
    (a,) = result.jobs
    assert a.goodput == pytest.approx(300 * 50 + 400 * 30 + 300 * 95)
    assert a.samples == a.goodput  # depth 0: one sample is one sample of progress
    assert a.dedicated_samples == pytest.approx(300 * 60 + 400 * 40 + 300 * 100)
    assert (a.rescales, a.preemptions) == (3, 1)
    assert result.idle_node_s == pytest.approx(3 * 60 + 4 * 40 + 3 * 100)
    assert result.allocated_node_s == pytest.approx(result.idle_node_s)
    assert sorted(a.nodes) == [1, 2, 3]  # ids of n2, n3, n4
    # The pauses' cost by cause: 300/s for 10 s (start), 400/s for 10 s (grow), 300/s for 5 s
    # (reclaim); together dedicated - goodput = 64,000 - 55,500.
    assert a.pause_loss == pytest.approx({"start": 3000, "grow": 4000, "reclaim": 1500})
    loss = summarize(result)["efficiency_loss"]
    assert loss == pytest.approx(
        {"start": 3 / 64, "grow": 4 / 64, "shrink": 0, "depth": 0, "reclaim": 1.5 / 64}
    )
    assert sum(loss.values()) == pytest.approx(1 - summarize(result)["efficiency"])


def test_completion_is_an_event_at_its_exact_time(inputs):
    # A: 300/s from 10 s: 6,000 samples done at exactly 30 s; B (min 2) arrives at 30 s and
    # then takes the freed nodes.
    result = run(inputs, [spec("A", 6000), spec("B", 1e9, min_nodes=2, offset_s=30)])
    a, b = result.jobs
    assert a.finished_s == 30.0 and a.goodput == 6000 and a.nodes == set()
    assert b.admitted_s == 30.0 and b.progress_points[1][0] == 30.0  # B starts at 30 s
    figures = summarize(result)
    assert (figures["jobs_finished"], figures["last_finish_s"]) == (1, 30.0)
    assert figures["jct_mean_s"] == 30.0  # A arrived at 0 s


def test_falling_below_min_nodes_stops_the_job(inputs):
    # A needs 4 nodes: it starts at 60 s on n1..n4, pauses to 70, 400/s on 70..100;
    # n1 reclaimed at 100 s: 3 < min 4, A stops and holds nothing.
    result = run(inputs, [spec("A", 1e9, min_nodes=4)])
    (a,) = result.jobs
    assert a.goodput == pytest.approx(400 * 30)
    assert a.nodes == set() and a.preemptions == 1 and a.rescales == 2
    assert result.allocated_node_s == pytest.approx(4 * 40)


def test_min_solve_interval_defers_the_growth(inputs):
    # Solves at 0 and (deferred from 60 s) at 80 s: A grows at 80 instead of 60.
    # 300/s on 10..80, 4 nodes from 80, pause to 90: 400/s on 90..100; then the reclaim at
    # 100 acts at once (pause to 105) though the solve it triggers waits to 160.
    result = run(inputs, [spec("A", 1e9)], min_solve_interval_s=80.0)
    (a,) = result.jobs
    assert a.goodput == pytest.approx(300 * 70 + 400 * 10 + 300 * 95)
    assert result.deferred_solves == 2


def test_admission_by_capacity_first_come_first_served(inputs):
    # One-node jobs J0..J3 arrive at 0..3 s; 3 nodes are idle until n4 comes at 60 s.
    # A queued job is admitted while the admitted ones' max_nodes sum below the idle count:
    # J0 (0 < 3), J1 (1 < 3), J2 (2 < 3) on arrival; J3 waits (3 >= 3) until 60 s (3 < 4).
    jobs = [spec(f"J{k}", 1e9, offset_s=k, max_nodes=1) for k in range(4)]
    result = run(inputs, jobs)
    assert [j.admitted_s for j in result.jobs] == [0.0, 1.0, 2.0, 60.0]
    # Four-node jobs: J0 alone can use every idle node, so the others wait in order.
    result = run(inputs, [spec(f"J{k}", 1e9, offset_s=k) for k in range(4)])
    assert [j.admitted_s for j in result.jobs] == [0.0, None, None, None]


def test_admission_counts_a_job_at_its_efficient_size(inputs):
    # Model m is 100 samples/s per node up to 2 nodes, then 2 -> 4 nodes adds only 50/s:
    # parallel efficiency 1, 1, 250/300 = 0.83, 0.75 at 1..4 nodes. At 0.9 a 4-node job
    # counts 2 usable nodes: J0 (0 < 3 idle) and J1 (2 < 3) are admitted on arrival, J2
    # waits (4 >= 3) until n4 comes at 60 s and still waits (4 >= 4). At 0 each counts its
    # max_nodes 4, so J0 alone fills the pool and the others wait.
    trace, _ = inputs
    concave = ScalabilityTable.from_csv("model,nodes,samples_per_s\nm,1,100\nm,2,200\nm,4,250\n")
    jobs = [spec(f"J{k}", 1e9, offset_s=k) for k in range(3)]
    result = run((trace, concave), jobs, admission_efficiency=0.9)
    assert [j.admitted_s for j in result.jobs] == [0.0, 1.0, None]
    result = run((trace, concave), jobs, admission_efficiency=0.0)
    assert [j.admitted_s for j in result.jobs] == [0.0, None, None]


def test_an_all_or_nothing_job_that_cannot_start_does_not_block_admission(inputs):
    # G needs 4 nodes (min = max = 4) and arrives first; while 3 nodes are idle it can use
    # none (usable 0, not 4), so A (1 node) is admitted behind it at 1 s and starts at once.
    # Counting G's 4 would have kept A queued (4 >= 3 idle) with every node idle.
    jobs = [spec("G", 1e9, min_nodes=4), spec("A", 1e9, offset_s=1, max_nodes=1)]
    result = run(inputs, jobs)
    assert [j.admitted_s for j in result.jobs] == [0.0, 1.0]
    assert result.jobs[1].first_node_s == 1.0


def test_a_job_whose_start_the_horizon_cannot_pay_does_not_block_admission(inputs):
    # S's start costs 400 s, more than the 300 s horizon: it can earn nothing, counts 0
    # usable nodes, and A is admitted behind it at 1 s. At 200 s, S counts its 4 nodes
    # (>= 3 idle, then >= 4 from 60 s) and A waits to the end.
    for rescale_up_s, admitted in ((400.0, [0.0, 1.0]), (200.0, [0.0, None])):
        slow = replace(spec("S", 1e9), rescale_up_s=rescale_up_s)
        result = run(inputs, [slow, spec("A", 1e9, offset_s=1)])
        assert [j.admitted_s for j in result.jobs] == admitted


def test_max_active_jobs_caps_admission(inputs):
    jobs = [spec(f"J{k}", 1e9, offset_s=k, max_nodes=1) for k in range(4)]
    result = run(inputs, jobs, max_active_jobs=2)
    assert [j.admitted_s for j in result.jobs] == [0.0, 1.0, None, None]


def test_jobs_file_offsets_and_unknown_model(tiny_files: dict[str, Path], tmp_path: Path):
    table = ScalabilityTable.from_csv(TINY_TABLE)
    jobs = load_jobs(tiny_files["--jobs"], table)
    assert [(j.job_id, j.submit_offset_s, j.min_nodes) for j in jobs] == [("A", 0, 1), ("B", 30, 2)]
    bad = tmp_path / "bad.csv"
    bad.write_text(tiny_files["--jobs"].read_text().replace("B,m,", "B,resnet50,"))
    with pytest.raises(ValueError, match="line 3: model 'resnet50' is not in the scalability"):
        load_jobs(bad, table)


def test_each_pool_gets_its_horizon_worked_out_once(inputs):
    # Admission and the solve of one step share the step's horizon: an auto horizon (an
    # estimate over every idle node) is not worked out twice for the same time and pool.
    trace, table = inputs
    seen = []

    def counting_horizon(t_s, idle_since_s):
        seen.append((t_s, idle_since_s.tobytes()))
        return 300.0

    jobs = [spec(f"J{k}", 1e9, offset_s=k, max_nodes=1) for k in range(4)]  # queued at 60 s
    result = replay(
        trace.window(0, 200.0),
        jobs,
        table,
        take_all,
        horizon=counting_horizon,
        options=ReplayOptions(),
        name="counting",
    )
    assert result.solves >= 4 and len(seen) >= 4
    assert len(seen) == len(set(seen))  # J3's admission and the solve at 60 s: one estimate
