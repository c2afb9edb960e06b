"""A run stopped by signals to its whole process group saves, and the next run resumes from
that checkpoint, never beside the workers still saving it (real ``torchrun``, CPU, gloo).

GNU ``timeout`` (as the README runs the example), Slurm and process managers signal a whole
process group: ``torchrun`` gets SIGTERM more than once, the second interrupting its own
shutdown, which then sends its workers SIGTERM again and exits while they may still be
saving. Timeline of the main test: a ``torchrun --nproc-per-node 2`` in a process group of
its own trains digits; after 3,000 recorded samples its group gets SIGTERM; once torchrun
has signalled its workers, they are held (SIGSTOP: a loaded machine, where stopping takes
long) and the group gets SIGTERM again, so torchrun signals them a second time while they
stop; they go on (SIGCONT); as soon as torchrun has exited, the same command starts at
``--nproc-per-node 3`` and trains to the budget. Every sample index must be trained exactly
once across both runs.
"""

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from elastic_records import EXAMPLES, coverage_problems, read_records, worker_env
from interstice.elastic import lock
from polling import wait_until

from interstice.ports import free_port

pytestmark = pytest.mark.slow

DIGITS_TRAIN_LEN = 1437  # 80 % of scikit-learn's 1,797 digits
TOTAL_SAMPLES = 8000  # 125 steps of 64: five epochs and a part
STOP_AFTER_SAMPLES = 3000
RUN_TIMEOUT_S = 300.0  # a run on a loaded 2-core machine, imports included


def start(nproc: int, folder: Path, name: str, records: Path) -> subprocess.Popen:
    """``torchrun --nproc-per-node NPROC examples/train_digits.py`` in a process group of
    its own (as ``timeout`` runs it), its output in ``folder/NAME.log``."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
        str(EXAMPLES / "train_digits.py"), "--checkpoint-dir", str(folder / "checkpoints"),
        "--record-samples", str(records), "--total-samples", str(TOTAL_SAMPLES),
    ]  # fmt: skip
    with (folder / f"{name}.log").open("w") as log:
        return subprocess.Popen(
            command, env=worker_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def signalled_workers(log: Path, nproc: int, rounds: int) -> list[int] | None:
    """The pids of the ``nproc`` workers once torchrun's ``log`` says it sent each of them
    SIGTERM ``rounds`` times; None before."""
    pids = Counter(re.findall(r"Sending process (\d+) closing signal SIGTERM", log.read_text()))
    if len(pids) < nproc or min(pids.values()) < rounds:
        return None
    return [int(pid) for pid in pids]


def result_line(log: Path) -> dict:
    """The JSON line rank 0 printed last in ``log``."""
    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    assert lines, f"no result line in {log}:\n{log.read_text()[-3000:]}"
    return json.loads(lines[-1])


def test_a_group_signalled_twice_saves_and_the_next_run_resumes_from_it(tmp_path: Path) -> None:
    records = tmp_path / "records"
    first = start(2, tmp_path, "first", records)
    wait_until(
        lambda: len(read_records(records)) >= STOP_AFTER_SAMPLES,
        RUN_TIMEOUT_S,
        f"{STOP_AFTER_SAMPLES} samples recorded",
        interval_s=0.1,
        running=lambda: first.poll() is None,
    )
    first_log = tmp_path / "first.log"
    os.killpg(first.pid, signal.SIGTERM)
    workers = wait_until(
        lambda: signalled_workers(first_log, 2, rounds=1),
        60,
        "torchrun signalled its 2 workers",
        interval_s=0.01,
        running=lambda: first.poll() is None,
    )
    time.sleep(0.02)  # their handlers ran: the next SIGTERM is a second one, not merged
    for pid in workers:  # a loaded machine: they are slow to finish their steps and save
        os.kill(pid, signal.SIGSTOP)
    os.killpg(first.pid, signal.SIGTERM)
    wait_until(
        lambda: signalled_workers(first_log, 2, rounds=2),
        60,
        "torchrun signalled its workers again",
        running=lambda: first.poll() is None,
    )
    for pid in workers:
        os.kill(pid, signal.SIGCONT)
    first.wait(timeout=60)

    second = start(3, tmp_path, "second", records)
    assert second.wait(timeout=RUN_TIMEOUT_S) == 0, (tmp_path / "second.log").read_text()[-3000:]

    stopped, finished = result_line(tmp_path / "first.log"), result_line(tmp_path / "second.log")
    assert (stopped["state"], stopped["stop_reason"]) == ("stopped", "signal"), stopped
    assert finished["state"] == "finished" and finished["world_sizes"] == [2, 3], finished
    pairs = read_records(records)
    assert len(pairs) == finished["samples"] >= TOTAL_SAMPLES
    complete_epochs = finished["samples"] // DIGITS_TRAIN_LEN
    assert coverage_problems(pairs, DIGITS_TRAIN_LEN, complete_epochs) == []


def test_a_run_waits_while_a_worker_of_an_earlier_run_holds_the_checkpoint_dir(
    tmp_path: Path,
) -> None:
    folder, records = tmp_path / "checkpoints", tmp_path / "records"
    folder.mkdir()
    earlier_worker = os.open(folder / lock.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(earlier_worker, fcntl.LOCK_SH)
    log = tmp_path / "run.log"
    command = [
        sys.executable, str(EXAMPLES / "train_digits.py"), "--checkpoint-dir", str(folder),
        "--record-samples", str(records), "--total-samples", "640",
    ]  # fmt: skip
    with log.open("w") as output:
        run = subprocess.Popen(command, env=worker_env(), stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_until(
            lambda: "waiting for the workers of an earlier run" in log.read_text(),
            RUN_TIMEOUT_S,
            "the run says what it waits for",
            running=lambda: run.poll() is None,
        )
        line = next(li for li in log.read_text().splitlines() if "earlier run" in li)
        assert str(os.getpid()) in line and str(folder / lock.LOCK_FILE) in line, line
        assert not records.exists(), "trained while an earlier run's worker lived"
    finally:
        os.close(earlier_worker)
    assert run.wait(timeout=RUN_TIMEOUT_S) == 0, log.read_text()[-3000:]
    assert result_line(log)["state"] == "finished"
    assert len(read_records(records)) == 640
