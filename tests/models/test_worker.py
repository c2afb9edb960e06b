"""The built-in worker under plain torchrun (no agent, no service): train, SIGTERM, resume.

Two ranks train until torchrun gets SIGTERM (what Slurm sends on preemption; torchrun passes
it to the workers): every rank stops after the same step and the checkpoint holds it. A run
at one rank resumes there: its step counter continues, the sampler continues at the next
unseen position, and at the budget it writes the final model.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from interstice.models.zoo import build_blocks

GLOBAL_BATCH = 7  # not a multiple of 2: the ranks' shares differ (4 and 3)
DATASET = 40
WAIT_S = 120


def clean_env() -> dict[str, str]:
    """This environment without any job's variables, one thread per worker (2 shared cores)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERSTICE_")}
    # The node name of the step logs (torchrun would take a --node flag for its own --node-rank).
    return {**env, "OMP_NUM_THREADS": "1", "INTERSTICE_NODE": "here"}


def worker(nproc: int, tmp_path: Path, parallelism: str, total_samples: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "interstice.agents.worker",
        *("--parallelism", parallelism),
        *("--global-batch-size", str(GLOBAL_BATCH), "--total-samples", str(total_samples)),
        *("--checkpoint-dir", str(tmp_path / "checkpoints"), "--run-dir", str(tmp_path / "run")),
        *("--dataset-size", str(DATASET)),
    ]


def log_lines(tmp_path: Path) -> list[dict]:
    lines = []
    for path in (tmp_path / "run").glob("steps-here-*.jsonl"):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(lines, key=lambda line: line["time"])


def steps_at(lines: list[dict], world_size: int) -> list[dict]:
    return [r for r in lines if r["event"] == "step" and r["world_size"] == world_size]


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("parallelism", ["dp", "splitbrain"])
def test_sigterm_checkpoints_and_a_smaller_world_resumes(tmp_path: Path, parallelism: str) -> None:
    first = subprocess.Popen(
        worker(2, tmp_path, parallelism, 10**6),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(),
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while len(steps_at(log_lines(tmp_path), 2)) < 2 * 4:  # 4 steps on each rank
            assert first.poll() is None, first.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "no 4 steps at world size 2"
            time.sleep(0.2)
        first.send_signal(signal.SIGTERM)
        output = first.communicate(timeout=WAIT_S)[0]
    finally:
        first.kill()
    exits = [r for r in log_lines(tmp_path) if r["event"] == "exit"]
    assert len(exits) == 2 and {r["outcome"] for r in exits} == {"stopped"}, output[-3000:]
    stopped_at = exits[0]["step"]
    assert exits[1]["step"] == stopped_at >= 4
    checkpoint = torch.load(tmp_path / "checkpoints" / "checkpoint.pt", weights_only=False)
    assert checkpoint["steps"] == stopped_at
    assert checkpoint["samples"] == stopped_at * GLOBAL_BATCH
    assert not (tmp_path / "checkpoints" / "final").exists()

    budget = (stopped_at + 3) * GLOBAL_BATCH
    second = subprocess.run(
        worker(1, tmp_path, parallelism, budget),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env=clean_env(),
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    lines = log_lines(tmp_path)
    assert [r["step"] for r in lines if r["event"] == "resume" and r["world_size"] == 1] == [
        stopped_at
    ]
    assert [r["step"] for r in steps_at(lines, 1)] == [
        stopped_at + 1,
        stopped_at + 2,
        stopped_at + 3,
    ]
    assert [r["outcome"] for r in lines if r["event"] == "exit"][-1] == "finished"
    final = torch.load(tmp_path / "checkpoints" / "checkpoint.pt", weights_only=False)
    assert (final["steps"], final["samples"]) == (stopped_at + 3, budget)
    # The sampler went on from the stop: position = every sample trained so far.
    assert final["sampler"]["epoch"] * DATASET + final["sampler"]["offset"] == budget
    # The final model is whole (SplitBrain's shards gathered) and loads into the plain model.
    weights = torch.load(tmp_path / "checkpoints" / "final" / "model.pt", weights_only=True)
    build_blocks("tinycnn").load_state_dict(weights)
