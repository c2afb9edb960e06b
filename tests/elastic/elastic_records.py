"""Shared by the elastic tests: the exactly-once check and torchrun launches."""

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from interstice.ports import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def coverage_problems(
    pairs: Iterable[tuple[int, int]], dataset_len: int, complete_epochs: int
) -> list[str]:
    """What breaks exactly-once in trained ``(epoch, index)`` pairs (empty: nothing).

    Epochs ``0 .. complete_epochs - 1`` must hold every index exactly once; any later
    epoch (the partial one in progress) each index at most once.
    """
    counts = Counter(pairs)
    problems = [f"epoch {e} index {i} trained {n} times" for (e, i), n in counts.items() if n > 1]
    for epoch in range(complete_epochs):
        missing = [i for i in range(dataset_len) if (epoch, i) not in counts]
        if missing:
            problems.append(
                f"epoch {epoch}: {len(missing)} indices never trained, e.g. {missing[:5]}"
            )
    return problems


def read_records(folder: Path) -> list[tuple[int, int]]:
    """Every ``epoch index`` line of every record file in ``folder``."""
    pairs = []
    for path in sorted(folder.glob("*.txt")):
        for line in path.read_text().splitlines():
            epoch, index = line.split()
            pairs.append((int(epoch), int(index)))
    return pairs


def worker_env(**extra: str) -> dict[str, str]:
    """A clean environment for example runs: one thread per process, no INTERSTICE_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERSTICE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    return env


def torchrun(nproc: int, script: str, *args: str, env: dict[str, str] | None = None):
    """Start ``examples/<script>`` under ``torchrun`` (c10d rendezvous on a free local port)."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
        str(EXAMPLES / script), *args,
    ]  # fmt: skip
    return subprocess.Popen(
        command, env=env or worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def result_of(process: subprocess.Popen, timeout_s: float = 180) -> dict:
    """The JSON line an example printed (rank 0), after the process ended."""
    stdout, stderr = process.communicate(timeout=timeout_s)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result line (exit {process.returncode}):\n{stdout}\n{stderr[-3000:]}"
    return json.loads(lines[-1])
