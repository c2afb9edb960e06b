"""The files one job's workers and their node agent share on the node: the run directory.

The agent and its workers talk through a few small files in ``<workdir>/<job_id>/`` rather
than a socket, so either side may restart without the other noticing:

- ``stop``: created by the agent to ask the workers to checkpoint and exit (a rescale, a
  stop command, a preemption); removed by the agent before it launches a new generation.
- ``status-<local_rank>.json``: written atomically by each worker after every step: what the
  agent heartbeats to the service (step, world size, samples/s, samples done).
- ``steps-<node>-<local_rank>.jsonl``: one line per optimizer step (step, world size, rank,
  time) and one per exit, appended by each worker; the end-to-end test reads it.
"""

import json
import os
from pathlib import Path
from typing import Any

STOP_FILE = "stop"


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as JSON to ``path`` so a reader never sees a partial file.

    Args:
        path: destination file; its folder must exist.
        payload: JSON-serialisable mapping.
    """
    tmp_path = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp_path.write_text(json.dumps(payload))
    os.replace(tmp_path, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON mapping in ``path``, or None when it is absent or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def status_path(run_dir: Path, local_rank: int) -> Path:
    """Where the worker of ``local_rank`` writes its status."""
    return run_dir / f"status-{local_rank}.json"


def steps_path(run_dir: Path, node: str, local_rank: int) -> Path:
    """Where the worker of ``local_rank`` on ``node`` appends its per-step log."""
    return run_dir / f"steps-{node}-{local_rank}.jsonl"


def read_statuses(run_dir: Path) -> list[dict[str, Any]]:
    """Every readable worker status in ``run_dir``, in local-rank order."""
    found = (read_json(path) for path in sorted(run_dir.glob("status-*.json")))
    return [status for status in found if status is not None]


def json_line(payload: dict[str, Any]) -> str:
    """``payload`` as one JSON line (for append-only logs)."""
    return json.dumps(payload) + "\n"
