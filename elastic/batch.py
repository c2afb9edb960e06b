"""A fixed global batch at any world size: per-rank shares, micro-batches, loss scaling.

A job's optimizer step always averages the gradient over the same ``global_batch_size``
(``G``) samples, whatever the number of ranks ``W``: rank ``r`` trains a share of
``G // W`` samples (one more when ``r < G % W``), in micro-batches of at most
``max_micro_batch_size`` samples (gradient accumulation), and each micro-batch's loss *sum*
is scaled so that the gradient all ranks hold after the step is exactly
``(1 / G) * sum over the G samples of d loss_i / d params``, the mean over the global batch,
even when the shares are unequal:

- a ``DistributedDataParallel`` model averages gradients over ranks (divides the sum by W),
  so the scale is ``W / G``, and every micro-batch but the last runs under ``no_sync()`` (one
  gradient all-reduce per step, overlapped with the last backward, as DDP does);
- any other model (no DDP) gets the scale ``1 / G``; with ``W > 1`` call
  :func:`all_reduce_gradients` (SUM) after the backward passes.

So the sequence of optimizer steps equals a dedicated single-process run over the same global
batches up to floating-point summation order. Learning-rate schedules follow optimizer steps
(call ``scheduler.step()`` once per step, checkpoint it with the ``State``), not wall time or
world size: a rescale changes neither the batch nor the schedule, only the speed. Layers that
couple the samples of one rank's batch (BatchNorm's batch statistics) break the equality,
since the split changes with W.
"""

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def shares(global_batch_size: int, world_size: int) -> list[int]:
    """Samples each rank trains per step: ``G // W``, one more for the first ``G % W`` ranks.

    Args:
        global_batch_size: samples per optimizer step (``G``).
        world_size: ranks (``W``).

    Returns:
        ``W`` sizes summing to ``G``.

    Raises:
        ValueError: ``W < 1`` or ``W > G`` (a rank would get no sample).

    Example:
        >>> from interstice.elastic import shares
        >>> shares(10, 4)
        [3, 3, 2, 2]
    """
    if world_size < 1 or world_size > global_batch_size:
        raise ValueError(
            f"world_size must be in [1, global_batch_size={global_batch_size}], got {world_size}"
        )
    base, extra = divmod(global_batch_size, world_size)
    return [base + (rank < extra) for rank in range(world_size)]


def micro_batch_sizes(samples: int, max_micro_batch_size: int | None) -> list[int]:
    """Split ``samples`` into the fewest micro-batches of at most ``max_micro_batch_size``.

    The sizes differ by at most one (``torch.tensor_split``'s rule).

    Raises:
        ValueError: ``max_micro_batch_size < 1``.

    Example:
        >>> from interstice.elastic import micro_batch_sizes
        >>> micro_batch_sizes(10, 4)
        [4, 3, 3]
    """
    if max_micro_batch_size is None or samples == 0:
        return [samples]
    if max_micro_batch_size < 1:
        raise ValueError(f"max_micro_batch_size must be >= 1, got {max_micro_batch_size}")
    count = -(-samples // max_micro_batch_size)
    base, extra = divmod(samples, count)
    return [base + (i < extra) for i in range(count)]


@dataclass(frozen=True)
class Plan:
    """How one optimizer step's global batch is trained at one world size.

    Attributes:
        global_batch_size: samples per step (``G``).
        world_size: ranks (``W``).
        shares: samples of each rank, ``[W]``.
        micro_batch_sizes: each rank's micro-batch sizes, ``[W][accumulation steps]``.
        accumulation_steps: backward passes of each rank per optimizer step, ``[W]``.
    """

    global_batch_size: int
    world_size: int
    shares: tuple[int, ...]
    micro_batch_sizes: tuple[tuple[int, ...], ...]
    accumulation_steps: tuple[int, ...]


def plan(global_batch_size: int, world_size: int, max_micro_batch_size: int | None) -> Plan:
    """The per-rank shares and micro-batches of a global batch.

    Args:
        global_batch_size: samples per optimizer step.
        world_size: ranks.
        max_micro_batch_size: most samples one rank runs through the model at once (memory);
            None: no limit (one micro-batch per rank).

    Raises:
        ValueError: ``world_size`` outside ``[1, global_batch_size]`` or a micro-batch < 1.

    Example:
        >>> from interstice.elastic import plan
        >>> p = plan(10, 3, 2)
        >>> p.shares, p.micro_batch_sizes, p.accumulation_steps
        ((4, 3, 3), ((2, 2), (2, 1), (2, 1)), (2, 2, 2))
    """
    per_rank = shares(global_batch_size, world_size)
    micro = tuple(tuple(micro_batch_sizes(s, max_micro_batch_size)) for s in per_rank)
    return Plan(
        global_batch_size=global_batch_size,
        world_size=world_size,
        shares=tuple(per_rank),
        micro_batch_sizes=micro,
        accumulation_steps=tuple(len(m) for m in micro),
    )


def _split(batch: Any, sizes: list[int]) -> list[Any]:
    if isinstance(batch, torch.Tensor):
        return list(torch.split(batch, sizes))
    if isinstance(batch, dict):
        parts = {key: _split(value, sizes) for key, value in batch.items()}
        return [{key: value[i] for key, value in parts.items()} for i in range(len(sizes))]
    if isinstance(batch, list | tuple):
        columns = [_split(value, sizes) for value in batch]
        return [type(batch)(column[i] for column in columns) for i in range(len(sizes))]
    raise TypeError(f"cannot split a batch of type {type(batch).__name__} into micro-batches")


def _check(batch: Any) -> None:
    """Raise the TypeError :func:`_split` would raise, without splitting anything."""
    if isinstance(batch, torch.Tensor):
        return
    if isinstance(batch, dict | list | tuple):
        for value in batch.values() if isinstance(batch, dict) else batch:
            _check(value)
        return
    raise TypeError(f"cannot split a batch of type {type(batch).__name__} into micro-batches")


def _batch_len(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return len(batch)
    values = list(batch.values()) if isinstance(batch, dict) else list(batch)
    if not values:
        raise TypeError("an empty batch structure has no samples")
    return _batch_len(values[0])


def _ddp_world_size(model: DistributedDataParallel) -> int:
    """The ranks a DDP model averages its gradients over (its process group's size)."""
    group = getattr(model, "process_group", None)
    return group.size() if group is not None else dist.get_world_size()


def accumulate(
    model: torch.nn.Module,
    batch: Any,
    global_batch_size: int,
    max_micro_batch_size: int | None = None,
) -> Iterator[tuple[Any, float]]:
    """This rank's share of a step as micro-batches, each with the scale for its loss *sum*.

    Run forward and backward on each yielded micro-batch inside the loop: with a
    ``DistributedDataParallel`` model every micro-batch but the last is yielded under
    ``model.no_sync()``, so gradients are all-reduced once, at the last backward.

    Args:
        model: the model (DDP-wrapped or not; see the module doc for the scale).
        batch: a tensor, or a tuple/list/dict of tensors, whose first dimension is this
            rank's samples of the step (what the DataLoader over an ``ElasticSampler`` gives).
        global_batch_size: samples per optimizer step, whole job.
        max_micro_batch_size: most samples per forward pass; None: the whole share at once.

    Yields:
        ``(micro_batch, loss_scale)``: the micro-batch (same structure as ``batch``; the
        batch itself when the share is one micro-batch) and the factor to multiply its loss
        sum by (``W / G`` with DDP, ``W`` being the size of its process group; ``1 / G``
        without). Nothing here reads a tensor's values or launches a kernel.

    Raises:
        TypeError: the batch is not a tensor or a tuple/list/dict of them.
        ValueError: ``max_micro_batch_size < 1``.

    Example:
        >>> import torch
        >>> from interstice import elastic
        >>> ctx = elastic.init()
        >>> model = torch.nn.Linear(3, 1)
        >>> x, y = torch.randn(8, 3), torch.randn(8, 1)
        >>> for (xb, yb), scale in elastic.accumulate(model, (x, y), 8, max_micro_batch_size=3):
        ...     loss = torch.nn.functional.mse_loss(model(xb), yb, reduction="sum") * scale
        ...     loss.backward()
        >>> elastic.all_reduce_gradients(model)  # no DDP here: sum the ranks' gradients
    """
    sizes = micro_batch_sizes(_batch_len(batch), max_micro_batch_size)
    if len(sizes) == 1:  # the whole share at once: the batch itself, no split views
        _check(batch)
        parts = [batch]
    else:
        parts = _split(batch, sizes)
    is_ddp = isinstance(model, DistributedDataParallel)
    loss_scale = (_ddp_world_size(model) if is_ddp else 1) / global_batch_size
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        with contextlib.nullcontext() if last or not is_ddp else model.no_sync():
            yield part, loss_scale


def all_reduce_gradients(model: torch.nn.Module) -> None:
    """Sum every parameter's gradient over the ranks (for models without DDP).

    Parameters without a gradient are skipped; each gradient is one all-reduce (no
    bucketing, unlike DDP). Does nothing without a process group or at world size 1.

    Example:
        >>> import torch
        >>> from interstice import elastic
        >>> elastic.all_reduce_gradients(torch.nn.Linear(2, 2))
    """
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    for parameter in model.parameters():
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)
