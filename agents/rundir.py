"""The files one job's workers and their node agent share on the node: the run directory.

The agent and its workers talk through a few small files in ``<workdir>/<job_id>/``
(``interstice.wire`` names them) rather than a socket, so either side may restart without the
other noticing:

- ``stop``: created by the agent to ask the workers to checkpoint and exit (a rescale, a
  stop command, a preemption; SIGTERM says the same); removed before a new generation.
- ``progress-<local_rank>.json``: written atomically by ``interstice.elastic.report`` at its
  report rate: what the agent heartbeats to the service. A script that never reports has
  none; the agent judges joining and ending from torch elastic itself, never from these.
- ``steps-<node>-<local_rank>.jsonl``: the built-in worker's step log, one line per optimizer
  step and one per exit (the end-to-end test reads it).
"""

import json
from pathlib import Path
from typing import Any

from interstice import wire


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON mapping in ``path``, or None when it is absent or unreadable."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def read_progress(run_dir: Path) -> list[dict[str, Any]]:
    """Every readable progress file in ``run_dir``, in local-rank order."""
    found = (read_json(path) for path in sorted(run_dir.glob(wire.PROGRESS_GLOB)))
    return [progress for progress in found if progress is not None]


def clear(run_dir: Path) -> None:
    """Remove the stop file and the last generation's progress before a new generation."""
    wire.stop_path(run_dir).unlink(missing_ok=True)
    for path in run_dir.glob(wire.PROGRESS_GLOB):
        path.unlink(missing_ok=True)


def steps_path(run_dir: Path, node: str, local_rank: int) -> Path:
    """Where the built-in worker of ``local_rank`` on ``node`` appends its step log."""
    return run_dir / f"steps-{node}-{local_rank}.jsonl"


def json_line(payload: dict[str, Any]) -> str:
    """``payload`` as one JSON line (for append-only logs)."""
    return json.dumps(payload) + "\n"
