"""Measure the scalability table the optimizer reads.

``profile`` trains a model for real: one process per simulated node on this machine
(``launch.run_group``: gloo on CPU, nccl with one GPU per rank on CUDA), through the same
``parallelize.build_trainer`` the node agent's worker runs, with seeded random inputs. A
configuration (nodes W, depth d) runs ``warmup_steps`` untimed steps, then ``steps`` timed
ones between two barriers; samples/s = W * batch_size * steps / (slowest rank's seconds).
``progress_per_sample`` comes from ``progress.measure_progress`` (digits, tinycnn proxy).

Output columns (``TABLE_COLUMNS``): those of ``shared/data/bftrainer/imagenet-scalability.csv``
(model, nodes, samples_per_s) plus spb_depth and progress_per_sample; one 0-node row of
0 samples/s per (model, depth), as in the Summit table. Every row is measured: SPB rows are
never derived from ratios (few-step ratios measured on a shared machine were noise, and they
made the optimizer pick SPB depths that gained nothing). ``interstice.optimizer``'s
``ScalabilityTable.from_csv`` reads the table.
"""

import csv
import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import torch
import torch.distributed as dist
from interstice.models.launch import run_group
from interstice.models.parallelize import Layout, build_trainer
from interstice.models.progress import measure_progress
from interstice.models.zoo import build_blocks

TABLE_COLUMNS = ("model", "nodes", "samples_per_s", "spb_depth", "progress_per_sample")
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
    """

    model: str
    nodes: int
    samples_per_s: float
    spb_depth: int = 0
    progress_per_sample: float = 1.0


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
    layout = Layout("spb" if depth else "dp", depth)
    trainer = build_trainer(model, layout, image_size=image_size, device=target)
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
        ValueError: see ``check_request`` and ``parallelize.build_trainer``.
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
            ]
        )
    return out.getvalue()
