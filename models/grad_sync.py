"""Bucketed gradient all-reduce that overlaps with backward, with one divisor per group.

Data parallelism (``torch.nn.parallel.DistributedDataParallel``) averages every gradient over
the world size. SPB needs a different divisor for different parameters (lower blocks: the
number of full workers; upper blocks: the world size), and some ranks never compute some
gradients; SplitBrain must leave its sharded parameters out. This module is the small part of
DDP's reducer those two need, written on ``torch.distributed`` collectives:

* Parameters come in ordered groups, each with a divisor set per step. Each group is cut into
  buckets of at most ``bucket_bytes``, in reverse registration order (the order backward
  produces gradients, as in DDP).
* A post-accumulate-grad hook copies each gradient into its bucket's flat buffer; when a
  bucket is full it starts an asynchronous SUM all-reduce, but only after every earlier bucket
  has started, so every rank issues the same collectives in the same order whatever its
  autograd order or whichever gradients it skips.
* ``finish()`` starts the buckets whose gradients were never computed on this rank, with zeros
  (a rank that skipped a block contributes nothing to its sum), waits for all, divides each
  bucket by its group's divisor and writes the result back to ``param.grad``.

Communication per step: one all-reduce of every registered parameter's gradient (size of the
parameters), in buckets.
"""

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

DEFAULT_BUCKET_BYTES = 25 * 2**20  # DDP's default bucket_cap_mb


@dataclass
class _Bucket:
    params: list[nn.Parameter]
    group_index: int
    flat: torch.Tensor
    offsets: list[int]
    ready: int = 0
    handle: dist.Work | None = None
    filled: set[int] = field(default_factory=set)


class BucketedAllReduce:
    """Average gradients of parameter groups across a process group, overlapping with backward.

    Args:
        groups: ordered parameter groups; every rank passes the same groups in the same order.
        process_group: the torch.distributed group (``None``: the default group).
        bucket_bytes: largest bucket, bytes.

    Usage per step: ``begin(divisors)`` before backward, ``finish()`` after it, then step the
    optimizer.
    """

    def __init__(
        self,
        groups: list[list[nn.Parameter]],
        process_group: dist.ProcessGroup | None = None,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> None:
        self._pg = process_group
        self._buckets: list[_Bucket] = []
        self._where: dict[int, tuple[int, int]] = {}  # id(param) -> (bucket, slot)
        for group_index, params in enumerate(groups):
            current: list[nn.Parameter] = []
            size = 0
            for p in reversed(params):
                if current and (size + p.numel()) * p.element_size() > bucket_bytes:
                    self._add_bucket(current, group_index)
                    current, size = [], 0
                current.append(p)
                size += p.numel()
            if current:
                self._add_bucket(current, group_index)
        self._next_launch = 0
        self._divisors: list[float] = [1.0] * len(groups)
        self._active = False
        for params in groups:
            for p in params:
                p.register_post_accumulate_grad_hook(self._on_grad)

    def _add_bucket(self, params: list[nn.Parameter], group_index: int) -> None:
        offsets = [0]
        for p in params:
            offsets.append(offsets[-1] + p.numel())
        flat = torch.zeros(offsets[-1], dtype=params[0].dtype, device=params[0].device)
        index = len(self._buckets)
        for slot, p in enumerate(params):
            self._where[id(p)] = (index, slot)
        self._buckets.append(_Bucket(params, group_index, flat, offsets))

    def begin(self, divisors: list[float]) -> None:
        """Arm the hooks for one backward pass; ``divisors[g]`` divides group g's sums."""
        self._divisors = list(divisors)
        self._next_launch = 0
        for b in self._buckets:
            b.ready, b.handle, b.filled = 0, None, set()
        self._active = True

    def _on_grad(self, p: nn.Parameter) -> None:
        if not self._active:
            return
        index, slot = self._where[id(p)]
        b = self._buckets[index]
        if slot in b.filled:  # a parameter used twice in one graph accumulates first
            return
        b.flat[b.offsets[slot] : b.offsets[slot + 1]].copy_(p.grad.reshape(-1))
        b.filled.add(slot)
        b.ready += 1
        self._launch_ready()

    def _launch_ready(self) -> None:
        # Start buckets strictly in index order so that all ranks' collectives match.
        while self._next_launch < len(self._buckets):
            b = self._buckets[self._next_launch]
            if b.ready < len(b.params):
                return
            b.handle = dist.all_reduce(b.flat, group=self._pg, async_op=True)
            self._next_launch += 1

    def finish(self) -> None:
        """Start what backward did not, wait, divide and write averaged gradients to ``.grad``."""
        for b in self._buckets[self._next_launch :]:
            for slot, p in enumerate(b.params):
                if slot in b.filled:
                    continue
                # This rank did not compute p's gradient (SPB partial worker): contribute 0.
                segment = b.flat[b.offsets[slot] : b.offsets[slot + 1]]
                if p.grad is None:
                    segment.zero_()
                else:
                    segment.copy_(p.grad.reshape(-1))
                b.filled.add(slot)
            b.ready = len(b.params)
        self._launch_ready()
        for b in self._buckets:
            b.handle.wait()
            b.flat.div_(self._divisors[b.group_index])
            for slot, p in enumerate(b.params):
                averaged = b.flat[b.offsets[slot] : b.offsets[slot + 1]].view_as(p)
                if p.grad is None:
                    p.grad = averaged.clone()
                else:
                    p.grad.copy_(averaged)
        self._active = False
