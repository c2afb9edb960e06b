"""SplitBrain: hybrid data/model parallelism for VGG-style models.

Source: Lai, Kadav, Kruus, "SplitBrain: Hybrid Data and Model Parallel Deep Learning",
arXiv 2112.15317: convolutional layers are compute-heavy and small, fully-connected layers are
light and large, so replicate the former (data parallel) and shard the latter (model parallel);
the paper reports up to 67 % less memory per worker for VGG over CIFAR-10.

Partitioning, in a group of W ranks, for a classifier ``Linear1, act, Linear2, act, Linear3``
(dropout allowed anywhere between), W1 [H1, F], W2 [H2, H1], W3 [classes, H2]:
  * convolutional blocks and Linear3: replicated; gradients averaged over W (SUM all-reduce,
    divide by W, bucketed and overlapped with backward as in ``grad_sync``).
  * Linear1: column parallel: rank r holds rows r of ``tensor_split(W1, W, dim=0)`` and the
    matching part of its bias.
  * Linear2: row parallel: rank r holds columns r of ``tensor_split(W2, W, dim=1)``; its bias is
    replicated.

Communication, per step (B local batch, so W*B samples in the group):
  forward:  all-gather of the features ``x_BF`` from every rank -> ``x_(WB)F`` (every rank's
            shard of Linear1 sees every sample); Linear2's partial products ``[WB, H2]`` are
            summed across ranks and each rank keeps its own B rows (reduce-scatter).
  backward: the adjoints: reduce-scatter of the gradient of the gathered features, all-gather
            of the gradient of Linear2's output; then the all-reduce of replicated gradients.
  With gloo (no reduce-scatter) a reduce-scatter is an all-reduce followed by a slice.

Gradients: each rank's loss is the mean over its B samples and the trained objective the mean
over ranks, as in data parallel. A shard's gradient already sums every rank's loss through the
collectives' adjoints, so it is divided by W locally with no further communication. The
mathematics equals the unsharded model on the concatenated batch (tests check outputs, losses and
every gradient), except dropout masks, which are drawn per shard.

Memory per worker: the sharded layers' parameters, gradients and momentum shrink by W.

Legend for tensor names: B batch, C channels, H height, W width, F features.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from interstice.models.data_parallel import IGNORE_INDEX, DataParallelTrainer
from torch import nn


def _rows(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """This rank's equal share of ``x``'s rows."""
    return x.chunk(dist.get_world_size(group))[dist.get_rank(group)]


def _all_gather_rows(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts)


def _reduce_scatter_rows(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    if dist.get_backend(group) == "nccl":
        out = torch.empty_like(_rows(x, group))
        dist.reduce_scatter_tensor(out, x.contiguous(), group=group)
        return out
    summed = x.clone()
    dist.all_reduce(summed, group=group)
    return _rows(summed, group).clone()


class _GatherRows(torch.autograd.Function):
    """Forward: all-gather rows from every rank. Backward: reduce-scatter of the gradient."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _all_gather_rows(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_rows(grad, ctx.group), None


class _ReduceScatterRows(torch.autograd.Function):
    """Forward: sum across ranks, keep own rows. Backward: all-gather of the gradient."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _reduce_scatter_rows(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_rows(grad, ctx.group), None


class ColumnParallelLinear(nn.Module):
    """Rows of an ``nn.Linear``'s weight; input ``x_BF`` local, output ``[W*B, H1 / W]``."""

    shard_dims = {"weight": 0, "bias": 0}

    def __init__(
        self, full: nn.Linear, rank: int, world_size: int, group: dist.ProcessGroup | None = None
    ) -> None:
        super().__init__()
        self.group = group
        self.weight = nn.Parameter(full.weight.detach().tensor_split(world_size, 0)[rank].clone())
        self.bias = nn.Parameter(full.bias.detach().tensor_split(world_size, 0)[rank].clone())

    def forward(self, x_BF: torch.Tensor) -> torch.Tensor:
        return F.linear(_GatherRows.apply(x_BF, self.group), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Columns of an ``nn.Linear``'s weight; input ``[W*B, H1 / W]``, output ``[B, H2]``."""

    shard_dims = {"weight": 1}

    def __init__(
        self, full: nn.Linear, rank: int, world_size: int, group: dist.ProcessGroup | None = None
    ) -> None:
        super().__init__()
        self.group = group
        self.weight = nn.Parameter(full.weight.detach().tensor_split(world_size, 1)[rank].clone())
        self.bias = nn.Parameter(full.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ReduceScatterRows.apply(F.linear(x, self.weight), self.group) + self.bias


def find_classifier(blocks: nn.Sequential) -> nn.Sequential:
    """The head's VGG-style classifier: a Sequential holding exactly three ``nn.Linear``.

    Raises:
        ValueError: the model has none (e.g. ResNet's single fc layer).
    """
    for module in blocks[-1].modules():
        if isinstance(module, nn.Sequential):
            linears = [m for m in module.children() if isinstance(m, nn.Linear)]
            if len(linears) == 3:
                return module
    raise ValueError(
        "parallelism 'splitbrain' needs a VGG-style classifier of three fully-connected "
        "layers (vgg16, AlexNet, tinycnn); this model has none"
    )


def shard_classifier(
    blocks: nn.Sequential, rank: int, world_size: int, group: dist.ProcessGroup | None = None
) -> None:
    """Replace, in place, the classifier's first Linear by its column shard and the second by
    its row shard; module names (and so state_dict keys) stay those of the unsharded model."""
    classifier = find_classifier(blocks)
    names = [n for n, m in classifier.named_children() if isinstance(m, nn.Linear)]
    classifier.add_module(
        names[0], ColumnParallelLinear(classifier[int(names[0])], rank, world_size, group)
    )
    classifier.add_module(
        names[1], RowParallelLinear(classifier[int(names[1])], rank, world_size, group)
    )


def _shard_dims(model: nn.Module) -> dict[str, int]:
    """Qualified parameter name -> the dimension it is sharded along (sharded ones only)."""
    return {
        f"{prefix}.{name}": dim
        for prefix, module in model.named_modules()
        for name, dim in getattr(module, "shard_dims", {}).items()
    }


def bytes_per_worker(blocks: nn.Sequential, world_size: int, hybrid: bool) -> int:
    """Parameter + gradient + SGD-momentum bytes one worker holds.

    Computed from shard shapes (``tensor_split`` sizes of rank 0, the largest shard), so no
    process group is needed: 3 copies (parameter, gradient, momentum) of each local tensor.

    Args:
        blocks: the unsharded model (may live on the ``meta`` device).
        world_size: W.
        hybrid: SplitBrain (True) or pure data parallel (False).
    """
    sharded: dict[int, int] = {}
    if hybrid:
        classifier = find_classifier(blocks)
        linears = [m for m in classifier.children() if isinstance(m, nn.Linear)]
        for linear, dims in zip(
            linears[:2], ({"weight": 0, "bias": 0}, {"weight": 1}), strict=True
        ):
            for name, dim in dims.items():
                p = getattr(linear, name)
                sharded[id(p)] = p.tensor_split(world_size, dim)[0].numel()
    elements = sum(sharded.get(id(p), p.numel()) for p in blocks.parameters())
    element_size = next(blocks.parameters()).element_size()
    return 3 * elements * element_size


class SplitBrainTrainer(DataParallelTrainer):
    """SplitBrain over a process group; see the module docstring.

    Args:
        blocks: the model on its device, holding rank 0's weights, with its classifier
            already sharded (``shard_classifier``): ``parallelize.build_trainer`` does both,
            in that order.
        lr: SGD learning rate.
        group: process group (``None``: default).

    Raises:
        ValueError: the model's classifier is not sharded.
    """

    def __init__(
        self, blocks: nn.Sequential, *, lr: float, group: dist.ProcessGroup | None = None
    ) -> None:
        self._sharded = _shard_dims(blocks)
        if not self._sharded:
            raise ValueError("SplitBrainTrainer needs a model sharded by shard_classifier")
        super().__init__(blocks, lr=lr, group=group)
        self._local = [p for n, p in blocks.named_parameters() if n in self._sharded]

    def _reducer_groups(self) -> list[list[nn.Parameter]]:
        # Shards are not all-reduced: their gradients already sum every rank's loss.
        return [[p for n, p in self.model.named_parameters() if n not in self._sharded]]

    def _after_reduce(self) -> None:
        for p in self._local:
            p.grad.div_(self.world_size)

    def step(
        self,
        inputs_BCHW: torch.Tensor,
        targets_B: torch.Tensor,
        global_batch_size: int | None = None,
    ) -> float:
        """One hybrid-parallel step (see ``DataParallelTrainer.step``).

        The features are all-gathered, so every rank needs the same B. With
        ``global_batch_size`` the ranks' shares differ by one sample at most: a short rank
        pads with copies of its first sample whose target is ``IGNORE_INDEX`` (no loss, no
        gradient; its BatchNorm statistics do see them).
        """
        if global_batch_size is not None:
            rows = -(-global_batch_size // self.world_size)
            pad = rows - len(targets_B)
            if pad > 0:
                inputs_BCHW = torch.cat([inputs_BCHW, inputs_BCHW[:1].expand(pad, -1, -1, -1)])
                targets_B = torch.cat([targets_B, targets_B.new_full((pad,), IGNORE_INDEX)])
        return super().step(inputs_BCHW, targets_B, global_batch_size)

    def _full_tensor(self, name: str, local: torch.Tensor) -> torch.Tensor:
        if name not in self._sharded:
            return local
        # Shards of tensor_split may differ in size by one; pad to the largest and trim.
        sizes = [
            torch.tensor(local.shape[self._sharded[name]], device=local.device)
            for _ in range(self.world_size)
        ]
        dist.all_gather(sizes, sizes[0].clone(), group=self.group)
        dim = self._sharded[name]
        largest = max(int(s) for s in sizes)
        pad = [0, 0] * (local.dim() - 1 - dim) + [0, largest - local.shape[dim]]
        padded = F.pad(local.detach(), pad)
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded.contiguous(), group=self.group)
        return torch.cat([p.narrow(dim, 0, int(s)) for p, s in zip(parts, sizes, strict=True)], dim)

    def _local_slice(self, name: str, full: torch.Tensor) -> torch.Tensor:
        if name not in self._sharded:
            return full
        return full.tensor_split(self.world_size, self._sharded[name])[self.rank]
