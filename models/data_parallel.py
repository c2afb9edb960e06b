"""Data parallelism, and the trainer interface SPB and SplitBrain extend.

Algorithm: every rank holds a full replica of the model, which starts from rank 0's weights
(``interstice.models.parallelize`` broadcasts them); each step every rank computes the
gradient g_r of its own batch's mean loss, the ranks average them, (1/W) * sum over r of g_r,
and every rank applies the same SGD step, so the replicas stay identical. This is what
``torch.nn.parallel.DistributedDataParallel`` does (Li et al., "PyTorch Distributed:
Experiences on Accelerating Data Parallel Training", VLDB 2020); it is written here on
``grad_sync.BucketedAllReduce`` because SPB and SplitBrain need what DDP cannot give: a
divisor per parameter group, gradients a rank never computes, parameters left out.

Communication per step: one SUM all-reduce of every gradient, in buckets that start during
backward, then a broadcast of the buffers (BatchNorm running statistics: rank 0's, as with
DDP's ``broadcast_buffers=True``), so ``state_dict`` is identical on every rank.

``state_dict`` is always the full, unsharded model and optimizer state, so a checkpoint
written at one world size and parallelism loads at any other. The optimizer is SGD with
momentum 0.9 (the torchvision ImageNet recipe); its state in a checkpoint is one momentum
tensor per parameter name, independent of how parameters are sharded.

Legend for tensor names: B batch, C channels, H height, W width.
"""

from collections.abc import Iterable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from interstice.models.grad_sync import BucketedAllReduce
from torch import nn

MOMENTUM = 0.9
IGNORE_INDEX = -100  # F.cross_entropy's default: a target that adds no loss


class DataParallelTrainer:
    """One model, replicated, trained over a process group; see the module docstring.

    Subclasses change what a step computes (``_forward``), how gradients are grouped and
    averaged (``_reducer_groups``, ``_divisors``) and how a tensor is sharded
    (``_full_tensor``, ``_local_slice``).

    Args:
        blocks: the model, on its device, already holding rank 0's weights on every rank
            (and, for SplitBrain, already sharded): ``parallelize.build_trainer`` prepares it.
        lr: SGD learning rate.
        group: the torch.distributed process group (``None``: the default group).

    Attributes:
        model: this rank's model.
        optimizer: SGD with momentum over ``model``'s (local) parameters.
        group: the process group.
        step_count: optimizer steps taken (restored by ``load_state_dict``).
    """

    def __init__(
        self, blocks: nn.Sequential, *, lr: float, group: dist.ProcessGroup | None = None
    ) -> None:
        self.model = blocks
        self.group = group
        self.optimizer = torch.optim.SGD(blocks.parameters(), lr=lr, momentum=MOMENTUM)
        self.step_count = 0
        self._reducer = BucketedAllReduce(self._reducer_groups(), group)

    @property
    def world_size(self) -> int:
        """Ranks in the process group, W."""
        return dist.get_world_size(self.group)

    @property
    def rank(self) -> int:
        """This process's rank in the group."""
        return dist.get_rank(self.group)

    def _reducer_groups(self) -> list[list[nn.Parameter]]:
        """Parameter groups whose gradients are all-reduced, each with its own divisor."""
        return [list(self.model.parameters())]

    def _divisors(self) -> list[float]:
        """The divisor of each of ``_reducer_groups``'s sums at this step."""
        return [self.world_size]

    def _forward(self, inputs_BCHW: torch.Tensor) -> torch.Tensor:
        """This rank's logits ``[B, classes]`` at this step."""
        return self.model(inputs_BCHW)

    def _after_reduce(self) -> None:
        """Called once the reduced gradients are in ``.grad``, before the optimizer step."""

    def step(
        self,
        inputs_BCHW: torch.Tensor,
        targets_B: torch.Tensor,
        global_batch_size: int | None = None,
    ) -> float:
        """One optimizer step over the group; every rank calls it with its own batch.

        Args:
            inputs_BCHW: this rank's inputs.
            targets_B: their class indices; ``IGNORE_INDEX`` marks padding (no loss).
            global_batch_size: G, the samples of all ranks in this step. None: every rank
                has the same B and the gradient is the mean over ranks of each rank's mean
                loss. Given: ranks may hold different B (a fixed global batch split over any
                W, ``interstice.elastic.shares``) and each rank's loss *sum* is scaled by W/G,
                so after the divide by W the gradient is the mean over the G samples.

        Returns:
            This rank's mean cross-entropy loss over its (non-padding) samples, nats.
        """
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        self._reducer.begin(self._divisors())
        logits = self._forward(inputs_BCHW)
        if global_batch_size is None:
            loss = F.cross_entropy(logits, targets_B)
            loss.backward()
        else:
            loss_sum = F.cross_entropy(logits, targets_B, reduction="sum")
            (loss_sum * (self.world_size / global_batch_size)).backward()
            loss = loss_sum.detach() / (targets_B != IGNORE_INDEX).sum().clamp(min=1)
        self._reducer.finish()
        self._after_reduce()
        self.optimizer.step()
        # Like DDP's broadcast_buffers=True (which broadcasts at the start of a forward):
        # rank 0's BatchNorm statistics everywhere, so every rank's state_dict is the same.
        broadcast(self.model.buffers(), self.group)
        self.step_count += 1
        return loss.item()

    def _full_tensor(self, name: str, local: torch.Tensor) -> torch.Tensor:
        """The unsharded value of the tensor called ``name`` (here: not sharded)."""
        return local

    def _local_slice(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's part of the full tensor called ``name`` (here: all of it)."""
        return full

    def state_dict(self) -> dict:
        """Full (unsharded) model and optimizer state; identical on every rank.

        A collective where the model is sharded (SplitBrain gathers its shards): every rank
        must call it.

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


def broadcast(tensors: Iterable[torch.Tensor], group: dist.ProcessGroup | None = None) -> None:
    """Overwrite ``tensors`` in place with the group's rank 0's values."""
    src = dist.get_global_rank(group, 0) if group is not None else 0
    for t in tensors:
        dist.broadcast(t.data, src=src, group=group)
