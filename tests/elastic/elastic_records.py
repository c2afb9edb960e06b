"""Shared by the elastic tests: the exactly-once check and torchrun launches."""

import json
import os
import subprocess
import sys
from pathlib import Path

from exactly_once import coverage_problems, read_records  # noqa: F401 (imported from here)

from interstice.ports import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def worker_env(**extra: str) -> dict[str, str]:
    """A clean environment for example runs: one thread per process, no INTERSTICE_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERSTICE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    return env


def torchrun(
    nproc: int,
    script: str,
    *args: str,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
):
    """Start ``examples/<script>`` under ``torchrun`` (c10d rendezvous on a free local port),
    under ``prefix`` when given (e.g. ``("timeout", "-s", "TERM", "600")``)."""
    command = [
        *prefix, sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
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


def assert_same_models(path: Path, reference: Path, **tolerance: float) -> None:
    """The state dicts saved at ``path`` and ``reference`` hold the same tensors, within
    ``tolerance`` (``torch.testing.assert_close``'s ``rtol``/``atol``)."""
    import torch  # the helpers above run without torch

    saved, expected = torch.load(path), torch.load(reference)
    assert saved.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(
            saved[name], tensor, **tolerance, msg=lambda message, name=name: f"{name}: {message}"
        )
