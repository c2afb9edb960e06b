"""The training interface the node agent's worker and the profiler drive.

``build_trainer`` applies one parallelism technique to one model of ``interstice.models.zoo``
and returns a ``Trainer``: ``step`` does one optimizer step over the process group, and
``state_dict`` is always the full, unsharded model and optimizer state (identical on every
rank), so that rank 0's checkpoint loads at any world size and under any parallelism.

The optimizer is SGD with momentum 0.9 (the torchvision ImageNet recipe); its state in a
checkpoint is one momentum tensor per parameter name, independent of how parameters are sharded.

Legend for tensor names: B batch, C channels, H height, W width.
"""

from collections.abc import Iterable
from typing import Literal

import torch
import torch.distributed as dist
from interstice.models.zoo import MODEL_NAMES, build_blocks, min_image_size
from torch import nn

MOMENTUM = 0.9
PARALLELISMS = ("dp", "spb", "splitbrain")


class Trainer:
    """One model under one parallelism in one process group; subclasses implement ``step``.

    Attributes:
        model: this rank's model (for SplitBrain: with the classifier sharded).
        optimizer: SGD with momentum over ``model``'s parameters.
        group: the torch.distributed process group (``None``: the default group).
        step_count: optimizer steps taken.
    """

    def __init__(self, model: nn.Module, lr: float, group: dist.ProcessGroup | None) -> None:
        self.model = model
        self.group = group
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
        self.step_count = 0
        self._src = dist.get_global_rank(group, 0) if group is not None else 0

    @property
    def world_size(self) -> int:
        """Ranks in the process group."""
        return dist.get_world_size(self.group)

    @property
    def rank(self) -> int:
        """This process's rank in the group."""
        return dist.get_rank(self.group)

    def _broadcast(self, tensors: Iterable[torch.Tensor]) -> None:
        for t in tensors:
            dist.broadcast(t.data, src=self._src, group=self.group)

    def _broadcast_buffers(self) -> None:
        # Called at the end of each step. Like DDP's broadcast_buffers=True (which broadcasts at
        # the start of a forward): BatchNorm running statistics are rank 0's, so every rank,
        # and every rank's state_dict, holds the same buffers between steps.
        self._broadcast(self.model.buffers())

    def step(self, inputs_BCHW: torch.Tensor, targets_B: torch.Tensor) -> float:
        """One optimizer step over the process group; returns this rank's mean loss."""
        raise NotImplementedError

    def set_spb_depth(self, depth: int) -> None:
        """Change the SPB depth without rebuilding (only the SPB trainer accepts depth > 0).

        Raises:
            ValueError: ``depth`` != 0 for a trainer that is not SPB.
        """
        if depth != 0:
            raise ValueError(f"spb_depth {depth}: only parallelism 'spb' takes a depth > 0")

    def _full_tensor(self, name: str, local: torch.Tensor) -> torch.Tensor:
        """The unsharded value of the tensor called ``name`` (here: not sharded)."""
        return local

    def _local_slice(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's part of the full tensor called ``name`` (here: all of it)."""
        return full

    def state_dict(self) -> dict:
        """Full (unsharded) model and optimizer state; identical on every rank.

        Returns:
            ``{"model": {name: tensor}, "momentum": {param name: tensor}, "step": int}``;
            ``model`` has the keys of ``zoo.build_blocks(model).state_dict()``.
        """
        model_state = {
            k: self._full_tensor(k, v).detach().cpu().clone()
            for k, v in self.model.state_dict().items()
        }
        momentum = {}
        for name, p in self.model.named_parameters():
            buf = self.optimizer.state.get(p, {}).get("momentum_buffer")
            if buf is not None:
                momentum[name] = self._full_tensor(name, buf).detach().cpu().clone()
        return {"model": model_state, "momentum": momentum, "step": self.step_count}

    def load_state_dict(self, state: dict) -> None:
        """Load a ``state_dict()`` written at any world size or parallelism.

        Raises:
            KeyError, RuntimeError: the state is of another model.
        """
        local = {k: self._local_slice(k, v) for k, v in state["model"].items()}
        self.model.load_state_dict(local)
        params = dict(self.model.named_parameters())
        self.optimizer.state.clear()
        for name, buf in state["momentum"].items():
            p = params[name]
            self.optimizer.state[p] = {
                "momentum_buffer": self._local_slice(name, buf).to(p.device, p.dtype).clone()
            }
        self.step_count = int(state["step"])


def build_trainer(
    model: str,
    parallelism: Literal["dp", "spb", "splitbrain"],
    spb_depth: int = 0,
    *,
    num_classes: int = 10,
    image_size: int = 32,
    lr: float = 0.01,
    device: torch.device | str = "cpu",
    group: dist.ProcessGroup | None = None,
    full_fraction: float = 0.5,
) -> Trainer:
    """Build ``model`` under ``parallelism`` in an initialised torch.distributed group.

    Every rank must call it with the same arguments; rank 0's fresh weights are broadcast.

    Args:
        model: one of ``MODEL_NAMES``.
        parallelism: ``dp`` (data parallel), ``spb`` (Structured Partial Backpropagation,
            ``interstice.models.spb``) or ``splitbrain`` (hybrid data/model parallel,
            ``interstice.models.splitbrain``).
        spb_depth: blocks the partial workers do not backpropagate through, 0..B-1 (``spb``).
        num_classes: classifier outputs.
        image_size: side of the square inputs, pixels (validated against the model).
        lr: SGD learning rate.
        device: where the model lives (``cuda`` needs the nccl backend).
        group: process group (``None``: the default group); world size 1 works.
        full_fraction: SPB's fraction of full workers per step (at least one worker).

    Returns:
        The trainer.

    Raises:
        ValueError: unknown model or parallelism, depth out of range, image size too small,
            splitbrain on a model without a VGG-style classifier, torch.distributed not
            initialised.
    """
    if model not in MODEL_NAMES:
        raise ValueError(f"model {model!r} is unknown; choose one of {', '.join(MODEL_NAMES)}")
    if parallelism not in PARALLELISMS:
        raise ValueError(f"parallelism {parallelism!r}: choose one of {', '.join(PARALLELISMS)}")
    if image_size < min_image_size(model):
        raise ValueError(
            f"image_size {image_size}: model {model!r} needs at least {min_image_size(model)}"
        )
    if not dist.is_initialized():
        raise ValueError("torch.distributed is not initialised: call init_process_group first")
    if parallelism != "spb" and spb_depth != 0:
        raise ValueError(f"spb_depth {spb_depth}: only parallelism 'spb' takes a depth > 0")
    blocks = build_blocks(model, num_classes).to(device)
    if parallelism == "splitbrain":
        from interstice.models.splitbrain import SplitBrainTrainer

        return SplitBrainTrainer(blocks, lr=lr, group=group)
    from interstice.models.spb import SPBTrainer

    return SPBTrainer(blocks, spb_depth, lr=lr, group=group, full_fraction=full_fraction)
