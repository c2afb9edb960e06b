"""Progress reports: what the node agent heartbeats to the service, and the job's metrics.

:func:`report` writes, at most once per :data:`REPORT_INTERVAL_S` (a report whose ``state``
is not ``"running"`` always, and the last held-back one at exit):

- every rank: ``progress-<local_rank>.json`` in ``INTERSTICE_RUN_DIR`` (atomic), the file the
  agent reads: ``{"rendezvous_id", "rank", "world_size", "nodes", "step", "samples",
  "samples_per_s", "loss", "metrics", "state", "time", "first_step", "resumed_time"}``.
  ``first_step`` is the step of this process's first written report, ``resumed_time``
  (``time.time()``, None until then) the time of its first written report beyond it: a process
  runs one generation, so this is where the generation's rescale cost ends (docs/concepts.md);
  the agent passes both on, so the service measures the cost on the workers' clock;
- rank 0: one line appended to ``<job_dir>/metrics.jsonl``: ``{"time", "step", "samples",
  "loss", "samples_per_s", "world_size", ...metrics}``. Without a job dir (plain
  ``torchrun``) the line goes to ``<checkpoint_dir>/metrics.jsonl`` (the dir of the last
  :class:`~interstice.elastic.State` created with one, else ``INTERSTICE_CHECKPOINT_DIR``),
  else nowhere (see :func:`interstice.elastic.env.output_dir`).

Reporting never raises on I/O trouble: it logs a warning and training goes on.
"""

import atexit
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from interstice.elastic import env, watchdog

from interstice import wire
from interstice.files import write_atomic

logger = logging.getLogger(__name__)

REPORT_INTERVAL_S = 1.0
STATES = ("running", "stopped", "finished")


class _Reporter:
    def __init__(self) -> None:
        self.written_at: float | None = None
        self.last_rate_point: tuple[float, int] | None = None
        self.pending: dict[str, Any] | None = None
        self.ctx: env.Context | None = None
        self.output_dir: Path | None = None
        self.first_step: int | None = None
        self.resumed_time: float | None = None
        atexit.register(self.flush)

    def submit(self, record: dict[str, Any]) -> bool:
        # Kept for the write at exit, after the process group is gone.
        self.ctx, self.output_dir = env.current(), env.output_dir()
        now = time.monotonic()
        due = self.written_at is None or now - self.written_at >= REPORT_INTERVAL_S
        if record["state"] == "running" and not due:
            self.pending = record
            return False
        self.write(record)
        return True

    def flush(self) -> None:
        if self.pending is not None:
            self.write(self.pending)

    def write(self, record: dict[str, Any]) -> None:
        self.pending = None
        self.written_at = time.monotonic()
        samples_per_s = None
        if self.last_rate_point is not None:
            then, samples_then = self.last_rate_point
            if record["time"] > then and record["samples"] >= samples_then:
                samples_per_s = (record["samples"] - samples_then) / (record["time"] - then)
        self.last_rate_point = (record["time"], record["samples"])
        if self.first_step is None:
            self.first_step = record["step"]
        elif self.resumed_time is None and record["step"] > self.first_step:
            self.resumed_time = record["time"]
        ctx = self.ctx
        progress = {
            "rendezvous_id": ctx.rendezvous_id,
            "rank": ctx.rank,
            "world_size": ctx.world_size,
            "nodes": ctx.nodes,
            **{k: record[k] for k in ("step", "samples", "loss", "metrics", "state", "time")},
            "samples_per_s": samples_per_s,
            "first_step": self.first_step,
            "resumed_time": self.resumed_time,
        }
        if ctx.run_dir is not None:
            path = wire.progress_path(ctx.run_dir, ctx.local_rank)
            _quietly(path, lambda: _write_new(path, _dumps(progress)))
        metrics_dir = self.output_dir
        if ctx.rank == 0 and metrics_dir is not None:
            line = {
                "time": record["time"],
                "step": record["step"],
                "samples": record["samples"],
                "loss": record["loss"],
                "samples_per_s": samples_per_s,
                "world_size": ctx.world_size,
                **record["metrics"],
            }
            path = wire.metrics_path(metrics_dir)
            _quietly(path, lambda: _append(path, _dumps(line) + b"\n"))


def _dumps(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, allow_nan=False).encode()


def _write_new(path: Path, payload: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, payload)


def _append(path: Path, line: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path, "ab") as file:
        file.write(line)


def _quietly(path: Path, action: Any) -> None:
    try:
        action()
    except OSError as error:
        logger.warning("could not write %s: %s", path, error)


_reporter: _Reporter | None = None


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def report(
    step: int, samples: int, loss: float | None = None, state: str = "running", **metrics: float
) -> bool:
    """Report this process's progress (rate-limited; see the module doc for the files).

    Args:
        step: optimizer steps done by the job (continues across rescales).
        samples: samples trained by the job (continues across rescales).
        loss: the last step's training loss (a non-finite value is reported as null).
        state: ``"running"``, or ``"stopped"``/``"finished"`` for the last report of a run
            (always written).
        **metrics: further scalar metrics, e.g. ``lr=0.01`` (non-finite ones become null).

    Returns:
        Whether the report was written now (False: held back by the rate limit; the last
        held-back report is written at exit).

    Raises:
        ValueError: ``state`` is not one of :data:`STATES`.

    Example:
        >>> from interstice import elastic
        >>> elastic.report(step=1, samples=64, loss=2.3, lr=0.1)
        True
        >>> elastic.report(step=2, samples=128, loss=2.2)  # within 1 s: held back
        False
    """
    global _reporter
    watchdog.disarm()
    if state not in STATES:
        raise ValueError(f"state must be one of {STATES}, got {state!r}")
    if _reporter is None:
        _reporter = _Reporter()
    record = {
        "step": int(step),
        "samples": int(samples),
        "loss": _finite(loss),
        "metrics": {name: _finite(value) for name, value in metrics.items()},
        "state": state,
        "time": time.time(),
    }
    return _reporter.submit(record)
