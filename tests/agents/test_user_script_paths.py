"""The shared facts a user's job relies on: placeholders, the job dir's log layout, atomic
writes and free ports (``interstice.wire``, ``interstice.files``, ``interstice.ports``)."""

import json
import socket
from pathlib import Path

from interstice import files, ports, wire


def test_placeholders_are_replaced_inside_arguments_and_other_braces_stay() -> None:
    values = {"job_id": "j-3", "job_dir": "/c/j-3", "total_samples": 1000, "unknown": "x"}
    argv = ["train.py", "--out={job_dir}/final", "{job_id}-{job_id}", '{"lr": 1}', "{unknown}"]
    assert wire.expand_placeholders(argv, values) == [
        "train.py",
        "--out=/c/j-3/final",
        "j-3-j-3",
        '{"lr": 1}',
        "{unknown}",  # not a placeholder of the contract
    ]


def test_rank_log_files_are_listed_oldest_generation_first(tmp_path: Path) -> None:
    for rendezvous_id in ("j-3-g10", "j-3-g9", "j-3-g2"):
        path = wire.rank_log_path(tmp_path, rendezvous_id, 1)
        path.parent.mkdir(parents=True)
        path.write_text(rendezvous_id)
    wire.rank_log_path(tmp_path, "j-3-g11", 0).parent.mkdir(parents=True)  # no rank 1 there
    assert [p.read_text() for p in wire.rank_log_files(tmp_path, 1)] == [
        "j-3-g2",
        "j-3-g9",
        "j-3-g10",
    ]
    assert wire.rank_log_files(tmp_path / "nothing", 0) == []
    assert wire.generation_of("j-3-g10") == 10 and wire.generation_of("j-3") is None


def test_job_dir_layout() -> None:
    job_dir = wire.job_dir("/c", "j-3")
    assert job_dir == Path("/c/j-3")
    assert wire.checkpoint_dir(job_dir) == Path("/c/j-3/checkpoints")
    assert wire.final_dir(job_dir) == Path("/c/j-3/final")
    assert wire.metrics_path(job_dir) == Path("/c/j-3/metrics.jsonl")
    assert wire.rank_log_path(job_dir, "j-3-g2", 5) == Path("/c/j-3/logs/j-3-g2/rank-5.log")
    assert wire.progress_path("/w/j-3", 1) == Path("/w/j-3/progress-1.json")


def test_atomic_writes_replace_the_file_and_leave_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "progress-0.json"
    files.write_json_atomic(path, {"step": 1})
    files.write_atomic(path, b'{"step": 2}')
    assert json.loads(path.read_text()) == {"step": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["progress-0.json"]


def test_free_ports_are_distinct_and_bindable() -> None:
    found = ports.free_ports(3)
    assert len(set(found)) == 3
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports.free_port()))
