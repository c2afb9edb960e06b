"""The node-state trace loader: the real file's counts, the window cut, bad files."""

import csv
import gzip
from pathlib import Path

import numpy as np
import pytest
from interstice.replay.trace import load_trace

from interstice import data


def test_real_trace_gives_every_node_then_846856_changes(bftrainer_dir: Path, real_inputs):
    trace = real_inputs.trace
    with gzip.open(bftrainer_dir / data.TRACE_FILE, "rt", newline="") as handle:
        lines = handle.read().splitlines()[1:]
    # csv parses the rows checked field by field; of the other 846,000, only the times
    snapshot, changes = list(csv.reader(lines[:4734])), lines[4734:]
    assert {r[0] for r in snapshot} == {"2021-02-10T00:08:52"}
    assert sorted(r[1] for r in snapshot) == trace.node_names.tolist()
    idle_now = {r[1] for r in snapshot if r[2] == "idle"}
    assert set(trace.node_names[trace.initial_idle].tolist()) == idle_now
    assert len(trace.change_time_s) == len(changes) == 846_856
    assert str(trace.start) == "2021-02-10T00:08:52"
    assert str(trace.end) == "2021-02-24T22:19:29"
    assert len(np.unique(trace.change_time_s)) == len({r.partition(",")[0] for r in changes})
    k = 123_456  # one change, checked field by field against the file
    (change,) = csv.reader(changes[k : k + 1])
    assert trace.node_names[trace.change_node[k]] == change[1]
    assert trace.change_idle[k] == (change[2] == "idle")
    assert trace.start + np.timedelta64(int(trace.change_time_s[k]), "s") == np.datetime64(
        change[0]
    )


def test_real_idle_intervals_match_the_data_readme(real_inputs):
    _, length_s = real_inputs.trace.idle_intervals()
    assert 423_000 < len(length_s) < 424_000  # "about 423,500" (open ones left out)
    assert np.percentile(length_s, [50, 90, 99]).tolist() == [475.0, 3269.0, 9246.0]


def _random_trace(rng: np.random.Generator, n_nodes: int, n_rows: int) -> str:
    lines = ["timestamp,node,state"]
    for node in range(n_nodes):
        lines.append(f"2021-02-01T00:00:00,x{node},{rng.choice(['idle', 'busy'])}")
    t = 0
    for _ in range(n_rows):
        t += int(rng.choice([0, 0, 10, 30]))  # several rows per timestamp, restatements too
        stamp = np.datetime64("2021-02-01T00:00:10") + np.timedelta64(t, "s")
        lines.append(f"{stamp},x{rng.integers(n_nodes)},{rng.choice(['idle', 'busy'])}")
    return "\r\n".join(lines) + "\r\n"


@pytest.mark.parametrize("seed", range(5))
def test_window_matches_replaying_rows_one_by_one(tmp_path: Path, seed: int):
    rng = np.random.default_rng(seed)
    path = tmp_path / "trace.csv.gz"
    text = _random_trace(rng, n_nodes=6, n_rows=60)
    path.write_bytes(gzip.compress(text.encode()))
    trace = load_trace(path)
    rows = [r.split(",") for r in text.split("\r\n")[1:-1]]
    times = [(np.datetime64(r[0]) - trace.start) / np.timedelta64(1, "s") for r in rows]
    keep = np.array([1, 3, 4])
    start_s, end_s = float(rng.integers(0, 200)), 10_000.0

    def state_at(t_s: float, inclusive: bool) -> dict[str, bool]:
        state = {}
        for (_, node, s), t in zip(rows, times, strict=True):
            if t < t_s or (inclusive and t == t_s):
                state[node] = s == "idle"
        return state

    window = trace.window(start_s, end_s, keep)
    names = window.node_names.tolist()
    assert names == [f"x{k}" for k in keep]
    expected = state_at(start_s, inclusive=True)
    assert window.initial_idle.tolist() == [expected[n] for n in names]
    idle = window.initial_idle.copy()
    for event, t_s in enumerate(window.event_time_s):
        nodes, to_idle = window.changes(event)
        idle[nodes] = to_idle
        expected = state_at(start_s + t_s, inclusive=True)
        assert idle.tolist() == [expected[n] for n in names]
    assert np.all(np.diff(window.event_time_s) > 0) and np.all(window.event_time_s > 0)


def test_unsorted_rows_are_sorted_stably(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp,node,state\n2021-02-01T00:00:00,a,busy\n2021-02-01T00:00:00,b,busy\n"
        "2021-02-01T00:00:20,a,idle\n2021-02-01T00:00:10,b,idle\n2021-02-01T00:00:10,b,busy\n"
    )
    trace = load_trace(path)
    assert trace.change_time_s.tolist() == [10, 10, 20]
    assert trace.change_idle.tolist() == [True, False, True]  # b's two rows keep their order


GOOD_HEAD = "timestamp,node,state\n2021-02-01T00:00:00,a,busy\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("time,node,state\n2021-02-01T00:00:00,a,busy\n", "header must be timestamp,node,state"),
        (GOOD_HEAD + "2021-02-01T00:00:10,a\n", "line 3: expected 3 fields, got 2"),
        (GOOD_HEAD + "yesterday,a,idle\n", "line 3: bad timestamp 'yesterday'"),
        (
            GOOD_HEAD + "2021-02-01T00:00:10,a,down\n",
            "line 3: state 'down' is neither idle nor busy",
        ),
        (GOOD_HEAD + "2021-02-01T00:00:10,b,idle\n", "node 'b' has no state at the first"),
        (GOOD_HEAD, "every row has the same timestamp"),
        ("timestamp,node,state\n", "no rows"),
    ],
)
def test_bad_trace_names_the_problem(tmp_path: Path, text: str, message: str):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_trace(path)


def test_corrupt_gzip_is_a_value_error(tmp_path: Path):
    path = tmp_path / "t.csv.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="not a gzip file"):
        load_trace(path)


def test_idle_intervals_of_a_hand_made_trace(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp,node,state\n"
        "2021-02-01T00:00:00,a,idle\n2021-02-01T00:00:00,b,busy\n"
        "2021-02-01T00:00:30,a,idle\n"  # a restatement: a stays idle since 0
        "2021-02-01T00:00:50,a,busy\n"  # a: idle 0..50
        "2021-02-01T00:01:00,b,idle\n2021-02-01T00:01:40,b,busy\n"  # b: idle 60..100
        "2021-02-01T00:02:00,a,idle\n"  # a: still idle at the end: left out
    )
    end_s, length_s = load_trace(path).idle_intervals()
    assert end_s.tolist() == [50.0, 100.0]
    assert length_s.tolist() == [50.0, 40.0]
