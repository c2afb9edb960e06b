"""Checkpoints of models whose parameters are sharded across ranks (SplitBrain's layers).

A module marks its sharded parameters with a ``shard_dims`` mapping (parameter name -> the
dimension it is split along), as ``interstice.models.splitbrain``'s ``ColumnParallelLinear``
and ``RowParallelLinear`` do; a rank holds one contiguous slice along that dimension (any
sizes: ``tensor_split``'s uneven ones too). Those parameters, and the optimizer state
tensors of their shape (momentum, Adam's moments), are written by every rank, its own slice,
with ``torch.distributed.checkpoint`` (DCP) as ``ShardedTensor`` s whose metadata gives each
slice's global offset; DCP reads back whatever slices the ranks of a later run hold, so a
resume works at any world size. The rest (replicated parameters, optimizer scalars, sampler,
counters) goes into rank 0's ordinary checkpoint, which names the DCP folder and is written
last, atomically: it is the commit point. (DTensor, which DCP prefers to ShardedTensor, lays
shards out as ``torch.chunk`` does and cannot describe ``tensor_split``'s uneven slices.)
"""

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed._shard.sharded_tensor import (
    Shard,
    ShardedTensor,
    ShardMetadata,
    init_from_local_shards,
)

SHARDED = "<sharded>"  # stands for a tensor held in the DCP folder


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence DCP's deprecation notice for ShardedTensor (see the module doc)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ShardedTensor.*", category=FutureWarning)
        yield


def shard_dims(model: torch.nn.Module) -> dict[str, int]:
    """Qualified parameter name -> sharded dimension, for every sharded parameter.

    Example:
        >>> import torch
        >>> from interstice.elastic.sharded import shard_dims
        >>> shard_dims(torch.nn.Linear(2, 2))
        {}
    """
    return {
        f"{prefix}.{name}" if prefix else name: dim
        for prefix, module in model.named_modules()
        for name, dim in (getattr(module, "shard_dims", None) or {}).items()
    }


def _sharded(local: torch.Tensor, dim: int) -> ShardedTensor:
    """This rank's ``local`` slice along ``dim`` as a ShardedTensor (a collective)."""
    size = torch.tensor([local.shape[dim]], dtype=torch.int64)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    sizes_R = [int(s) for s in sizes]
    rank = dist.get_rank()
    offsets = [0] * local.dim()
    offsets[dim] = sum(sizes_R[:rank])
    global_shape = list(local.shape)
    global_shape[dim] = sum(sizes_R)
    metadata = ShardMetadata(offsets, list(local.shape), f"rank:{rank}/{local.device}")
    return init_from_local_shards([Shard(local, metadata)], *global_shape)


def _tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The sharded tensors of model and optimizer, keyed for DCP, as ShardedTensors.

    Their local shards share storage with the model's parameters and the optimizer's state,
    so ``dcp.load`` into this mapping writes them in place.
    """
    dims = shard_dims(model)
    parameters = dict(model.named_parameters())
    index = {id(p): i for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}
    found: dict[str, Any] = {}
    for name in sorted(dims):
        parameter = parameters[name]
        found[f"model.{name}"] = _sharded(parameter.detach(), dims[name])
        state = optimizer.state.get(parameter, {})
        for key in sorted(state):
            if torch.is_tensor(state[key]) and state[key].shape == parameter.shape:
                found[f"optimizer.{index[id(parameter)]}.{key}"] = _sharded(state[key], dims[name])
    return found


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict with every sharded parameter joined whole (a collective).

    Each sharded tensor is gathered from all ranks (``all_gather_object``: slices may differ
    in size) and concatenated along its dimension, so it loads into the unsharded model.
    """
    dims = shard_dims(model)
    state = model.state_dict()
    for name in sorted(dims):
        slices: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(slices, state[name].detach().cpu())
        state[name] = torch.cat(slices, dims[name])
    return state


def save(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank writes its slices of the sharded tensors into ``folder`` (a collective)."""
    with _quiet():
        dcp.save(_tensors(model, optimizer), checkpoint_id=folder)


def replicated_model_state(model: torch.nn.Module) -> dict[str, Any]:
    """The model's state dict with each sharded parameter replaced by :data:`SHARDED`."""
    dims = shard_dims(model)
    return {k: SHARDED if k in dims else v for k, v in model.state_dict().items()}


def replicated_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """The optimizer's state dict with the sharded parameters' tensors replaced by SHARDED."""
    state_dict = optimizer.state_dict()  # its per-parameter dicts are the optimizer's own
    sharded = _sharded_indices(model, optimizer)
    state_dict["state"] = {
        i: {
            key: SHARDED
            if i in sharded and torch.is_tensor(value) and value.shape == sharded[i]
            else value
            for key, value in state.items()
        }
        for i, state in state_dict["state"].items()
    }
    return state_dict


def _sharded_indices(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[int, torch.Size]:
    dims = shard_dims(model)
    sharded = {id(p) for name, p in model.named_parameters() if name in dims}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return {i: p.shape for i, p in enumerate(params) if id(p) in sharded}


def load(
    folder: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    model_state: dict[str, Any],
    optimizer_state: dict[str, Any],
) -> None:
    """Restore model and optimizer from rank 0's parts and the DCP ``folder`` (a collective).

    Args:
        folder: the DCP folder of the checkpoint.
        model: the model, sharded for the current world size.
        optimizer: its optimizer (its state is replaced).
        model_state: :func:`replicated_model_state` as saved.
        optimizer_state: :func:`replicated_optimizer_state` as saved.
    """
    current = model.state_dict()
    model.load_state_dict({k: current[k] if isinstance(v, str) else v
                           for k, v in model_state.items()})  # fmt: skip
    shapes = _sharded_indices(model, optimizer)
    for i, state in optimizer_state["state"].items():
        for key, value in state.items():
            if isinstance(value, str) and value == SHARDED:
                state[key] = torch.zeros(shapes[i], device=next(model.parameters()).device)
    optimizer.load_state_dict(optimizer_state)
    with _quiet():
        dcp.load(_tensors(model, optimizer), checkpoint_id=folder)
