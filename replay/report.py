"""A replay's outputs: ``report.json`` (figures per policy, ratios) and ``report.png``.

The figures are those of :mod:`interstice.replay.simulator`'s docstring: efficiency (goodput
over dedicated samples, BFTrainer's headline metric, arXiv 2106.12091), utilization
(allocated over idle node-seconds), samples, goodput, jobs finished, rescales, preemptions, and
the solver's time per solve and statuses.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from interstice.replay.simulator import ReplayResult

RATIO_FIGURES = ("goodput_samples", "samples_trained", "efficiency", "utilization")


def summarize(result: ReplayResult) -> dict[str, Any]:
    """The figures of one replay.

    Args:
        result: one policy's replay.

    Returns:
        A JSON-ready mapping: ``efficiency`` and ``utilization`` (fractions),
        ``samples_trained``, ``goodput_samples``, ``dedicated_samples`` (samples),
        ``goodput_samples_per_s``, node-seconds, job counts, ``last_finish_s`` (when the last
        finished job finished) and ``mean_completion_s`` (finish minus arrival, over finished
        jobs; seconds of simulated time), ``rescales``, ``preemptions``,
        solve counts, ``solve_time_s`` and ``solve_wall_s`` percentiles (seconds),
        ``statuses`` and ``replay_wall_s``.
    """
    jobs = result.jobs
    goodput = sum(rec.goodput for rec in jobs)
    finished = [rec for rec in jobs if rec.finished_s is not None]
    dedicated = sum(rec.dedicated_samples for rec in jobs)
    return {
        "efficiency": goodput / dedicated if dedicated else None,
        "utilization": (
            result.allocated_node_s / result.idle_node_s if result.idle_node_s else None
        ),
        "samples_trained": sum(rec.samples for rec in jobs),
        "goodput_samples": goodput,
        "dedicated_samples": dedicated,
        "goodput_samples_per_s": goodput / result.duration_s,
        "idle_node_s": result.idle_node_s,
        "allocated_node_s": result.allocated_node_s,
        "jobs_arrived": len(jobs),
        "jobs_admitted": sum(rec.admitted_s is not None for rec in jobs),
        "jobs_finished": len(finished),
        "last_finish_s": max((rec.finished_s for rec in finished), default=None),
        "mean_completion_s": (
            sum(rec.finished_s - rec.arrival_s for rec in finished) / len(finished)
            if finished
            else None
        ),
        "rescales": sum(rec.rescales for rec in jobs),
        "preemptions": sum(rec.preemptions for rec in jobs),
        "solves": result.solves,
        "skipped_solves": result.skipped_solves,
        "deferred_solves": result.deferred_solves,
        "solve_time_s": _percentiles(result.solve_times_s),
        "solve_wall_s": _percentiles(result.solve_wall_s),
        "statuses": dict(sorted(result.statuses.items())),
        "replay_wall_s": result.wall_s,
    }


def _percentiles(values_s: list[float]) -> dict[str, float | None]:
    if not values_s:
        return {"p50": None, "p99": None, "max": None, "total": 0.0}
    values = np.asarray(values_s)
    return {
        "p50": float(np.percentile(values, 50)),
        "p99": float(np.percentile(values, 99)),
        "max": float(values.max()),
        "total": float(values.sum()),
    }


def build_report(settings: dict[str, Any], results: list[ReplayResult]) -> dict[str, Any]:
    """The whole report: the settings, each policy's figures, the first policy's ratios.

    Args:
        settings: what the replay ran on (window, files, options), JSON-ready.
        results: the chosen policy's replay first, then the baselines'.

    Returns:
        ``{"settings", "policies": {name: figures}, "ratios": {"<main>/<baseline>": {figure:
        ratio}}}``; a ratio is ``None`` where the baseline's figure is 0 or undefined.
    """
    figures = {result.policy: summarize(result) for result in results}
    main = results[0].policy
    ratios = {}
    for baseline in results[1:]:
        ratios[f"{main}/{baseline.policy}"] = {
            name: _ratio(figures[main][name], figures[baseline.policy][name])
            for name in RATIO_FIGURES
        }
    return {"settings": settings, "policies": figures, "ratios": ratios}


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def write_json(report: dict[str, Any], path: Path) -> None:
    """Write ``report`` as indented JSON."""
    path.write_text(json.dumps(report, indent=2) + "\n")


def plot(results: list[ReplayResult], window_start: datetime, path: Path) -> None:
    """Draw ``report.png``: idle and allocated nodes, cumulative goodput, per-job progress.

    Args:
        results: the chosen policy's replay first, then the baselines'.
        window_start: wall-clock time of simulated t = 0.
        path: the PNG to write.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def clock(times_s: list[float] | np.ndarray) -> list[datetime]:
        return [window_start + timedelta(seconds=float(t)) for t in times_s]

    fig, (nodes_ax, goodput_ax, jobs_ax) = plt.subplots(
        3, 1, figsize=(12, 11), sharex=True, gridspec_kw={"height_ratios": [3, 2, 3]}
    )
    main = results[0]
    nodes_ax.fill_between(
        clock(main.timeline_s), main.timeline_idle, step="post", color="0.85", label="idle nodes"
    )
    for result in results:
        times = clock(result.timeline_s)
        nodes_ax.step(
            times,
            result.timeline_allocated,
            where="post",
            lw=0.8,
            zorder=3 if result is main else 2,  # the chosen policy on top of the baselines
            label=f"allocated ({result.policy})",
        )
        goodput_ax.plot(
            times, np.asarray(result.timeline_goodput) / 1e9, lw=1.2, label=result.policy
        )
    nodes_ax.set_ylabel("nodes")
    nodes_ax.set_title("Idle nodes of the trace and nodes allocated to elastic jobs")
    nodes_ax.legend(loc="upper right", fontsize=8)
    goodput_ax.set_ylabel("goodput (10^9 samples)")
    goodput_ax.set_title("Cumulative goodput")
    goodput_ax.legend(loc="upper left", fontsize=8)

    models = sorted({rec.spec.model for rec in main.jobs})
    colors = dict(zip(models, plt.cm.tab10.colors, strict=False))
    for rec in main.jobs:
        if len(rec.progress_points) < 2:
            continue
        times_s, goodput = zip(*rec.progress_points, strict=True)
        jobs_ax.plot(
            clock(times_s),
            np.asarray(goodput) / rec.spec.total_samples,
            lw=0.6,
            alpha=0.7,
            color=colors[rec.spec.model],
        )
    for model in models:
        jobs_ax.plot([], [], color=colors[model], label=model)
    jobs_ax.set_ylabel("fraction of total_samples")
    jobs_ax.set_ylim(0, 1.02)
    jobs_ax.set_title(f"Per-job progress ({main.policy})")
    jobs_ax.legend(loc="lower right", fontsize=8, ncol=4)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
