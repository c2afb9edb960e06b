"""The admin's figures of ``report.json`` on hand-worked replays (tiny trace, ``take_all``).

Trace (``replay_inputs.TINY_TRACE``): n1..n3 idle at 0 s, n4 idle from 60 s, n1 reclaimed at
100 s; window 0..200 s: idle node-seconds 3 x 60 + 4 x 40 + 3 x 100 = 640.
"""

import pytest
from interstice.optimizer import ScalabilityTable
from interstice.replay.report import build_report, summarize
from tiny_replay import run, spec

SPB_TABLE = """model,nodes,samples_per_s,spb_depth,progress_per_sample
m,1,100,0,1
m,2,200,0,1
m,4,400,0,1
m,1,150,1,0.8
m,2,300,1,0.8
m,4,600,1,0.8
"""


def test_harvest_jct_and_wait(inputs):
    # A (6,000 samples) takes n1..n3 at 0 s, pauses to 10 s, 300/s: done at 30 s. B arrives at
    # 20 s but waits (A's 4 usable nodes >= 3 idle) until A completes; admitted at 30 s, it
    # takes n1..n3 (pause to 40), grows to 4 at 60 (pause to 70), shrinks to 3 at 100 (pause
    # to 105): 300 x 20 + 400 x 30 + 300 x 95 = 46,500 samples by 200 s.
    result = run(inputs, [spec("A", 6000), spec("B", 1e9, min_nodes=2, offset_s=20)])
    figures = summarize(result)
    assert figures["goodput_samples"] == pytest.approx(6000 + 46_500)
    # 100 samples/s per node at best: 525 dedicated node-seconds over 640 idle ones.
    assert figures["harvest"] == pytest.approx(525 / 640)
    assert figures["harvested_node_hours"] == pytest.approx(525 / 3600)
    # Without the pauses the same counts give 300 x 30 + 300 x 30 + 400 x 40 + 300 x 100 =
    # 64,000 samples: every idle node-second at the best per-node rate (linear scaling).
    assert figures["harvest_ceiling"] == pytest.approx(64_000 / 100 / 640)
    assert figures["idle_node_hours"] == pytest.approx(640 / 3600)
    assert figures["jobs_finished"] == 1
    assert (figures["jct_mean_s"], figures["jct_p50_s"], figures["jct_p95_s"]) == (30, 30, 30)
    assert figures["wait_mean_s"] == pytest.approx((0 + 10) / 2)  # B: 20 s -> 30 s


TWO_MODELS = """model,nodes,samples_per_s
m,1,100
m,2,200
m,4,400
k,1,50
k,2,100
k,4,200
"""


def test_by_model_splits_the_node_time_and_the_goodput(inputs):
    # As in test_harvest_jct_and_wait, with B of model k (half m's rate): A (m) holds n1..n3
    # from 0 to 30 s; B (k) holds 3 nodes on 30..60, 4 on 60..100, 3 on 100..200 and trains
    # 150 x 20 + 200 x 30 + 150 x 95 = 23,250 samples (pauses to 40, 70 and 105 s).
    trace, _ = inputs
    table = ScalabilityTable.from_csv(TWO_MODELS)
    jobs = [spec("A", 6000), spec("B", 1e9, min_nodes=2, offset_s=20, model="k")]
    figures = summarize(run((trace, table), jobs))
    assert figures["by_model"] == {
        "k": {
            "allocated_node_hours": pytest.approx((3 * 30 + 4 * 40 + 3 * 100) / 3600),
            "harvested_node_hours": pytest.approx(23_250 / 50 / 3600),
            "goodput_samples": pytest.approx(23_250),
            "jobs_arrived": 1,
            "jobs_finished": 0,
            "jct_mean_s": None,
        },
        "m": {
            "allocated_node_hours": pytest.approx(3 * 30 / 3600),
            "harvested_node_hours": pytest.approx(6000 / 100 / 3600),
            "goodput_samples": pytest.approx(6000),
            "jobs_arrived": 1,
            "jobs_finished": 1,
            "jct_mean_s": 30,
        },
    }
    parts = figures["by_model"].values()
    assert sum(p["allocated_node_hours"] for p in parts) == pytest.approx(
        figures["allocated_node_s"] / 3600
    )
    assert sum(p["harvested_node_hours"] for p in parts) == pytest.approx(
        figures["harvested_node_hours"]
    )


def test_efficiency_counts_spb_progress_per_sample(inputs):
    # Depth 1 trains 150/s per node worth 0.8 each: 120/s of progress per node, more than
    # depth 0's 100. take_all keeps depth 0, so its progress is 100/s per node while the
    # dedicated yardstick is the best depth's 120: efficiency = harvest = 100/120 of the
    # depth-0 figure, never above 1.
    trace, _ = inputs
    table = ScalabilityTable.from_csv(SPB_TABLE)
    result = run((trace, table), [spec("A", 1e9)])
    figures = summarize(result)
    # A: 300/s on 10..60, 400/s on 70..100, 300/s on 105..200 (test_grow_then_reclaim).
    goodput = 300 * 50 + 400 * 30 + 300 * 95
    dedicated = 1.2 * (300 * 60 + 400 * 40 + 300 * 100)
    assert figures["efficiency"] == pytest.approx(goodput / dedicated)
    assert figures["harvest"] == pytest.approx(goodput / 120 / 640)


def test_ratios_of_jct_over_the_jobs_both_finished(inputs):
    # A finishes at 30 s under take_all; with B (1e9 samples) first, B's 4 usable nodes are
    # >= the 3 idle ones, so A is never admitted and never finishes.
    quick = run(inputs, [spec("A", 6000), spec("B", 1e9, min_nodes=2, offset_s=20)])
    quick.policy = "quick"
    slow = run(inputs, [spec("B", 1e9), spec("A", 6000, offset_s=20)])
    slow.policy = "slow"
    report = build_report({}, [quick, slow])
    pair = report["ratios"]["quick/slow"]
    assert pair["jobs_finished"] is None  # slow finished none: no ratio
    assert (pair["jct_mean_s_same_jobs"], pair["same_jobs_finished"]) == (None, 0)
    report = build_report({}, [quick, quick])
    assert report["ratios"]["quick/quick"]["jct_mean_s_same_jobs"] == 1.0
