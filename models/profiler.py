"""Measure the scalability table the optimizer reads, and extend a measured one with SPB rows.

``profile`` trains a model for real: one process per simulated node on this machine
(``launch.run_group``: gloo on CPU, nccl with one GPU per rank on CUDA), through the same
``build_trainer`` the node agent's worker runs, with seeded random inputs. A configuration
(nodes W, depth d) runs ``warmup_steps`` untimed steps, then ``steps`` timed ones between two
barriers; samples/s = W * batch_size * steps / (slowest rank's seconds).
``progress_per_sample`` comes from ``progress.measure_progress`` (digits, tinycnn proxy).

Output columns (``TABLE_COLUMNS``): those of ``shared/data/bftrainer/imagenet-scalability.csv``
(model, nodes, samples_per_s) plus spb_depth, progress_per_sample, and derived (false for
measured rows); one 0-node row of 0 samples/s per (model, depth), as in the Summit table.
``interstice.optimizer.ScalabilityTable.from_csv`` reads it.

``extend`` derives SPB rows for a measured table that has none (the Summit one): for each model
and depth d > 0, samples_per_s(n, d) = samples_per_s(n, 0) * r(model, d), where r is the ratio
of depth d's to depth 0's samples/s measured at the same node counts (``spb_ratios``, mean over
node counts >= 1), and progress_per_sample is the measured one; such rows have derived=true.
The default ratios are ``SPB_RATIOS_FILE`` (package data), made by ``spb_ratios`` from profiles
at W = 2 nodes, depths 0..2, 32x32 inputs (AlexNet 64), batch 8, on CPU with gloo; its
``measured_on`` column names the machine of each row. They are few-step measurements on shared
machines, hence noisy: pass ``--ratios`` with a profile of your own to use yours.
"""

import csv
import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch
import torch.distributed as dist
from interstice.models.launch import run_group
from interstice.models.progress import measure_progress
from interstice.models.trainer import build_trainer
from interstice.models.zoo import build_blocks
from interstice.optimizer import ScalabilityTable

TABLE_COLUMNS = ("model", "nodes", "samples_per_s", "spb_depth", "progress_per_sample", "derived")
SPB_RATIOS_FILE = Path(__file__).with_name("spb_ratios.csv")
RATIO_COLUMNS = ("model", "spb_depth", "throughput_ratio", "progress_per_sample")
PROXY_DEPTHS = 4  # tinycnn's blocks: the proxy measures depths 0..3

# One digits measurement per process for the same arguments (profiling several models).
_measure_progress = cache(measure_progress)


@dataclass(frozen=True)
class Row:
    """One line of a scalability table.

    Attributes:
        model: model name.
        nodes: simulated nodes (processes), W.
        samples_per_s: training throughput of the whole job, samples/s.
        spb_depth: SPB depth d (0 = data parallel).
        progress_per_sample: samples of full-backprop progress one sample is worth, (0, 1].
        derived: computed from ratios rather than measured.
    """

    model: str
    nodes: int
    samples_per_s: float
    spb_depth: int = 0
    progress_per_sample: float = 1.0
    derived: bool = False


def _timed_worker(
    rank: int,
    world_size: int,
    model: str,
    depth: int,
    device: str,
    steps: int,
    warmup_steps: int,
    batch_size: int,
    image_size: int,
) -> float:
    """Seconds this rank took for ``steps`` steps after ``warmup_steps``."""
    target = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else "cpu"
    torch.manual_seed(rank)
    trainer = build_trainer(
        model, "spb" if depth else "dp", depth, image_size=image_size, device=target
    )
    inputs = torch.randn(batch_size, 3, image_size, image_size, device=target)
    targets = torch.randint(0, 10, (batch_size,), device=target)
    for _ in range(warmup_steps):
        trainer.step(inputs, targets)
    if device == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        trainer.step(inputs, targets)
    if device == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    return time.perf_counter() - start


def check_request(model: str, nodes: list[int], depths: list[int], device: str) -> None:
    """Raise ``ValueError`` naming the bad value: depth beyond the model, absent device, ..."""
    with torch.device("meta"):  # shapes only: nothing allocated
        blocks = len(build_blocks(model))
    if bad := [d for d in depths if not 0 <= d < blocks]:
        raise ValueError(
            f"--spb-depths {bad}: model {model!r} has {blocks} blocks (0..{blocks - 1})"
        )
    if bad := [n for n in nodes if n < 1]:
        raise ValueError(f"--nodes {bad}: node counts must be >= 1")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device {device!r}: choose cpu or cuda")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device on this machine")
        if max(nodes) > torch.cuda.device_count():
            raise ValueError(
                f"--nodes {max(nodes)}: nccl needs one GPU per simulated node and this machine "
                f"has {torch.cuda.device_count()}"
            )


def profile(
    model: str,
    nodes: list[int],
    depths: list[int],
    *,
    device: str = "cpu",
    steps: int = 5,
    warmup_steps: int = 2,
    batch_size: int = 8,
    image_size: int = 32,
    progress_steps: int = 120,
    on_done: Callable[[str], None] = lambda _: None,
) -> list[Row]:
    """Measure samples/s of ``model`` at every (nodes, depth), and each depth's progress.

    Args:
        model: one of ``MODEL_NAMES``.
        nodes: simulated node counts W (one process each).
        depths: SPB depths.
        device: ``cpu`` (gloo) or ``cuda`` (nccl, one GPU per node).
        steps: timed steps per configuration.
        warmup_steps: untimed steps first.
        batch_size: samples per node per step.
        image_size: input side, pixels.
        progress_steps: steps of the digits measurement (``progress.measure_progress``).
        on_done: called with a short description after each configuration (progress bar).

    Returns:
        Measured rows, with a 0-node row per depth.

    Raises:
        ValueError: see ``check_request`` and ``build_trainer``.
    """
    check_request(model, nodes, depths, device)
    proxy = {d: min(d, PROXY_DEPTHS - 1) for d in depths}
    measured = _measure_progress(tuple(sorted(set(proxy.values()))), steps=progress_steps)
    progress = {p.spb_depth: p.progress_per_sample for p in measured}
    on_done("progress_per_sample on digits")
    backend = "nccl" if device == "cuda" else "gloo"
    rows = []
    for depth in depths:
        rows.append(Row(model, 0, 0.0, depth, progress[proxy[depth]]))
        for n in nodes:
            seconds = run_group(
                _timed_worker,
                n,
                (model, depth, device, steps, warmup_steps, batch_size, image_size),
                backend=backend,
            )
            rate = n * batch_size * steps / max(seconds)
            rows.append(Row(model, n, rate, depth, progress[proxy[depth]]))
            on_done(f"{model} nodes={n} spb_depth={depth}: {rate:.1f} samples/s")
    return rows


def write_table(rows: list[Row]) -> str:
    """The CSV text of ``rows`` in ``TABLE_COLUMNS``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TABLE_COLUMNS)
    for r in rows:
        writer.writerow(
            [
                r.model,
                r.nodes,
                f"{r.samples_per_s:.1f}",
                r.spb_depth,
                f"{r.progress_per_sample:.4f}",
                str(r.derived).lower(),
            ]
        )
    return out.getvalue()


def read_table(text: str) -> list[Row]:
    """Rows of a scalability CSV (optional columns default to depth 0, progress 1, measured).

    Parsed and validated by the optimizer's own reader, so a table the profiler accepts is one
    the optimizer accepts; only the ``derived`` column is read here.

    Raises:
        ValueError: a missing column or a bad value, naming the line.
    """
    table = ScalabilityTable.from_csv(text)
    derived = {
        (r["model"], int(r["nodes"]), int(r.get("spb_depth") or 0))
        for r in csv.DictReader(io.StringIO(text))
        if (r.get("derived") or "false").strip().lower() == "true"
    }
    return [
        Row(
            p.model,
            p.nodes,
            p.samples_per_s,
            p.spb_depth,
            p.progress_per_sample,
            (p.model, p.nodes, p.spb_depth) in derived,
        )
        for p in table.points
    ]


def spb_ratios(profile_rows: list[Row]) -> dict[tuple[str, int], tuple[float, float]]:
    """(model, depth > 0) -> (throughput ratio to depth 0, progress_per_sample) of a profile.

    The ratio is the mean over node counts >= 1 measured at both depths.
    """
    rate = {(r.model, r.nodes, r.spb_depth): r.samples_per_s for r in profile_rows if r.nodes}
    ratios = {}
    for r in profile_rows:
        if r.spb_depth == 0 or r.nodes == 0:
            continue
        key = (r.model, r.spb_depth)
        pairs = [
            rate[(m, n, d)] / rate[(m, n, 0)]
            for (m, n, d) in rate
            if (m, d) == key and rate.get((m, n, 0))
        ]
        if pairs:
            ratios[key] = (sum(pairs) / len(pairs), r.progress_per_sample)
    return ratios


def write_ratios(ratios: dict[tuple[str, int], tuple[float, float]]) -> str:
    """CSV text of ``spb_ratios`` output, in ``RATIO_COLUMNS``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(RATIO_COLUMNS)
    for (model, depth), (ratio, progress) in sorted(ratios.items()):
        writer.writerow([model, depth, f"{ratio:.4f}", f"{progress:.4f}"])
    return out.getvalue()


def read_ratios(text: str) -> dict[tuple[str, int], tuple[float, float]]:
    """Parse ``write_ratios`` text, or a whole profile table (then ratios are computed)."""
    header = next(csv.reader(io.StringIO(text)), [])
    if "throughput_ratio" not in header:
        return spb_ratios(read_table(text))
    return {
        (r["model"], int(r["spb_depth"])): (
            float(r["throughput_ratio"]),
            float(r["progress_per_sample"]),
        )
        for r in csv.DictReader(io.StringIO(text))
    }


def extend(table: list[Row], ratios: dict[tuple[str, int], tuple[float, float]]) -> list[Row]:
    """``table``'s depth-0 rows plus derived SPB rows for every model the ratios cover.

    Raises:
        ValueError: the table has no depth-0 rows, or no model in common with the ratios.
    """
    base = [r for r in table if r.spb_depth == 0]
    if not base:
        raise ValueError("the table has no spb_depth 0 rows to extend")
    models = {r.model for r in base}
    covered = sorted({m for m, _ in ratios} & models)
    if not covered:
        raise ValueError(
            f"no SPB ratios for the table's models ({', '.join(sorted(models))}); "
            "profile one of them first"
        )
    derived = [
        Row(r.model, r.nodes, r.samples_per_s * ratio, depth, progress, derived=True)
        for (model, depth), (ratio, progress) in sorted(ratios.items())
        for r in base
        if r.model == model
    ]
    return [*base, *derived]


def measure_ratios(
    models: tuple[str, ...], nodes: list[int], depths: list[int], **kwargs: object
) -> tuple[str, str]:
    """Profile several models and return (profile table CSV, SPB ratio CSV) texts.

    This is how ``SPB_RATIOS_FILE`` is made. Each model runs at ``image_size`` or its minimum.

    Args:
        models: names from ``MODEL_NAMES``.
        nodes: node counts; include one >= 2, where partial workers exist.
        depths: SPB depths, 0 included.
        **kwargs: passed to ``profile``.
    """
    from interstice.models.zoo import min_image_size

    rows: list[Row] = []
    side = int(kwargs.pop("image_size", 32))
    for model in models:
        usable = [d for d in depths if d < len(build_blocks(model))]
        rows += profile(model, nodes, usable, image_size=max(side, min_image_size(model)), **kwargs)
    return write_table(rows), write_ratios(spb_ratios(rows))
