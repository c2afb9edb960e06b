"""A resumable sampler whose sample order does not depend on the world size.

The data of a job is one stream: epoch ``e`` is the permutation of ``range(dataset_len)``
drawn by ``torch.randperm`` from a generator seeded with ``seed + e`` (the identity when
``shuffle=False``), and epochs follow one another. Each optimizer step consumes the next
``global_batch_size`` positions of the stream, split across the ranks of the moment in
contiguous slices: rank ``r`` of ``W`` takes ``G // W`` positions, plus one when
``r < G % W`` (see :func:`interstice.elastic.shares`). The position is all the state there is
(epoch, offset within the epoch), so a run stopped after any step resumes at any world size
at the next unseen index: within an epoch no index is skipped or repeated.

Epoch ends: with ``drop_last=False`` (default) every step has exactly ``global_batch_size``
samples, and the step that reaches the end of an epoch takes its last indices and completes
itself with the first ones of the next epoch (nothing dropped, the global batch never
shrinks). With ``drop_last=True`` the ``dataset_len % global_batch_size`` positions left at
the end of each epoch are skipped and every step lies inside one epoch.
"""

from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from interstice.elastic.batch import shares
from torch.utils.data import Sampler


class ElasticSampler(Sampler[list[int]]):
    """This rank's share of each optimizer step's global batch, resumable at any world size.

    Use it as a DataLoader's ``batch_sampler``: each item is the list of dataset indices this
    rank trains in one optimizer step (``shares(global_batch_size, world_size)[rank]`` of
    them). One pass (``iter``) runs from the current position to the end of the epoch; the
    position moves only when :meth:`advance` is called after a step (``State.step`` does), so a
    DataLoader that prefetches does not move it, and a new pass after :meth:`load_state_dict`
    starts at the restored position. Create the DataLoader's iterator after ``State.load()``.
    For a data set that takes a list of indices at once (``TensorDataset``, a memory-mapped
    array), ``DataLoader(dataset, sampler=sampler, batch_size=None)`` fetches each step's
    share in one call instead of sample by sample.

    Args:
        dataset_len: number of samples in the data set (>= 1).
        global_batch_size: samples per optimizer step, whole job (>= the world size).
        seed: seeds the permutation of each epoch (epoch ``e`` uses ``seed + e``).
        shuffle: permute each epoch; False keeps the data set's order.
        drop_last: skip the incomplete batch at each epoch's end (see the module doc).
        rank: this process's rank; None reads ``torch.distributed`` at each use, once per
            pass for the pass (0 without).
        world_size: None reads ``torch.distributed`` likewise (1 without a process group).

    Raises:
        ValueError: ``dataset_len`` or ``global_batch_size`` < 1, or ``drop_last`` with a
            global batch larger than the data set.

    Example:
        >>> from interstice.elastic import ElasticSampler
        >>> sampler = ElasticSampler(10, 4, seed=0, shuffle=False, rank=1, world_size=2)
        >>> next(iter(sampler))  # global positions 0..3; rank 1 of 2 takes the second half
        [2, 3]
        >>> sampler.advance(); sampler.state_dict()
        {'epoch': 0, 'offset': 4, 'dataset_len': 10, 'seed': 0}
    """

    def __init__(
        self,
        dataset_len: int,
        global_batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if dataset_len < 1:
            raise ValueError(f"dataset_len must be >= 1, got {dataset_len}")
        if global_batch_size < 1:
            raise ValueError(f"global_batch_size must be >= 1, got {global_batch_size}")
        if drop_last and global_batch_size > dataset_len:
            raise ValueError(
                f"drop_last with global_batch_size {global_batch_size} > dataset_len "
                f"{dataset_len} leaves no step"
            )
        self.dataset_len = dataset_len
        self.global_batch_size = global_batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self._rank = rank
        self._world_size = world_size
        self.epoch = 0
        self.offset = 0
        self._permutations: dict[int, torch.Tensor] = {}
        self._orders: dict[int, list[int]] = {}  # the same as lists (cheap slices per step)

    @property
    def rank(self) -> int:
        """This process's rank now."""
        if self._rank is not None:
            return self._rank
        return dist.get_rank() if dist.is_initialized() else 0

    @property
    def world_size(self) -> int:
        """The world size now."""
        if self._world_size is not None:
            return self._world_size
        return dist.get_world_size() if dist.is_initialized() else 1

    @property
    def samples_per_step(self) -> int:
        """Samples this rank trains per optimizer step at the current world size.

        Raises:
            ValueError: the world is larger than the global batch (a rank would get none).
        """
        return shares(self.global_batch_size, self.world_size)[self.rank]

    def permutation(self, epoch: int) -> torch.Tensor:
        """The dataset indices in the order epoch ``epoch`` visits them (int64, ``[N]``)."""
        if epoch not in self._permutations:
            if self.shuffle:
                generator = torch.Generator().manual_seed(self.seed + epoch)
                order_N = torch.randperm(self.dataset_len, generator=generator)
            else:
                order_N = torch.arange(self.dataset_len)
            self._permutations = {e: p for e, p in self._permutations.items() if e >= epoch - 1}
            self._permutations[epoch] = order_N
        return self._permutations[epoch]

    def _order(self, epoch: int) -> list[int]:
        """:meth:`permutation` as a list, the current and previous epochs' kept."""
        if epoch not in self._orders:
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = self.permutation(epoch).tolist()
        return self._orders[epoch]

    def _normalised(self, epoch: int, offset: int) -> tuple[int, int]:
        left = self.dataset_len - offset
        if left == 0 or (self.drop_last and left < self.global_batch_size):
            return epoch + 1, 0
        return epoch, offset

    def _segments(self, epoch: int, offset: int) -> list[tuple[int, int, int]]:
        """The step starting at (epoch, offset): ``(epoch, start, stop)`` position ranges."""
        segments: list[tuple[int, int, int]] = []
        taken = 0
        while taken < self.global_batch_size:
            epoch, offset = self._normalised(epoch, offset)
            take = min(self.global_batch_size - taken, self.dataset_len - offset)
            segments.append((epoch, offset, offset + take))
            offset += take
            taken += take
        return segments

    def _after_step(self, epoch: int, offset: int) -> tuple[int, int]:
        last_epoch, _, stop = self._segments(epoch, offset)[-1]
        return self._normalised(last_epoch, stop)

    def _share_range(self) -> tuple[int, int]:
        """This rank's positions ``[first, last)`` within each step, at the current world."""
        rank, sizes = self.rank, shares(self.global_batch_size, self.world_size)
        first = sum(sizes[:rank])
        return first, first + sizes[rank]

    def _rank_segments(
        self, epoch: int, offset: int, share: tuple[int, int] | None = None
    ) -> list[tuple[int, int, int]]:
        """This rank's contiguous part of the step starting at (epoch, offset)."""
        first, last = share or self._share_range()
        mine, seen = [], 0
        for e, start, stop in self._segments(epoch, offset):
            lo, hi = max(start, start + first - seen), min(stop, start + last - seen)
            if lo < hi:
                mine.append((e, lo, hi))
            seen += stop - start
        return mine

    def _pairs(self, segments: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
        return [(e, i) for e, start, stop in segments for i in self._indices([(e, start, stop)])]

    def _indices(self, segments: list[tuple[int, int, int]]) -> list[int]:
        indices: list[int] = []
        for e, start, stop in segments:
            indices += self._order(e)[start:stop]
        return indices

    def global_batch(self) -> list[tuple[int, int]]:
        """The next step's whole global batch as ``(epoch, dataset index)`` pairs.

        Example:
            >>> from interstice.elastic import ElasticSampler
            >>> ElasticSampler(3, 2, shuffle=False, rank=0, world_size=1).global_batch()
            [(0, 0), (0, 1)]
        """
        return self._pairs(self._segments(self.epoch, self.offset))

    def current_share(self) -> list[tuple[int, int]]:
        """This rank's part of the next step as ``(epoch, dataset index)`` pairs.

        What the step being trained holds when called before :meth:`advance` (for records
        such as the examples' ``--record-samples``).

        Example:
            >>> from interstice.elastic import ElasticSampler
            >>> ElasticSampler(5, 3, shuffle=False, rank=0, world_size=2).current_share()
            [(0, 0), (0, 1)]
        """
        return self._pairs(self._rank_segments(self.epoch, self.offset))

    def advance(self, steps: int = 1) -> None:
        """Move the position past ``steps`` optimizer steps (after they were trained).

        Example:
            >>> from interstice.elastic import ElasticSampler
            >>> sampler = ElasticSampler(5, 3, shuffle=False, rank=0, world_size=1)
            >>> sampler.advance(2); (sampler.epoch, sampler.offset)  # 6 = one epoch + 1
            (1, 1)
        """
        epoch, offset = self._normalised(self.epoch, self.offset)
        for _ in range(steps):
            epoch, offset = self._after_step(epoch, offset)
        self.epoch, self.offset = epoch, offset

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's indices for each step from the position to the end of its epoch."""
        epoch, offset = self._normalised(self.epoch, self.offset)
        first_epoch, share = epoch, self._share_range()  # one world per pass
        while epoch == first_epoch:
            yield self._indices(self._rank_segments(epoch, offset, share))
            epoch, offset = self._after_step(epoch, offset)

    def __len__(self) -> int:
        """Steps from the position to the end of its epoch (what one pass yields)."""
        epoch, offset = self._normalised(self.epoch, self.offset)
        left = self.dataset_len - offset
        if self.drop_last:
            return left // self.global_batch_size
        return -(-left // self.global_batch_size)

    def state_dict(self) -> dict[str, Any]:
        """The position: ``epoch`` and ``offset`` (global position within the epoch).

        ``dataset_len`` and ``seed`` ride along so that a resume on other data fails loudly.
        """
        epoch, offset = self._normalised(self.epoch, self.offset)
        return {
            "epoch": epoch,
            "offset": offset,
            "dataset_len": self.dataset_len,
            "seed": self.seed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the position of ``state`` (saved at any world size).

        Raises:
            ValueError: the state was saved for another data set length or seed.
        """
        for key in ("dataset_len", "seed"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"sampler state has {key}={state[key]}, this sampler {getattr(self, key)}"
                )
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])
