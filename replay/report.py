"""A replay's outputs: ``report.json`` (the trace's and each policy's figures, ratios),
``report.png`` and ``summary.png``.

The figures are those of :mod:`interstice.replay.simulator`'s docstring: efficiency (goodput
over dedicated samples, BFTrainer's headline metric, arXiv 2106.12091), utilization
(allocated over idle node-seconds), harvest (dedicated-node work over idle node-seconds),
samples, goodput, job completion and wait times, rescales, preemptions, and the solver's time
per solve and statuses.
"""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from interstice.replay.idle import PUBLISHED_QUANTILES_S, Reference
from interstice.replay.simulator import PAUSE_CAUSES, JobRecord, ReplayResult

RATIO_FIGURES = (
    "goodput_samples",
    "samples_trained",
    "harvest",
    "efficiency",
    "utilization",
    "jobs_finished",
    "jct_mean_s",
)

CDF_POINTS = 2000
"""The most points a hole-length CDF of :func:`plot_summary` is drawn with (a 13-inch figure
shows no more; every sorted length of Summit's 423,000 takes seconds to draw)."""


def summarize(result: ReplayResult) -> dict[str, Any]:
    """The figures of one replay.

    Args:
        result: one policy's replay.

    Returns:
        A JSON-ready mapping: ``efficiency`` and ``utilization`` (fractions),
        ``samples_trained``, ``goodput_samples``, ``dedicated_samples`` (samples),
        ``goodput_samples_per_s``, node-seconds, ``harvest`` (harvested over idle
        node-seconds), ``harvest_ceiling`` (the harvest of the same node counts with no
        rescale pause, i.e. at efficiency 1: what stays of 1 - ``harvest`` after every
        pause is won back is idle node time and the jobs' sub-linear scaling, which no
        forecast changes), ``idle_node_hours`` and ``harvested_node_hours``, job counts,
        ``last_finish_s`` (when the last finished job finished), ``jct_mean_s``,
        ``jct_p50_s``, ``jct_p95_s`` (job completion time: finish minus submission, over the
        finished jobs),
        ``wait_mean_s`` (submission to first node, over the jobs that got one),
        ``lost_samples`` (progress thrown away by kills: the rigid baseline's),
        ``efficiency_loss`` (per cause of a rescale pause,
        :data:`~interstice.replay.simulator.PAUSE_CAUSES`, the dedicated samples the paused
        nodes would have trained, over ``dedicated_samples``: 1 - ``efficiency`` is their
        sum, plus progress made at an SPB depth below the best one's and a rigid job's
        ``lost_samples``),
        ``rescales``, ``preemptions``, ``by_model`` (:func:`by_model`: where the node time
        went, per model), ``by_user`` (:func:`by_user`, empty without users), solve
        counts, ``forecast_solves`` (the solves that used forecasts) and
        ``forecast_coverage`` (at the end; ``None``: unknown or no forecasts),
        ``solve_time_s`` and ``solve_wall_s`` percentiles (seconds), ``statuses`` and
        ``replay_wall_s``.
    """
    jobs = result.jobs
    goodput = sum(rec.goodput for rec in jobs)
    finished = [rec for rec in jobs if rec.finished_s is not None]
    dedicated = sum(rec.dedicated_samples for rec in jobs)
    harvested_node_s = sum(_harvested_node_s(result, rec) for rec in jobs)
    ceiling_node_s = sum(_harvested_node_s(result, rec, rec.dedicated_samples) for rec in jobs)
    jct_s = np.array([rec.finished_s - rec.arrival_s for rec in finished])
    waits_s = [rec.first_node_s - rec.arrival_s for rec in jobs if rec.first_node_s is not None]
    return {
        "efficiency": goodput / dedicated if dedicated else None,
        "utilization": (
            result.allocated_node_s / result.idle_node_s if result.idle_node_s else None
        ),
        "samples_trained": sum(rec.samples for rec in jobs),
        "goodput_samples": goodput,
        "dedicated_samples": dedicated,
        "goodput_samples_per_s": goodput / result.duration_s,
        "harvest": harvested_node_s / result.idle_node_s if result.idle_node_s else None,
        "harvest_ceiling": ceiling_node_s / result.idle_node_s if result.idle_node_s else None,
        "idle_node_s": result.idle_node_s,
        "allocated_node_s": result.allocated_node_s,
        "idle_node_hours": result.idle_node_s / 3600,
        "harvested_node_hours": harvested_node_s / 3600,
        "harvested_node_hours_per_day": harvested_node_s / 3600 / (result.duration_s / 86400),
        "jobs_arrived": len(jobs),
        "jobs_admitted": sum(rec.admitted_s is not None for rec in jobs),
        "jobs_finished": len(finished),
        "last_finish_s": max((rec.finished_s for rec in finished), default=None),
        "jct_mean_s": float(jct_s.mean()) if finished else None,
        "jct_p50_s": float(np.percentile(jct_s, 50)) if finished else None,
        "jct_p95_s": float(np.percentile(jct_s, 95)) if finished else None,
        "wait_mean_s": sum(waits_s) / len(waits_s) if waits_s else None,
        "lost_samples": sum(rec.lost_goodput for rec in jobs),
        "efficiency_loss": {
            cause: sum(rec.pause_loss.get(cause, 0.0) for rec in jobs) / dedicated
            if dedicated
            else None
            for cause in PAUSE_CAUSES
        },
        "rescales": sum(rec.rescales for rec in jobs),
        "preemptions": sum(rec.preemptions for rec in jobs),
        "by_model": by_model(result),
        "by_user": by_user(result),
        "solves": result.solves,
        "skipped_solves": result.skipped_solves,
        "deferred_solves": result.deferred_solves,
        "forecast_solves": result.forecast_solves,
        "forecast_coverage": result.forecast_coverage,
        "solve_time_s": _percentiles(result.solve_times_s),
        "solve_wall_s": _percentiles(result.solve_wall_s),
        "statuses": dict(sorted(result.statuses.items())),
        "replay_wall_s": result.wall_s,
    }


def by_model(result: ReplayResult) -> dict[str, dict[str, float | int | None]]:
    """Where one replay's node time went, per model: the mix behind its totals.

    A policy's ``harvest`` and ``goodput_samples`` can rank two policies differently when
    they give their nodes to different models: a node-hour of AlexNet trains about 7 times
    the samples of a node-hour of DenseNet (the Summit table's best per-node rates), and
    counts the same in ``harvested_node_hours``. Likewise a policy's ``jct_mean_s``: on the
    all-node Summit windows AlexNet's jobs, which scale worst, run the longest, and a policy
    that holds them near the knee of their curve finishes the jobs later on average with the
    same node time (docs/history.md, "Where the JCT gap comes from").

    Args:
        result: one policy's replay.

    Returns:
        ``{model: {"allocated_node_hours", "harvested_node_hours", "goodput_samples",
        "jobs_arrived", "jobs_finished", "jct_mean_s"}}``, models sorted by name;
        ``allocated_node_hours`` integrates the timeline's allocated nodes of the model's
        jobs over the window (they sum to the replay's ``allocated_node_s`` / 3600),
        ``harvested_node_hours`` is the model's goodput over its best per-node rate, hours;
        ``jct_mean_s`` is the mean completion time of its finished jobs (finish minus
        submission), seconds, or ``None`` when none finished.
    """
    ends_s = np.append(result.timeline_s[1:], result.duration_s)
    spans_s = ends_s - np.asarray(result.timeline_s)
    figures: dict[str, dict[str, float | int | None]] = {
        model: {
            "allocated_node_hours": float(np.dot(counts, spans_s)) / 3600,
            "harvested_node_hours": 0.0,
            "goodput_samples": 0.0,
            "jobs_arrived": 0,
            "jobs_finished": 0,
        }
        for model, counts in sorted(result.timeline_by_model.items())
    }
    jct_s: dict[str, list[float]] = {model: [] for model in figures}
    for rec in result.jobs:
        part = figures[rec.spec.model]
        part["goodput_samples"] += rec.goodput
        part["harvested_node_hours"] += _harvested_node_s(result, rec) / 3600
        part["jobs_arrived"] += 1
        if rec.finished_s is not None:
            part["jobs_finished"] += 1
            jct_s[rec.spec.model].append(rec.finished_s - rec.arrival_s)
    for model, part in figures.items():
        part["jct_mean_s"] = float(np.mean(jct_s[model])) if jct_s[model] else None
    return figures


def by_user(result: ReplayResult) -> dict[str, dict[str, float | int | None]]:
    """What each user of the jobs file harvested (its ``user`` column): the fairness
    between users behind one replay's totals.

    Args:
        result: one policy's replay.

    Returns:
        ``{user: {"harvested_node_hours", "harvest", "goodput_samples", "jobs_arrived",
        "jobs_finished", "wait_mean_s", "jct_mean_s"}}``, users sorted by name, the jobs
        without a user left out (empty when no job has one): ``harvested_node_hours`` as in
        :func:`by_model`, ``harvest`` that over the window's idle node-hours (the users'
        harvests sum to the replay's), ``wait_mean_s`` the mean time from submission to a
        first node over the user's jobs that got one, ``jct_mean_s`` the mean completion
        time of its finished jobs (``None``: none did).
    """
    figures: dict[str, dict[str, float | int | None]] = {}
    waits_s: dict[str, list[float]] = {}
    jct_s: dict[str, list[float]] = {}
    for rec in sorted(result.jobs, key=lambda rec: rec.spec.user or ""):
        user = rec.spec.user
        if user is None:
            continue
        part = figures.setdefault(
            user,
            {"harvested_node_hours": 0.0, "goodput_samples": 0.0, "jobs_arrived": 0,
             "jobs_finished": 0},
        )  # fmt: skip
        part["harvested_node_hours"] += _harvested_node_s(result, rec) / 3600
        part["goodput_samples"] += rec.goodput
        part["jobs_arrived"] += 1
        if rec.finished_s is not None:
            part["jobs_finished"] += 1
            jct_s.setdefault(user, []).append(rec.finished_s - rec.arrival_s)
        if rec.first_node_s is not None:
            waits_s.setdefault(user, []).append(rec.first_node_s - rec.arrival_s)
    for user, part in figures.items():
        idle_h = result.idle_node_s / 3600
        part["harvest"] = part["harvested_node_hours"] / idle_h if idle_h else None
        part["wait_mean_s"] = float(np.mean(waits_s[user])) if user in waits_s else None
        part["jct_mean_s"] = float(np.mean(jct_s[user])) if user in jct_s else None
    return figures


def _harvested_node_s(result: ReplayResult, rec: JobRecord, progress: float | None = None) -> float:
    """One job's goodput (or ``progress``, samples) as dedicated-node work: the samples over
    its model's best per-node rate of progress, node-seconds (the numerator of ``harvest``;
    of ``harvest_ceiling`` with the job's dedicated samples)."""
    samples = rec.goodput if progress is None else progress
    return samples / result.best_progress_per_node_s[rec.spec.model]


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


def build_report(
    settings: dict[str, Any], results: list[ReplayResult], trace: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The whole report: the settings, the trace's figures, each policy's figures, the first
    policy's ratios.

    Args:
        settings: what the replay ran on (window, files, options), JSON-ready.
        results: the chosen policy's replay first, then the baselines'.
        trace: what the window offers (:func:`interstice.replay.idle.trace_figures`), or
            ``None``: no ``trace`` part.

    Returns:
        ``{"settings", "trace", "policies": {name: figures}, "ratios": {"<main>/<baseline>":
        {figure: ratio}}}``; a ratio is ``None`` where the baseline's figure is 0 or
        undefined. Each pair adds ``jct_mean_s_same_jobs`` (mean JCT over the jobs both
        finished, main over baseline) and ``same_jobs_finished`` (their count).
    """
    figures = {result.policy: summarize(result) for result in results}
    main = results[0].policy
    ratios = {}
    for baseline in results[1:]:
        pair = {
            name: _ratio(figures[main][name], figures[baseline.policy][name])
            for name in RATIO_FIGURES
        }
        pair.update(_common_jct(results[0], baseline))
        ratios[f"{main}/{baseline.policy}"] = pair
    head = {"settings": settings} | ({} if trace is None else {"trace": trace})
    return head | {"policies": figures, "ratios": ratios}


def _common_jct(main: ReplayResult, baseline: ReplayResult) -> dict[str, float | None]:
    """Mean JCT over the jobs both policies finished, main over baseline, and their count.

    ``jct_mean_s`` of a policy that finishes few jobs averages only its earliest, quickest
    ones; over the same jobs the two means compare like with like.
    """
    done = {
        rec.spec.job_id: rec.finished_s - rec.arrival_s
        for rec in main.jobs
        if rec.finished_s is not None
    }
    pairs = [
        (done[rec.spec.job_id], rec.finished_s - rec.arrival_s)
        for rec in baseline.jobs
        if rec.finished_s is not None and rec.spec.job_id in done
    ]
    mine, theirs = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    return {
        "jct_mean_s_same_jobs": mine / theirs if pairs and theirs else None,
        "same_jobs_finished": len(pairs),
    }


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def write_json(report: dict[str, Any], path: Path) -> None:
    """Write ``report`` as indented JSON."""
    path.write_text(json.dumps(report, indent=2) + "\n")


def plot(results: list[ReplayResult], window_start: datetime, path: Path, title: str) -> None:
    """Draw ``report.png``: nodes per model, cumulative goodput, per-job progress, JCT CDFs.

    Panels: the chosen policy's allocated nodes stacked per model against the trace's idle
    nodes (and every policy's total); each policy's cumulative goodput (10^9 samples of
    full-backprop progress); the chosen policy's per-job progress; each policy's
    distribution of job completion times (hours, finished jobs).

    Args:
        results: the chosen policy's replay first, then the baselines'.
        window_start: wall-clock time of simulated t = 0.
        path: the PNG to write.
        title: the figure's title (window, nodes, policy, weights).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def clock(times_s: list[float] | np.ndarray) -> list[datetime]:
        return [window_start + timedelta(seconds=float(t)) for t in times_s]

    fig = plt.figure(figsize=(12, 15))
    grid = fig.add_gridspec(4, 1, height_ratios=[3, 2, 2.5, 2.5])
    nodes_ax = fig.add_subplot(grid[0])
    goodput_ax = fig.add_subplot(grid[1], sharex=nodes_ax)
    jobs_ax = fig.add_subplot(grid[2], sharex=nodes_ax)
    cdf_ax = fig.add_subplot(grid[3])
    main = results[0]
    models = sorted(main.timeline_by_model)
    colors = dict(zip(models, plt.cm.tab10.colors, strict=False))
    times = clock(main.timeline_s)
    nodes_ax.fill_between(times, main.timeline_idle, step="post", color="0.88", label="idle nodes")
    nodes_ax.stackplot(
        times,
        *(main.timeline_by_model[model] for model in models),
        step="post",
        colors=[colors[model] for model in models],
        labels=[f"{model} ({main.policy})" for model in models],
        alpha=0.85,
    )
    nodes_ax.step(times, main.timeline_idle, where="post", color="0.55", lw=0.5)
    for result, style in zip(results[1:], ("--", ":", "-."), strict=False):
        nodes_ax.step(
            clock(result.timeline_s),
            result.timeline_allocated,
            where="post",
            color="black",
            ls=style,
            lw=0.7,
            label=f"allocated, all models ({result.policy})",
        )
    nodes_ax.set_ylabel("nodes")
    nodes_ax.set_title(f"Idle nodes and allocated nodes per model ({main.policy}, stacked)")
    nodes_ax.legend(loc="upper right", fontsize=7, ncol=2)
    for result in results:
        goodput_ax.plot(
            clock(result.timeline_s),
            np.asarray(result.timeline_goodput) / 1e9,
            lw=1.2,
            label=result.policy,
        )
    goodput_ax.set_ylabel("goodput (10^9 samples)")
    goodput_ax.set_title("Cumulative goodput: samples of full-backprop progress kept")
    goodput_ax.legend(loc="upper left", fontsize=8)

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
    jobs_ax.set_ylabel("fraction of total_samples")
    jobs_ax.set_ylim(0, 1.02)
    jobs_ax.set_title(f"Per-job progress ({main.policy}; colours as above)")
    plt.setp(nodes_ax.get_xticklabels() + goodput_ax.get_xticklabels(), visible=False)
    for label in jobs_ax.get_xticklabels():
        label.set_rotation(20)

    for result in results:
        jct_h = np.sort(
            [(r.finished_s - r.arrival_s) / 3600 for r in result.jobs if r.finished_s is not None]
        )
        share = np.arange(1, len(jct_h) + 1) / max(len(result.jobs), 1)
        cdf_ax.step(jct_h, share, where="post", label=f"{result.policy} ({len(jct_h)} finished)")
    cdf_ax.set_xlabel("job completion time, submission to finish (hours)")
    cdf_ax.set_ylabel("share of arrived jobs")
    cdf_ax.set_title("Job completion time CDF (unfinished jobs never reach the curve)")
    cdf_ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_summary(
    report: dict[str, Any], lengths_s: np.ndarray, reference: Reference, path: Path, title: str
) -> None:
    """Draw ``summary.png``: what interstice would harvest on this trace, on one page.

    Panels: the window's idle node-hours per day (UTC days; a first or last day the window
    cuts shows its rate over the hours it covers, hatched and labelled with them); the
    hole-length CDF beside the reference's (log scale, the
    Summit trace's published quantiles marked); each policy's harvest and utilization; each
    policy's mean JCT, with its goodput and finished jobs written on the bar.

    Args:
        report: :func:`build_report`'s, with its ``trace`` part.
        lengths_s: the window's completed holes' lengths, seconds
            (:func:`interstice.replay.idle.hole_lengths`).
        reference: :func:`interstice.replay.idle.reference_holes`.
        path: the PNG to write.
        title: the figure's title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trace, policies = report["trace"], report["policies"]
    names = list(policies)
    fig, ((days_ax, holes_ax), (share_ax, jct_ax)) = plt.subplots(2, 2, figsize=(13, 9))
    by_day = trace["by_day"]
    # A day the window cuts shows its rate over the hours it covers, hatched.
    bars = days_ax.bar(
        range(len(by_day)),
        [day["idle_node_hours"] * 24 / day["hours"] for day in by_day],
        color="0.6",
        width=0.8,
    )
    for bar, day in zip(bars, by_day, strict=True):
        if day["hours"] < 24:
            bar.set_hatch("//")
    days_ax.axhline(trace["idle_node_hours_per_day"], color="black", ls="--", lw=0.8)
    days_ax.set_xticks(
        range(len(by_day)),
        [day["day"][5:] + ("" if day["hours"] == 24 else f"\n({day['hours']:.3g} h)")
         for day in by_day],
        rotation=90 if len(by_day) > 14 else 0,
        fontsize=7,
    )  # fmt: skip
    days_ax.set_ylabel("idle node-hours a day")
    days_ax.set_title(
        f"Idle node-hours per day: {trace['idle_node_hours_per_day']:,.1f} a day on average "
        f"({trace['idle_share']:.1%} of {trace['nodes']:,} nodes; hatched: part of a day)",
        fontsize=10,
    )

    holes = trace["holes"]
    for lengths, label, style in (
        (lengths_s, f"this trace ({holes['completed']:,} holes)", "-"),
        (reference.lengths_s, f"{reference.label} ({len(reference.lengths_s):,})", "--"),
    ):
        if len(lengths):
            drawn = np.unique(np.linspace(0, len(lengths) - 1, CDF_POINTS).round().astype(int))
            share = np.concatenate([[0.0], (drawn + 1) / len(lengths)])
            at_s = np.concatenate([lengths[:1], lengths[drawn]])
            holes_ax.step(at_s, share, where="post", ls=style, label=label)
    for p, published_s in PUBLISHED_QUANTILES_S.items():
        holes_ax.plot(published_s, p, "kx")
    holes_ax.plot([], [], "kx", label="Summit's published p50, p90, p99")
    holes_ax.set_xscale("log")
    holes_ax.set_xlabel("hole length (s): one node idle, then taken back")
    holes_ax.set_ylabel("share of completed holes")
    holes_ax.set_title(
        f"Hole lengths ({holes['open_at_end']:,} still open at the end, not counted)",
        fontsize=10,
    )
    holes_ax.legend(loc="lower right", fontsize=8)

    at = np.arange(len(names))
    for offset, figure in ((-0.2, "harvest"), (0.2, "utilization")):
        values = [policies[name][figure] or 0.0 for name in names]
        bars = share_ax.bar(at + offset, values, width=0.4, label=figure)
        share_ax.bar_label(bars, [f"{v:.2f}" for v in values], fontsize=8)
    share_ax.set_xticks(at, names)
    share_ax.set_ylim(0, 1.1)
    share_ax.set_ylabel("share of idle node-hours")
    share_ax.set_title("Harvest (dedicated-node work) and utilization per policy", fontsize=10)
    share_ax.legend(loc="upper right", fontsize=8)

    jct_h = [(policies[name]["jct_mean_s"] or 0.0) / 3600 for name in names]
    bars = jct_ax.bar(at, jct_h, color="0.55")
    jct_ax.bar_label(
        bars,
        [
            f"goodput {policies[name]['goodput_samples']:.3g}\n"
            f"{policies[name]['jobs_finished']} finished"
            for name in names
        ],
        fontsize=8,
    )
    jct_ax.set_xticks(at, names)
    jct_ax.set_ylabel("mean JCT of finished jobs (hours)")
    jct_ax.set_ylim(0, max(jct_h) * 1.25 or 1.0)
    jct_ax.set_title(
        "Mean job completion time (on the bars: goodput in samples, and jobs finished)", fontsize=10
    )
    fig.suptitle(textwrap.fill(title, 150), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
