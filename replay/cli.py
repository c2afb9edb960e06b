"""``interstice replay``: drive the optimizer through simulated time over the real node trace.

Only typer and pathlib are imported here; numpy, matplotlib, the optimizer and the simulator
are imported inside the command so that ``interstice --help`` stays light.
"""

from pathlib import Path

import typer


def replay(
    trace: Path | None = typer.Option(
        None, help="Node-state trace CSV(.gz) (default: the BFTrainer Summit trace)."
    ),
    jobs: Path | None = typer.Option(
        None, help="Jobs CSV (default: the 1,001 ImageNet jobs of BFTrainer)."
    ),
    scalability: Path | None = typer.Option(
        None, help="Scalability table CSV (default: BFTrainer's ImageNet table)."
    ),
    start: str | None = typer.Option(
        None, help="Window start, ISO 8601 (no zone) (default: the trace's first timestamp)."
    ),
    hours: float | None = typer.Option(
        None, help="Window length in hours, > 0 (default: to --end or the trace's end)."
    ),
    end: str | None = typer.Option(
        None, help="Window end, ISO 8601 (no zone), after --start; not with --hours."
    ),
    nodes: int | None = typer.Option(
        None, help="Replay only this many nodes, drawn with --seed (default: all)."
    ),
    nodes_file: Path | None = typer.Option(
        None,
        help="Replay only the nodes named in this file, one host name a line (# comments); "
        "not with --nodes.",
    ),
    seed: int = typer.Option(0, help="Seed of the --nodes draw."),
    policy: str = typer.Option("milp", help="milp, greedy, equal-share or rigid."),
    backend: str = typer.Option(
        "cpsat",
        help="MILP backend: cpsat (OR-Tools CP-SAT) or cbc (CBC through PuLP); both solve "
        "the same formulation.",
    ),
    horizon: str = typer.Option(
        "300",
        help="Forecast horizon in seconds, or auto (expected remaining idle time). Keep it "
        "well above the jobs' rescale_up_s: a job never grows (or starts) on a horizon its "
        "rescale_up_s does not pay for (docs/engine.md).",
    ),
    max_active_jobs: int | None = typer.Option(
        None,
        help="Cap on jobs admitted at once (default: none; jobs are admitted first come first "
        "served while the admitted ones cannot use every idle node; BFTrainer capped at 10).",
    ),
    admission_efficiency: float | None = typer.Option(
        None,
        help="Admission counts each job at the most nodes it runs on at this parallel "
        "efficiency, in [0, 1] (0: at its max_nodes) (default: the service's, 0.9; "
        "optimizer/admission.py).",
    ),
    min_solve_interval: float = typer.Option(
        0.0, help="Least simulated seconds between two solves (0: solve at every event)."
    ),
    time_limit: float = typer.Option(10.0, help="Solver wall-clock limit per solve, seconds."),
    early_finish: float = typer.Option(
        0.9,
        help="Weight beta in [0, 1] of the objective's early-finish term (g): samples a job "
        "would train beyond its remaining ones within the horizon (0: the bare cap, 1: no cap, "
        "as BFTrainer; optimizer/formulation.py).",
    ),
    completion: float | None = typer.Option(
        None,
        "--completion-s",
        help="Tau of the objective's completion term (i), seconds: a job submitted tau later "
        "weighs 1/e as much, so where nodes are scarce earlier jobs finish first (0: off; "
        "default: the optimizer's, optimizer/formulation.py).",
    ),
    objective: str | None = typer.Option(
        None,
        help="throughput (samples), speedup (each job's term divided by its one-node rate) or "
        "node-seconds (divided by its model's best progress per node-second: dedicated "
        "node-seconds of work, the harvest's unit) (default: the optimizer's Weights default).",
    ),
    fairness: float = typer.Option(0.0, help="Weight of the concave fair-share term, >= 0."),
    churn: float = typer.Option(
        0.0, help="Penalty per rescale in one node's work over the horizon, >= 0."
    ),
    priority_weight: float = typer.Option(
        1.0, help="Exponent on the jobs' priority column (0 ignores priorities), >= 0."
    ),
    rate_error: float = typer.Option(
        0.0,
        help="The policies see every table rate times a random factor in [1/(1+F), 1+F] "
        "(seeded by --rate-seed); the jobs train at the true rates. F >= 0.",
    ),
    rate_seed: int = typer.Option(0, help="Seed of the --rate-error factors."),
    learn: bool = typer.Option(
        False,
        "--learn/--no-learn",
        help="Fit each job's curve from the rates it really trained at (optimizer.learning).",
    ),
    forecast: str = typer.Option(
        "none",
        help="Idle-hole forecasts the elastic policies get (replay/forecast.py): none; exact "
        "(each hole's true end from the trace); plan (a planner's: --forecast-coverage of the "
        "holes known, each reported late by up to --forecast-error of the remaining time).",
    ),
    forecast_coverage: float = typer.Option(
        0.5, help="With --forecast plan: the share of holes whose end is known, in [0, 1]."
    ),
    forecast_error: float = typer.Option(
        0.5,
        help="With --forecast plan: a known end is reported late by a seeded factor in [0, F) "
        "of the remaining time; F >= 0.",
    ),
    forecast_seed: int = typer.Option(0, help="Seed of the --forecast plan draws."),
    forecast_classes: int | None = typer.Option(
        None,
        help="Most classes of nodes forecast to leave within the horizon that the MILP and "
        "the greedy tell apart (Problem.forecast_classes, default 1), >= 1: more classes "
        "value short-lived nodes closer to their ends and make a solve branch more.",
    ),
    forecast_min_coverage: float | None = typer.Option(
        None,
        help="The elastic policies use the forecasts only while at least this share of the "
        "newest ended holes had been forecast (Problem.forecast_min_coverage), in [0, 1]; "
        "0: always (default: the service's, 0.9).",
    ),
    reclaim_loss_s: float = typer.Option(
        0.0,
        help="Seconds of progress a reclaim costs an elastic job beyond its rescale_down_s "
        "(the work since its last checkpoint where the grace period is too short to "
        "checkpoint), >= 0; with forecasts a planned shrink before a forecast reclaim may pay.",
    ),
    rigid_nodes: int | None = typer.Option(
        None,
        help="Node count every rigid job asks for (default: its max_nodes); at most the "
        "trace's node count, within the job's min_nodes..max_nodes.",
    ),
    checkpoint_interval_s: float = typer.Option(
        600.0, help="Seconds between two checkpoints of a rigid job, > 0."
    ),
    no_baselines: bool = typer.Option(
        False, "--no-baselines", help="Replay only --policy, not the others as baselines."
    ),
    out: Path = typer.Option(Path("."), help="Folder for report.json, report.png and summary.png."),
) -> None:
    """Replay elastic jobs on the node-state trace; write report.json, report.png and
    summary.png (idle node-hours per day, hole lengths, and each policy's harvest)."""
    import numpy as np
    from interstice.optimizer import ScalabilityTable, Weights, admission
    from interstice.optimizer.coverage import FORECAST_MIN_COVERAGE
    from interstice.replay import idle
    from interstice.replay import report as report_module
    from interstice.replay.choices import (
        OBJECTIVES,
        POLICIES,
        allocators,
        normalisation,
        sample_nodes,
    )
    from interstice.replay.forecast import FORECASTS, ForecastSettings, HoleForecasts
    from interstice.replay.horizon import AutoHorizon, FixedHorizon
    from interstice.replay.jobs import load_jobs
    from interstice.replay.rates import perturb
    from interstice.replay.rigid import replay_rigid
    from interstice.replay.simulator import ReplayOptions
    from interstice.replay.simulator import replay as run_replay
    from interstice.replay.trace import load_trace
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from interstice import data
    from interstice.errors import fail

    if policy not in POLICIES:
        fail(f"--policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if backend not in ("cbc", "cpsat"):
        fail(f"--backend must be cbc or cpsat, got {backend!r}")
    if hours is not None and not hours > 0:
        fail(f"--hours must be > 0, got {hours}")
    if max_active_jobs is not None and max_active_jobs < 1:
        fail(f"--max-active-jobs must be >= 1, got {max_active_jobs}")
    if admission_efficiency is None:
        admission_efficiency = admission.ADMISSION_EFFICIENCY
    if not 0 <= admission_efficiency <= 1:
        fail(f"--admission-efficiency must be in [0, 1], got {admission_efficiency}")
    if objective is not None and objective not in OBJECTIVES:
        fail(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    for option, value in (
        ("--fairness", fairness),
        ("--churn", churn),
        ("--priority-weight", priority_weight),
        ("--rate-error", rate_error),
        ("--reclaim-loss-s", reclaim_loss_s),
        ("--completion-s", 0.0 if completion is None else completion),
    ):
        if not 0 <= value < float("inf"):
            fail(f"{option} must be a finite number >= 0, got {value}")
    if rigid_nodes is not None and rigid_nodes < 1:
        fail(f"--rigid-nodes must be >= 1, got {rigid_nodes}")
    if not 0 < checkpoint_interval_s < float("inf"):
        fail(f"--checkpoint-interval-s must be > 0, got {checkpoint_interval_s}")
    if hours is not None and end is not None:
        fail("--hours and --end both set the window's end: give one")
    if nodes is not None and nodes_file is not None:
        fail("--nodes and --nodes-file both choose the nodes: give one")
    if min_solve_interval < 0:
        fail(f"--min-solve-interval must be >= 0, got {min_solve_interval}")
    if not time_limit > 0:
        fail(f"--time-limit must be > 0, got {time_limit}")
    if not 0 <= early_finish <= 1:
        fail(f"--early-finish must be within [0, 1], got {early_finish}")
    if forecast not in FORECASTS:
        fail(f"--forecast must be one of {', '.join(FORECASTS)}, got {forecast!r}")
    if not 0 <= forecast_coverage <= 1:
        fail(f"--forecast-coverage must be within [0, 1], got {forecast_coverage}")
    if not 0 <= forecast_error < float("inf"):
        fail(f"--forecast-error must be a finite number >= 0, got {forecast_error}")
    if forecast_classes is not None and forecast_classes < 1:
        fail(f"--forecast-classes must be >= 1, got {forecast_classes}")
    if forecast_min_coverage is None:
        forecast_min_coverage = FORECAST_MIN_COVERAGE
    if not 0 <= forecast_min_coverage <= 1:
        fail(f"--forecast-min-coverage must be within [0, 1], got {forecast_min_coverage}")
    forecast_settings = ForecastSettings(forecast, forecast_coverage, forecast_error, forecast_seed)
    horizon_s = None
    if horizon != "auto":
        try:
            horizon_s = float(horizon)
        except ValueError:
            horizon_s = float("nan")
        if not 0 < horizon_s < float("inf"):
            fail(f"--horizon must be a number of seconds > 0 or auto, got {horizon!r}")

    folder = data.data_dir()
    paths = {
        "--trace": trace or folder / data.TRACE_FILE,
        "--jobs": jobs or folder / data.IMAGENET_JOBS_FILE,
        "--scalability": scalability or folder / data.SCALABILITY_FILE,
    }
    if nodes_file is not None:
        paths["--nodes-file"] = nodes_file
    for option, path in paths.items():
        if not path.is_file():
            fail(f"{option}: no such file {path}")
    try:
        table = ScalabilityTable.from_csv(paths["--scalability"].read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        fail(f"--scalability {paths['--scalability']}: {str(exc).splitlines()[0]}")
    try:
        job_specs = load_jobs(paths["--jobs"], table)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        fail(f"--jobs {paths['--jobs']}: {exc}")
    try:
        node_trace = load_trace(paths["--trace"])
    except (OSError, ValueError) as exc:
        fail(f"--trace {paths['--trace']}: {exc}")

    def offset_s(option: str, text: str) -> float:
        try:
            at = np.datetime64(text, "s")
        except ValueError:
            at = np.datetime64("NaT")
        if np.isnat(at):
            fail(f"{option} must be an ISO 8601 time like 2021-02-17T00:00:00, got {text!r}")
        return float((at - node_trace.start) / np.timedelta64(1, "s"))

    start_s = 0.0
    if start is not None:
        start_s = offset_s("--start", start)
        if not 0 <= start_s < node_trace.duration_s:
            fail(f"--start {start} is outside the trace, {node_trace.start} to {node_trace.end}")
    end_s = float(node_trace.duration_s)
    if hours is not None:
        end_s = min(end_s, start_s + hours * 3600.0)
    if end is not None:
        end_s = offset_s("--end", end)
        if not start_s < end_s <= node_trace.duration_s:
            fail(f"--end {end} must lie after the window's start, by {node_trace.end}")
    n_nodes = len(node_trace.node_names)
    node_ids = None
    if nodes is not None:
        if not 1 <= nodes <= n_nodes:
            fail(f"--nodes must be within 1..{n_nodes} (the trace's nodes), got {nodes}")
        node_ids = sample_nodes(n_nodes, nodes, seed)
    if nodes_file is not None:
        node_ids = read_nodes_file(nodes_file, node_trace.node_names.tolist())
    window = node_trace.window(start_s, end_s, node_ids)
    horizon_fn = AutoHorizon(node_trace, start_s) if horizon_s is None else FixedHorizon(horizon_s)
    forecast_fn = None
    if forecast_settings.mode != "none":
        forecast_fn = HoleForecasts(node_trace, start_s, node_ids, forecast_settings).remaining_s

    policies = allocators(backend)
    order = [policy] + ([] if no_baselines else [p for p in POLICIES if p != policy])
    weights = Weights(
        **normalisation(objective),
        fairness=fairness,
        churn=churn,
        priority=priority_weight,
        early_finish=early_finish,
        **({} if completion is None else {"completion_s": completion}),
    )
    if objective is None:
        objective = (
            "speedup"
            if weights.speedup
            else "node-seconds"
            if weights.node_seconds
            else "throughput"
        )
    options = ReplayOptions(
        max_active_jobs=max_active_jobs,
        admission_efficiency=admission_efficiency,
        learn=learn,
        min_solve_interval_s=min_solve_interval,
        time_limit_s=time_limit,
        weights=weights,
        reclaim_loss_s=reclaim_loss_s,
        **({} if forecast_classes is None else {"forecast_classes": forecast_classes}),
        forecast_min_coverage=forecast_min_coverage,
    )
    believed = perturb(table, rate_error, rate_seed)
    console = Console(stderr=True)
    window_start = window.start.astype(object)
    console.print(
        f"replaying {len(window.node_names)} nodes, {window_start} + "
        f"{window.duration_s / 3600:.1f} h, {len(window.event_time_s)} trace events, "
        f"{len(job_specs)} jobs; policies: {', '.join(order)}"
    )
    results = []
    columns = (
        TextColumn("{task.description:<12}"),
        BarColumn(),
        TextColumn("{task.fields[clock]} simulated"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        for name in order:
            task = progress.add_task(name, total=window.duration_s, clock=str(window_start))
            step_s = window.duration_s / 500
            shown = [0.0]

            def show(now_s: float, task=task, shown=shown, step_s=step_s) -> None:
                if now_s - shown[0] >= step_s:
                    shown[0] = now_s
                    clock = window.start + np.timedelta64(int(now_s), "s")
                    progress.update(task, completed=now_s, clock=str(clock))

            if name == "rigid":
                result = replay_rigid(
                    window,
                    job_specs,
                    table,
                    rigid_nodes=rigid_nodes,
                    checkpoint_interval_s=checkpoint_interval_s,
                    on_progress=show,
                )
            else:
                result = run_replay(
                    window,
                    job_specs,
                    table,
                    policies[name],
                    horizon=horizon_fn,
                    options=options,
                    name=name,
                    on_progress=show,
                    believed=believed,
                    forecast=forecast_fn,
                )
            results.append(result)
            end = window.start + np.timedelta64(int(window.duration_s), "s")
            progress.update(task, completed=window.duration_s, clock=str(end))

    settings = {
        "trace": str(paths["--trace"]),
        "jobs": str(paths["--jobs"]),
        "scalability": str(paths["--scalability"]),
        "window_start": str(window.start),
        "window_hours": window.duration_s / 3600,
        "nodes": len(window.node_names),
        "seed": seed if nodes is not None else None,
        "nodes_file": str(nodes_file) if nodes_file is not None else None,
        "trace_events": len(window.event_time_s),
        "policy": policy,
        "backend": backend,
        "horizon": horizon,
        "max_active_jobs": max_active_jobs,
        "admission_efficiency": admission_efficiency,
        "min_solve_interval_s": min_solve_interval,
        "time_limit_s": time_limit,
        "weights": weights.model_dump(),
        "objective": objective,
        "rate_error": rate_error,
        "rate_seed": rate_seed if rate_error else None,
        "learn": learn,
        **forecast_settings.report(),
        "forecast_classes": options.forecast_classes,
        "forecast_min_coverage": forecast_min_coverage,
        "rigid_nodes": rigid_nodes,
        "checkpoint_interval_s": checkpoint_interval_s,
        "reclaim_loss_s": reclaim_loss_s,
    }
    holes = idle.hole_lengths(window)
    reference = idle.reference_holes((paths["--trace"], node_trace))
    offered = idle.trace_figures(window, holes, reference)
    full = report_module.build_report(settings, results, offered)
    out.mkdir(parents=True, exist_ok=True)
    report_module.write_json(full, out / "report.json")
    title = (
        f"{window_start:%Y-%m-%d %H:%M} + {window.duration_s / 3600:.4g} h, "
        f"{len(window.node_names)} nodes; policy {policy}"
        + (f" ({backend})" if policy == "milp" else "")
        + f"; objective {objective}, fairness {fairness:g}, churn {churn:g}, "
        f"priority exponent {priority_weight:g}, early finish {early_finish:g}, "
        f"completion {weights.completion_s:g} s, "
        f"horizon {horizon}"
        + (f", rate error {rate_error:g}" if rate_error else "")
        + (", learning" if learn else "")
        + (f", forecast {forecast}" if forecast != "none" else "")
        + (
            f" (coverage {forecast_coverage:g}, error {forecast_error:g})"
            if forecast == "plan"
            else ""
        )
    )
    report_module.plot(results, window_start, out / "report.png", title)
    report_module.plot_summary(full, holes[0], reference, out / "summary.png", title)
    print_offer(console, offered, reference.label)
    for name, figures in full["policies"].items():
        console.print(
            f"{name:<12} harvest {figures['harvest'] or 0:.3f}  "
            f"efficiency {figures['efficiency'] or 0:.3f}  "
            f"utilization {figures['utilization'] or 0:.3f}  "
            f"harvested {figures['harvested_node_hours_per_day']:.4g} node-h/day  "
            f"goodput {figures['goodput_samples']:.4g} samples  "
            f"jobs finished {figures['jobs_finished']}  "
            f"JCT mean {in_hours(figures['jct_mean_s'])}  "
            f"solves {figures['solves']}  wall {figures['replay_wall_s']:.1f} s"
        )
    for name, figures in full["policies"].items():
        for user, part in figures["by_user"].items():
            wait_s = part["wait_mean_s"]
            console.print(
                f"{name:<12} user {user}: harvest {part['harvest'] or 0:.3f} "
                f"({part['harvested_node_hours']:.1f} node-hours), "
                f"jobs {part['jobs_finished']} of {part['jobs_arrived']} finished, "
                f"mean wait {in_hours(wait_s)}"
            )
    for pair, ratios in full["ratios"].items():
        console.print(
            f"{pair}: goodput x{ratios['goodput_samples'] or 0:.3f}  "
            f"harvest x{ratios['harvest'] or 0:.3f}  JCT mean x{ratios['jct_mean_s'] or 0:.3f} "
            f"(x{ratios['jct_mean_s_same_jobs'] or 0:.3f} over the "
            f"{ratios['same_jobs_finished']} jobs both finished)"
        )
    console.print(f"wrote {out / 'report.json'}, {out / 'report.png'} and {out / 'summary.png'}")


def in_hours(seconds: float | None) -> str:
    """``"1.25 h"``, or ``"-"`` for no figure (no job finished)."""
    return "-" if seconds is None else f"{seconds / 3600:.2f} h"


def print_offer(console, offered: dict, reference_label: str) -> None:
    """Print the ``trace`` part of the report: idle node-hours and holes, and the reference's
    holes beside them."""

    def spread(figures: dict) -> str:
        if figures["p50_s"] is None:
            return "none completed"
        return ", ".join(f"{p} {figures[f'{p}_s']:,.0f} s" for p in ("p50", "p90", "p99"))

    holes, reference = offered["holes"], offered["reference"]
    console.print(
        f"trace: {offered['nodes']:,} nodes, idle {offered['idle_node_hours']:,.1f} node-h "
        f"({offered['idle_share']:.1%}), {offered['idle_node_hours_per_day']:,.1f} node-h/day; "
        f"holes {holes['completed']:,} completed ({spread(holes)}), "
        f"{holes['open_at_end']:,} open at the end; {reference_label}: {spread(reference)}"
    )


def read_nodes_file(path: Path, trace_nodes: list[str]):
    """Ids (sorted, numpy int64) of the host names listed in ``path``, exiting 2 on a bad list.

    One name a line; blank lines and text after ``#`` are ignored. An empty list, a name
    listed twice or a name not in the trace is bad input (one line on stderr, exit 2).
    """
    import numpy as np

    from interstice.errors import fail

    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"--nodes-file {path}: {exc}")
    names = [line.split("#", 1)[0].strip() for line in lines]
    names = [name for name in names if name]
    if not names:
        fail(f"--nodes-file {path}: no node names")
    index = {name: i for i, name in enumerate(trace_nodes)}
    for name in names:
        if name not in index:
            fail(f"--nodes-file {path}: node {name!r} is not in the trace")
    if len(set(names)) != len(names):
        fail(f"--nodes-file {path}: a node is listed twice")
    return np.sort(np.array([index[name] for name in names], dtype=np.int64))
