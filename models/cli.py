"""``interstice profile``: measure a scalability table with real multi-process training.

torch is imported inside the command (it is the optional extra ``.[train]``), so that
``interstice --help`` and the service never import it.
"""

from pathlib import Path

import typer

from interstice.errors import fail


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        fail(f"{option} {text!r}: expected comma-separated integers, e.g. 0,1,2")
    if not values:
        fail(f"{option} is empty")
    return values


def profile(
    model: str = typer.Option(None, help="Model to profile (see interstice.models.MODEL_NAMES)."),
    nodes: str = typer.Option("1,2,4", help="Simulated node counts, one process each."),
    spb_depths: str = typer.Option("0,1,2", help="SPB depths to measure."),
    device: str = typer.Option("cpu", help="cpu (gloo) or cuda (nccl, one GPU per node)."),
    steps: int = typer.Option(5, min=1, help="Timed steps per configuration."),
    batch_size: int = typer.Option(8, min=1, help="Samples per node per step."),
    image_size: int = typer.Option(32, min=1, help="Input side, pixels."),
    progress_steps: int = typer.Option(
        120, min=1, help="Steps of the digits run that measures progress_per_sample."
    ),
    out: Path = typer.Option(None, help="CSV to write (default: stdout)."),
) -> None:
    """Measure samples/s per (model, nodes, spb_depth) with real multi-process training."""
    try:
        import torch  # noqa: F401
    except ImportError:
        fail("interstice profile needs torch: pip install 'interstice[train]'")
    from interstice.models import profiler
    from interstice.models.zoo import MODEL_NAMES
    from rich.progress import Progress

    if model is None:
        fail("--model is required")
    if model not in MODEL_NAMES:
        fail(f"--model {model!r} is unknown; choose one of {', '.join(MODEL_NAMES)}")
    node_counts = _int_list(nodes, "--nodes")
    depths = _int_list(spb_depths, "--spb-depths")
    try:
        profiler.check_request(model, node_counts, depths, device)
    except ValueError as exc:
        fail(str(exc))
    with Progress(transient=True) as bar:
        task = bar.add_task(f"profiling {model}", total=1 + len(node_counts) * len(depths))
        try:
            rows = profiler.profile(
                model,
                node_counts,
                depths,
                device=device,
                steps=steps,
                batch_size=batch_size,
                image_size=image_size,
                progress_steps=progress_steps,
                on_done=lambda what: bar.update(task, advance=1, description=what),
            )
        except ValueError as exc:
            fail(str(exc))
    text = profiler.write_table(rows)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
