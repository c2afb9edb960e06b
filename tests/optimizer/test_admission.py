"""Capacity-based first-come-first-served admission."""

import pytest
from interstice.optimizer.admission import admit


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
