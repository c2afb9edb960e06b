"""The embedded synthetic node-state trace: generated here, never measured.

``interstice demo`` replays it when the real Summit trace (:mod:`interstice.data`) is absent,
so that a fresh clone or an installed wheel runs with nothing else. It has the real trace's CSV
layout (:mod:`interstice.replay.trace`: ``timestamp,node,state``, every node's state at the
first timestamp, then one row per change, 10 s resolution) and is drawn to match the figures
published for the Summit trace (``shared/data/README.md``; BFTrainer, Liu et al.,
arXiv 2106.12091): idle intervals of median 475 s, 90th percentile 3,269 s and 99th
percentile 9,246 s, and 8.3 % of the nodes idle on average.

The model: each node alternates idle and busy intervals, independently of the others (an
alternating renewal process).

- Idle lengths are Weibull, ``x_p = scale · (−ln(1 − p))^(1/shape)``: the shape and scale are
  the least-squares fit of ``ln x_p`` against ``ln(−ln(1 − p))`` (a straight line) through
  the three published quantiles.
- Busy lengths have no published figure: they take the idle lengths' shape, scaled so that
  the mean idle length over the mean cycle is the published idle share.
- Every length is rounded to the trace's 10 s resolution, at least 10 s.
- Each node starts :data:`WARMUP_S` before the trace, so the first snapshot is the process's
  steady state rather than every node starting a fresh interval at once.

Unlike the real trace, neighbouring nodes are never freed or taken back together (no big
jobs), and no drain empties the machine.

Regenerate the shipped file (the same seed gives the same bytes)::

    python -m interstice.synthetic_trace --out interstice/traces/synthetic-node-state.csv.gz
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from math import gamma
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from interstice.data import SYNTHETIC_TRACE
from interstice.errors import fail
from interstice.replay.trace import HEADER, NodeTrace, load_trace

IDLE_QUANTILES_S = {0.5: 475.0, 0.9: 3269.0, 0.99: 9246.0}
"""Published idle-interval quantiles of the Summit trace, ``{p: seconds}``."""
IDLE_SHARE = 0.083
"""Published time-weighted mean share of idle nodes of the Summit trace."""
RESOLUTION_S = 10
"""Timestamps and lengths are multiples of this, as in the real trace."""
WARMUP_S = 2 * 86400
"""Each node's intervals start this long before the trace (see the module docstring)."""
START = np.datetime64("2021-02-10T00:00:00", "s")
"""The first timestamp (the real trace's first day)."""
NODES = 512
"""Nodes of the shipped trace: enough for the demo's best windows to hold 16 nodes with
usable reclaims at distinct moments, and for its 99th percentile to rest on ~90 intervals."""
DAYS = 3
"""Days of the shipped trace: about 70 one-hour windows for the demo to choose from."""
SEED = 0
"""Seed of the shipped trace."""


@dataclass(frozen=True)
class Weibull:
    """A Weibull distribution of interval lengths.

    Attributes:
        shape: ``k`` (< 1: heavier tail than exponential).
        scale_s: ``λ``, seconds.
    """

    shape: float
    scale_s: float

    def quantile(self, p: float) -> float:
        """``x_p = λ · (−ln(1 − p))^(1/k)``, seconds."""
        return self.scale_s * (-np.log1p(-p)) ** (1 / self.shape)

    @property
    def mean_s(self) -> float:
        """``λ · Γ(1 + 1/k)``, seconds."""
        return self.scale_s * gamma(1 + 1 / self.shape)


def fit_idle(quantiles_s: dict[float, float] = IDLE_QUANTILES_S) -> Weibull:
    """The Weibull whose quantiles fit ``quantiles_s`` (least squares on logs).

    Args:
        quantiles_s: ``{p: seconds}``, at least two, each ``p`` in (0, 1).

    Returns:
        The fit: ``ln x_p = ln λ + (1/k) · ln(−ln(1 − p))`` is a straight line.
    """
    p = np.array(list(quantiles_s))
    slope, intercept = np.polyfit(np.log(-np.log1p(-p)), np.log(list(quantiles_s.values())), 1)
    return Weibull(shape=1 / slope, scale_s=float(np.exp(intercept)))


def fit_busy(idle: Weibull, idle_share: float = IDLE_SHARE) -> Weibull:
    """Busy lengths of ``idle``'s shape whose mean gives ``idle_share`` of the time idle:
    ``mean_busy = mean_idle · (1 − share) / share``."""
    mean_s = idle.mean_s * (1 - idle_share) / idle_share
    return Weibull(idle.shape, mean_s / gamma(1 + 1 / idle.shape))


def generate(seed: int = SEED, nodes: int = NODES, days: int = DAYS) -> str:
    """The synthetic trace as CSV text (with the header, LF line ends).

    Args:
        seed: seeds numpy's default generator; the same seed gives the same text.
        nodes: how many nodes (``synth001``, ...).
        days: the trace's length, days.

    Raises:
        ValueError: ``nodes`` or ``days`` < 1.
    """
    if nodes < 1 or days < 1:
        raise ValueError(f"nodes and days must be >= 1, got {nodes} and {days}")
    idle, busy = fit_idle(), fit_busy(fit_idle())
    rng = np.random.default_rng(seed)
    end_s = days * 86400
    width = len(str(nodes))
    rows: list[tuple[int, str, str]] = []
    end_row: tuple[int, str, str] | None = None  # no change: marks the trace's end
    for node in (f"synth{i:0{width}d}" for i in range(1, nodes + 1)):
        at_s, is_idle = -WARMUP_S, bool(rng.random() < IDLE_SHARE)
        while True:
            law = idle if is_idle else busy
            next_s = at_s + max(RESOLUTION_S, round(law.scale_s * rng.weibull(law.shape), -1))
            if next_s > 0:  # the interval at the start (row at 0), or one that starts later
                rows.append((max(at_s, 0), node, "idle" if is_idle else "busy"))
            if next_s >= end_s:
                break
            at_s, is_idle = int(next_s), not is_idle
        end_row = end_row or (end_s, node, rows[-1][2])
    rows.append(end_row)
    rows.sort(key=lambda row: row[0])  # stable: per time, in node order
    lines = [",".join(HEADER)]
    lines += [f"{START + np.timedelta64(t, 's')},{node},{state}" for t, node, state in rows]
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> None:
    """Write ``text`` gzip-compressed with no file name or time in the header, so the same
    text gives the same bytes."""
    with path.open("wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(text.encode())


@dataclass(frozen=True)
class Figures:
    """What a node-state trace measures against the published figures.

    Attributes:
        idle_quantiles_s: ``{p: seconds}`` of its completed idle intervals, for each ``p``
            of :data:`IDLE_QUANTILES_S`.
        idle_share: time-weighted mean share of its nodes idle.
        idle_intervals: how many completed idle intervals it has.
    """

    idle_quantiles_s: dict[float, float]
    idle_share: float
    idle_intervals: int


def measure(trace: NodeTrace) -> Figures:
    """The figures of ``trace`` (intervals still open at either end are left out of the
    quantiles, counted in the idle share)."""
    _, lengths_s = trace.idle_intervals()
    quantiles = {p: float(np.quantile(lengths_s, p)) for p in IDLE_QUANTILES_S}
    # The number of idle nodes as a step function: +1/-1 at each change of state.
    n = len(trace.node_names)
    node = np.concatenate([np.arange(n), trace.change_node])
    at_s = np.concatenate([np.zeros(n, dtype=np.int64), trace.change_time_s])
    idle = np.concatenate([trace.initial_idle, trace.change_idle]).astype(np.int64)
    order = np.lexsort((at_s, node))
    node, at_s, idle = node[order], at_s[order], idle[order]
    step = np.where(np.append(True, node[1:] != node[:-1]), idle, np.diff(idle, prepend=0))
    by_time = np.argsort(at_s, kind="stable")
    idle_count = np.cumsum(step[by_time])
    held_s = np.diff(np.append(at_s[by_time], trace.duration_s))
    share = float((idle_count * held_s).sum() / (n * trace.duration_s))
    return Figures(quantiles, share, len(lengths_s))


def main(
    out: Annotated[Path, typer.Option(help="Where to write the gzip CSV.")] = SYNTHETIC_TRACE,
    seed: Annotated[int, typer.Option(help="Seeds the draw.")] = SEED,
    nodes: Annotated[int, typer.Option(help="How many nodes, 1..100000.")] = NODES,
    days: Annotated[int, typer.Option(help="The trace's length, days, 1..60.")] = DAYS,
) -> None:
    """Write a synthetic node-state trace fitted to the Summit trace's published figures,
    and print its own figures against them."""
    if not 1 <= nodes <= 100_000:
        fail(f"--nodes must be in 1..100000, got {nodes}")
    if not 1 <= days <= 60:
        fail(f"--days must be in 1..60, got {days}")
    try:
        write(out, generate(seed, nodes, days))
    except OSError as exc:
        fail(f"--out {out}: {exc.strerror or exc}")
    figures = measure(load_trace(out))
    for p, target_s in IDLE_QUANTILES_S.items():
        got_s = figures.idle_quantiles_s[p]
        typer.echo(f"idle p{p * 100:g}: {got_s:.0f} s (published {target_s:.0f} s)")
    typer.echo(f"idle share: {figures.idle_share:.2%} (published {IDLE_SHARE:.1%})")
    typer.echo(f"{out}: {out.stat().st_size} bytes, {figures.idle_intervals} idle intervals")


if __name__ == "__main__":
    typer.run(main)
