"""The choice of parallelism, in one place: validate a layout, then apply it to a model.

Three techniques, one module each:

* ``dp`` — data parallelism (``interstice.models.data_parallel``);
* ``spb`` — Structured Partial Backpropagation at a depth d (``interstice.models.spb``);
* ``splitbrain`` — replicated convolutions, sharded classifier (``interstice.models.splitbrain``).

``Layout`` says which one and with what settings, and checks it against a world size and a
model before anything is built; ``build_trainer`` builds the model and applies the technique
in a fixed order (see the comments there). Both raise ``ValueError`` naming the value to
change, so the worker and the profiler report a bad job in one line.

Legend for tensor names: B batch, C channels, H height, W width.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist
from interstice.models.data_parallel import DataParallelTrainer, broadcast
from interstice.models.spb import SPBTrainer, check_depth
from interstice.models.splitbrain import SplitBrainTrainer, find_classifier, shard_classifier
from interstice.models.zoo import MODEL_NAMES, build_blocks, min_image_size
from torch import nn

from interstice.wire import PARALLELISMS, Parallelism


@dataclass(frozen=True)
class Layout:
    """How a job's model is parallelised.

    Attributes:
        parallelism: ``dp``, ``spb`` or ``splitbrain``.
        spb_depth: blocks SPB's partial workers do not backpropagate through, 0..B-1;
            must be 0 unless ``parallelism`` is ``spb``.
        full_fraction: SPB's fraction of full workers per step, in (0, 1].

    Raises:
        ValueError: at construction, a value that no model or world size could accept,
            naming it.
    """

    parallelism: Parallelism = "dp"
    spb_depth: int = 0
    full_fraction: float = 0.5

    def __post_init__(self) -> None:
        if self.parallelism not in PARALLELISMS:
            raise ValueError(
                f"parallelism {self.parallelism!r}: choose one of {', '.join(PARALLELISMS)}"
            )
        if self.spb_depth < 0:
            raise ValueError(f"spb_depth {self.spb_depth} must be >= 0")
        if self.parallelism != "spb" and self.spb_depth != 0:
            raise ValueError(
                f"spb_depth {self.spb_depth}: only parallelism 'spb' takes a depth > 0; "
                "set spb_depth to 0 or parallelism to 'spb'"
            )
        if not 0 < self.full_fraction <= 1:
            raise ValueError(f"full_fraction {self.full_fraction} must be in (0, 1]")

    def check(self, blocks: nn.Sequential, world_size: int) -> None:
        """Raise ``ValueError`` unless this layout can train ``blocks`` on ``world_size`` ranks.

        Args:
            blocks: the unsharded model (may live on the ``meta`` device).
            world_size: ranks W of the process group.

        Raises:
            ValueError: ``spb_depth`` beyond the model's blocks; SplitBrain on a model without
                a VGG-style classifier, or on more ranks than its first classifier layer has
                outputs to shard.
        """
        if world_size < 1:
            raise ValueError(f"world size {world_size} must be >= 1")
        if self.parallelism == "spb":
            check_depth(blocks, self.spb_depth)
        if self.parallelism == "splitbrain":
            first = next(m for m in find_classifier(blocks).children() if isinstance(m, nn.Linear))
            if world_size > first.out_features:
                raise ValueError(
                    f"world size {world_size}: SplitBrain shards the classifier's first layer "
                    f"({first.out_features} outputs) across ranks, one output at least each; "
                    f"lower the job's max_nodes to {first.out_features} or use parallelism 'dp'"
                )


def build_trainer(
    model: str,
    layout: Layout,
    *,
    num_classes: int = 10,
    image_size: int = 32,
    lr: float = 0.01,
    device: torch.device | str = "cpu",
    group: dist.ProcessGroup | None = None,
) -> DataParallelTrainer:
    """Build ``model`` and train it under ``layout`` in an initialised torch.distributed group.

    Every rank must call it with the same arguments (each may seed its own fresh weights:
    rank 0's are the ones kept).

    Args:
        model: one of ``MODEL_NAMES``.
        layout: the technique and its settings.
        num_classes: classifier outputs.
        image_size: side of the square inputs, pixels (checked against the model).
        lr: SGD learning rate.
        device: where the model lives (``cuda`` needs the nccl backend).
        group: process group (``None``: the default group); world size 1 works.

    Returns:
        The trainer: ``DataParallelTrainer``, ``SPBTrainer`` or ``SplitBrainTrainer``.

    Raises:
        ValueError: unknown model, image size too small, torch.distributed not initialised,
            or a layout this model and world size cannot take (``Layout.check``).
    """
    if model not in MODEL_NAMES:
        raise ValueError(f"model {model!r} is unknown; choose one of {', '.join(MODEL_NAMES)}")
    if image_size < min_image_size(model):
        raise ValueError(
            f"image_size {image_size}: model {model!r} needs at least {min_image_size(model)}"
        )
    if not dist.is_initialized():
        raise ValueError("torch.distributed is not initialised: call init_process_group first")
    world_size = dist.get_world_size(group)
    # 1. Check on a shape-only copy first: a bad layout costs no allocation and no collective,
    #    and every rank raises the same error before any rank waits in a broadcast.
    with torch.device("meta"):
        layout.check(build_blocks(model, num_classes), world_size)
    # 2. Build the full model on its device, then make every rank start from rank 0's
    #    weights: before sharding, because SplitBrain's shards must be cut from one tensor.
    blocks = build_blocks(model, num_classes).to(device)
    broadcast(blocks.state_dict().values(), group)
    if layout.parallelism == "splitbrain":
        # 3. Shard the classifier before the trainer exists: its optimizer and its gradient
        #    hooks must hold the local shards, not the full layers they replace.
        shard_classifier(blocks, dist.get_rank(group), world_size, group)
        return SplitBrainTrainer(blocks, lr=lr, group=group)
    # 4. The trainer registers its all-reduce hooks on the final parameters (upper blocks
    #    first for SPB, so their buckets start first during backward).
    if layout.parallelism == "spb":
        return SPBTrainer(
            blocks, layout.spb_depth, lr=lr, group=group, full_fraction=layout.full_fraction
        )
    return DataParallelTrainer(blocks, lr=lr, group=group)
