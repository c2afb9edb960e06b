"""Structured Partial Backpropagation (SPB) and, at depth 0, plain data parallelism.

Source: A. Kumar, K. Subramanian, S. Venkataraman, A. Akella, "Doing More by Doing Less: How
Structured Partial Backpropagation Improves Deep Learning Clusters", arXiv 2111.10672. The
paper gives the idea (some workers of a data-parallel job skip the backward pass of the lowest
layers, saving compute, activation memory and gradient traffic); the algorithm here is ours:

Model: an ``nn.Sequential`` of B blocks (``zoo.build_blocks``); ``spb_depth`` d in 0..B-1.

Roles, per step t in a group of W ranks:
  * k = max(1, ceil(full_fraction * W)) ranks are **full**: ranks ``(t*k + i) mod W`` for
    i < k. The set rotates with the step number, so all ranks agree on it without
    communicating, and every rank's data reaches the lower blocks once in ceil(W / k) steps.
  * The other W - k ranks are **partial**: they run blocks 0..d-1 under ``torch.no_grad``
    (no stored activations, no backward) and backpropagate only through blocks d..B-1.
  * d = 0 (or W = 1, where the one rank is full) is ordinary data parallelism.

Gradients (exact per-layer averaging): with g_r the gradient of rank r's mean loss,
  * upper parameters (blocks d..B-1): (1/W) * sum over all ranks of g_r;
  * lower parameters (blocks 0..d-1): (1/k) * sum over full ranks of g_r.
  Both are SUM all-reduces over the whole group (``grad_sync.BucketedAllReduce``), partial
  ranks contributing zeros for the lower blocks, then a division by W or k. Buckets of the
  upper blocks start during backward (they are ready first); lower-block buckets start when
  full ranks' backward reaches them and, on partial ranks, right after their shorter backward.
  Communication per step: one all-reduce of all gradients (the partial ranks' saving is
  compute and memory, not bytes), plus a broadcast of the buffers.

BatchNorm: in the lower blocks of a partial rank, BatchNorm still normalises with its batch's
statistics and updates its running statistics (train mode under no_grad). As with DDP's
``broadcast_buffers=True``, rank 0's buffers are broadcast (here at the end of each step), so
every rank holds the same buffers between steps and ``state_dict`` is identical everywhere.

After the step every rank has applied the same averaged gradients with the same SGD state
to the same parameters, so parameters stay identical across ranks.

Throughput: steps are synchronous, so a step lasts as long as its slowest (full) worker; what
SPB saves is the partial workers' backward compute and activation memory (``bench/spb.py``).
A job's samples/s rises only where that saving is visible to the step (e.g. simulated nodes
that share cores or a GPU); ``interstice profile`` measures it rather than assuming it.

Legend for tensor names: B batch, C channels, H height, W width.
"""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from interstice.models.data_parallel import DataParallelTrainer
from torch import nn


def num_full_workers(world_size: int, full_fraction: float) -> int:
    """k = max(1, ceil(full_fraction * world_size)), capped at ``world_size``."""
    return min(world_size, max(1, math.ceil(full_fraction * world_size)))


def full_ranks(step: int, world_size: int, num_full: int) -> frozenset[int]:
    """The full ranks at ``step``: a window of ``num_full`` ranks rotating by ``num_full``."""
    return frozenset((step * num_full + i) % world_size for i in range(num_full))


def check_depth(blocks: nn.Sequential, depth: int) -> None:
    """Raise ``ValueError`` unless 0 <= ``depth`` < number of blocks."""
    if not 0 <= depth < len(blocks):
        raise ValueError(
            f"spb_depth {depth} is out of range: this model has {len(blocks)} blocks, "
            f"so spb_depth must be in 0..{len(blocks) - 1}"
        )


def forward(
    blocks: nn.Sequential, depth: int, inputs_BCHW: torch.Tensor, full: bool
) -> torch.Tensor:
    """Logits ``[B, classes]``; a partial worker (``full`` False) runs the lowest ``depth``
    blocks without autograd."""
    if full or depth == 0:
        return blocks(inputs_BCHW)
    with torch.no_grad():
        hidden = blocks[:depth](inputs_BCHW)
    return blocks[depth:](hidden)


def simulate_gradients(
    blocks: nn.Sequential,
    depth: int,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    full: frozenset[int],
) -> dict[str, torch.Tensor]:
    """SPB's averaged gradients computed in one process from every rank's batch.

    The definition the distributed trainer implements (module docstring): rank r's gradient
    g_r of its mean cross-entropy loss, upper blocks averaged over all ranks, lower blocks
    over the ``full`` ranks.

    Args:
        blocks: the model (train mode).
        depth: SPB depth d.
        batches: ``(inputs_BCHW, targets_B)`` of each rank, rank order.
        full: the full ranks.

    Returns:
        Parameter name -> averaged gradient.
    """
    names = [n for n, _ in blocks.named_parameters()]
    lower = {n for n, _ in blocks[:depth].named_parameters()} if depth else set()
    sums = {n: torch.zeros_like(p) for n, p in blocks.named_parameters()}
    for rank, (inputs, targets) in enumerate(batches):
        loss = F.cross_entropy(forward(blocks, depth, inputs, rank in full), targets)
        wanted = [n for n in names if rank in full or n not in lower]
        params = dict(blocks.named_parameters())
        grads = torch.autograd.grad(loss, [params[n] for n in wanted])
        for n, g in zip(wanted, grads, strict=True):
            sums[n] += g
    return {n: s / (len(full) if n in lower else len(batches)) for n, s in sums.items()}


class SPBTrainer(DataParallelTrainer):
    """SPB over a process group (data parallel at depth 0); see the module docstring.

    Args:
        blocks: the model as blocks, on its device, holding rank 0's weights on every rank.
        spb_depth: d, 0..B-1.
        lr: SGD learning rate.
        group: process group (``None``: default).
        full_fraction: fraction of full workers per step, in (0, 1].

    Raises:
        ValueError: depth out of range or ``full_fraction`` outside (0, 1].
    """

    def __init__(
        self,
        blocks: nn.Sequential,
        spb_depth: int,
        *,
        lr: float,
        group: dist.ProcessGroup | None = None,
        full_fraction: float = 0.5,
    ) -> None:
        if not 0 < full_fraction <= 1:
            raise ValueError(f"full_fraction {full_fraction} must be in (0, 1]")
        check_depth(blocks, spb_depth)
        self.full_fraction = full_fraction
        self.spb_depth = spb_depth
        super().__init__(blocks, lr=lr, group=group)

    def _reducer_groups(self) -> list[list[nn.Parameter]]:
        # Upper first: backward produces those gradients first, so their buckets start first.
        depth = self.spb_depth
        lower = list(self.model[:depth].parameters()) if depth else []
        return [list(self.model[depth:].parameters()), lower]

    def _divisors(self) -> list[float]:
        return [self.world_size, num_full_workers(self.world_size, self.full_fraction)]

    def _forward(self, inputs_BCHW: torch.Tensor) -> torch.Tensor:
        return forward(self.model, self.spb_depth, inputs_BCHW, self.is_full())

    def is_full(self, step: int | None = None) -> bool:
        """Whether this rank backpropagates through every block at ``step`` (default: next)."""
        step = self.step_count if step is None else step
        num_full = num_full_workers(self.world_size, self.full_fraction)
        return self.rank in full_ranks(step, self.world_size, num_full)
