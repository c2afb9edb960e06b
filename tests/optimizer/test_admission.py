"""Capacity-based first-come-first-served admission."""

import pytest
from interstice.optimizer import ScalabilityPoint, ScalabilityTable
from interstice.optimizer.admission import admit, usable_nodes

# m: 100, 190, 270, 300 samples/s on 1, 2, 3, 4 nodes, parallel efficiency 1, 0.95, 0.9,
# 0.75; SPB depth 1 measured at 4 nodes: 400 samples/s worth 0.9 each = 360, efficiency 0.9;
# depth 2 derived (never counts): 4 nodes 800/s.
CURVE = ScalabilityTable(
    points=tuple(
        ScalabilityPoint(model="m", nodes=n, samples_per_s=r, spb_depth=d, **extra)
        for n, r, d, extra in [
            (1, 100.0, 0, {}),
            (2, 190.0, 0, {}),
            (3, 270.0, 0, {}),
            (4, 300.0, 0, {}),
            (4, 400.0, 1, {"progress_per_sample": 0.9}),
            (4, 800.0, 2, {"derived": True}),
        ]
    )
)


def test_admits_in_order_until_the_admitted_can_use_every_idle_node() -> None:
    # Active 32 usable; queue 64, 64, 64 on 100 idle nodes: 32 < 100 admit (96),
    # 96 < 100 admit (160), 160 >= 100 stop.
    assert admit([64, 64, 64], [32], idle_nodes=100) == 2
    # Exactly filling the pool stops admission: 40 + 60 = 100.
    assert admit([60, 1], [40], idle_nodes=100) == 1
    # The active jobs can already use every node: nobody is admitted.
    assert admit([8], [64, 64], idle_nodes=100) == 0
    # No idle node: nobody is admitted (they wait in order).
    assert admit([8, 8], [], idle_nodes=0) == 0
    # The whole queue when it cannot fill the pool.
    assert admit([8, 8, 8], [], idle_nodes=100) == 3


def test_max_active_jobs_caps_the_admitted_count_active_ones_included() -> None:
    assert admit([8, 8, 8], [], idle_nodes=100, max_active_jobs=2) == 2
    assert admit([8, 8, 8], [8, 8], idle_nodes=100, max_active_jobs=3) == 1
    assert admit([8, 8, 8], [8, 8, 8], idle_nodes=100, max_active_jobs=3) == 0


@pytest.mark.parametrize(
    ("queued", "active", "idle", "cap", "message"),
    [
        ([-1], [], 10, None, "node counts must be >= 0"),
        ([1], [], -1, None, "node counts must be >= 0"),
        ([1], [], 10, 0, "max_active_jobs must be >= 1, got 0"),
    ],
)
def test_bad_input_is_named(queued, active, idle, cap, message) -> None:
    with pytest.raises(ValueError, match=message):
        admit(queued, active, idle_nodes=idle, max_active_jobs=cap)


@pytest.mark.parametrize(
    ("min_efficiency", "nodes"),
    [(0.0, 4), (0.75, 4), (0.8, 4), (0.9, 4), (0.91, 2), (0.95, 2), (0.96, 1), (1.0, 1)],
)
def test_efficient_nodes_is_the_largest_count_at_the_efficiency(min_efficiency, nodes) -> None:
    # Depth 0: 1.0, 0.95, 0.9, 0.75 of the best 100/s per node; depth 1 (measured at 4 and
    # interpolated from 0 below: 90/s per node at every count) lifts 4 nodes to 0.9. The
    # derived depth 2 (200/s per node) neither counts as best nor lifts any count.
    assert CURVE.efficient_nodes("m", min_efficiency) == nodes


def test_efficient_nodes_names_bad_input() -> None:
    with pytest.raises(ValueError, match=r"min_efficiency must be in \[0, 1\], got 1.5"):
        CURVE.efficient_nodes("m", 1.5)
    with pytest.raises(KeyError, match="'x' is not in the scalability table"):
        CURVE.efficient_nodes("x", 0.9)


def test_usable_nodes_clamps_the_efficient_size_to_the_jobs_bounds() -> None:
    assert usable_nodes(CURVE, "m", 1, 8, idle_nodes=10, min_efficiency=0.95) == 2
    assert usable_nodes(CURVE, "m", 3, 8, idle_nodes=10, min_efficiency=0.95) == 3  # min
    assert usable_nodes(CURVE, "m", 1, 1, idle_nodes=10, min_efficiency=0.0) == 1  # max
    assert usable_nodes(CURVE, "m", 1, 64, idle_nodes=10, min_efficiency=0.0) == 4  # curve
    assert usable_nodes(CURVE, "m", 3, 8, idle_nodes=2, min_efficiency=0.0) == 0  # cannot start
