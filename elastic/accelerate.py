"""A plain Accelerate loop, elastic and exactly-once: the data loader and the ``State``.

The loop stays the user's: ``accelerator.prepare`` the model and the optimizer, pass the data
loader over an :class:`~interstice.elastic.ElasticSampler` through :func:`prepare_loader`
instead of ``accelerator.prepare``, and build the :class:`~interstice.elastic.State` with
:func:`elastic_state`, which adds what Accelerate owns (its gradient scaler) and the random
number generators' states to the checkpoint. The rest is the contract of
``docs/user-guide/elastic.md``: ``elastic.accumulate`` for the loss scale,
``state.step()``, ``state.should_stop()``, ``elastic.report``, ``elastic.save_final``.

Two things Accelerate does by itself are wrong across a change of world size, hence these
helpers. ``accelerator.prepare(loader)`` wraps the batch sampler in its ``BatchSamplerShard``,
which deals whole batches round-robin to the processes: the sampler's per-rank shares would
be sharded again. And a scheduler passed to ``accelerator.prepare`` steps once per process
per optimizer step (``AcceleratedScheduler``, unless ``split_batches`` or
``step_scheduler_with_optimizer=False``), so the learning rate would follow the world size
instead of the optimizer steps.

Imports: torch, numpy and accelerate besides :mod:`interstice.elastic`
(tests/test_import_rules.py); ``interstice.elastic`` itself never imports this module.
"""

import random
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.data_loader import prepare_data_loader
from accelerate.scheduler import AcceleratedScheduler
from interstice.elastic import env
from interstice.elastic.sampler import ElasticSampler
from interstice.elastic.state import State
from torch.utils.data import DataLoader


class RngState:
    """The process's random number generators in PyTorch's checkpoint protocol.

    Python's ``random``, NumPy's global generator, torch's CPU generator and, where CUDA is
    available, every CUDA device's generator: what dropout, augmentation and
    ``torch.randn`` draw from. A :class:`~interstice.elastic.State` saves rank 0's states
    (``State(rng=RngState())``) and every rank loads them, which keeps ranks that were
    seeded alike (``transformers.set_seed``, ``accelerate.utils.set_seed``) alike.

    Example:
        >>> import torch
        >>> from interstice.elastic.accelerate import RngState
        >>> saved = RngState().state_dict()
        >>> first = torch.rand(2)
        >>> RngState().load_state_dict(saved)
        >>> torch.equal(torch.rand(2), first)
        True
    """

    def state_dict(self) -> dict[str, Any]:
        """The generators' states now."""
        return {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Set the generators to the saved states (CUDA's only where both have CUDA)."""
        random.setstate(state_dict["python"])
        np.random.set_state(state_dict["numpy"])
        torch.set_rng_state(state_dict["torch"])
        cuda = state_dict.get("cuda")
        if (
            cuda is not None
            and torch.cuda.is_available()
            and len(cuda) == torch.cuda.device_count()
        ):
            torch.cuda.set_rng_state_all(cuda)


def check_world(framework_processes: int) -> None:
    """Fail unless the framework trains with every process of the group.

    Under ``torchrun`` on CPU, Accelerate (and the Trainer) distribute only when asked
    (``Accelerator(cpu=True)``, ``TrainingArguments(use_cpu=True)``); otherwise each rank
    trains a model of its own, without a gradient all-reduce, while the sampler splits the
    data as for one model.

    Args:
        framework_processes: the processes the framework trains with
            (``accelerator.num_processes``, ``args.world_size``).

    Raises:
        ValueError: they are not the process group's world size.
    """
    world_size = env.current().world_size
    if framework_processes != world_size:
        raise ValueError(
            f"the framework trains with {framework_processes} process(es), the process group "
            f"has {world_size}: on CPU use Accelerator(cpu=True) or TrainingArguments("
            "use_cpu=True) under torchrun"
        )


def prepare_loader(accelerator: Accelerator, loader: DataLoader) -> DataLoader:
    """``accelerator.prepare(loader)`` for a loader over an ``ElasticSampler``, unsharded.

    The loader keeps Accelerate's device placement (batches arrive on
    ``accelerator.device``) but not its sharding: the
    :class:`~interstice.elastic.ElasticSampler` already gives each rank its share of each
    step.

    Args:
        accelerator: the script's ``Accelerator``.
        loader: ``DataLoader(dataset, batch_sampler=ElasticSampler(...))`` (create it after
            ``state.load()``, as any loader over the sampler).

    Returns:
        The loader to iterate, one item per optimizer step.

    Raises:
        ValueError: the loader's batch sampler is not an ``ElasticSampler``.

    Example:
        >>> import torch
        >>> from accelerate import Accelerator
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> from interstice import elastic
        >>> from interstice.elastic.accelerate import prepare_loader
        >>> sampler = elastic.ElasticSampler(10, 4, shuffle=False, rank=0, world_size=1)
        >>> data = TensorDataset(torch.arange(10))
        >>> loader = prepare_loader(Accelerator(cpu=True), DataLoader(data, batch_sampler=sampler))
        >>> next(iter(loader))[0].tolist()
        [0, 1, 2, 3]
    """
    if not isinstance(loader.batch_sampler, ElasticSampler):
        raise ValueError(
            "loader: give it batch_sampler=ElasticSampler(...), got batch sampler "
            f"{type(loader.batch_sampler).__name__}"
        )
    # One process as far as Accelerate knows: its shard wrapper would deal the ranks' shares
    # round-robin again. The loader still moves each batch to the accelerator's device.
    return prepare_data_loader(
        loader,
        device=accelerator.device,
        num_processes=1,
        process_index=0,
        put_on_device=True,
        non_blocking=accelerator.non_blocking,
    )


def elastic_state(
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    sampler: ElasticSampler,
    scheduler: Any = None,
    **kwargs: Any,
) -> State:
    """The :class:`~interstice.elastic.State` of an Accelerate loop.

    Besides the model, optimizer, sampler and scheduler it checkpoints Accelerate's gradient
    scaler (mixed precision on CUDA, as ``grad_scaler``) and the random number generators
    (:class:`RngState`, as ``rng``).

    Args:
        accelerator: the script's ``Accelerator``.
        model: the model as ``accelerator.prepare`` returned it (DDP-wrapped or not).
        optimizer: the optimizer, prepared or not.
        sampler: the ``ElasticSampler`` of the loader.
        scheduler: a scheduler stepped once per optimizer step, or None. Not prepared by
            ``accelerator.prepare``, or prepared with ``step_scheduler_with_optimizer=False``
            or ``split_batches=True``.
        **kwargs: the rest of ``State``'s arguments (``checkpoint_dir``, ``total_samples``,
            ``save_every_s``, extra values such as ``world_sizes=[]``).

    Returns:
        The State (call ``load()`` next).

    Raises:
        ValueError: the scheduler would step once per process (see above), ``kwargs``
            names ``grad_scaler`` or ``rng``, or the accelerator is not distributed across
            the process group (see :func:`check_world`).
    """
    if (
        isinstance(scheduler, AcceleratedScheduler)
        and scheduler.step_with_optimizer
        and not scheduler.split_batches
    ):
        raise ValueError(
            "scheduler: an AcceleratedScheduler steps once per process per optimizer step, so "
            "its schedule would change with the world size; pass the scheduler unprepared, or "
            "use Accelerator(step_scheduler_with_optimizer=False)"
        )
    check_world(accelerator.num_processes)
    taken = {"grad_scaler", "rng"} & kwargs.keys()
    if taken:
        raise ValueError(f"{sorted(taken)}: names elastic_state uses itself")
    extra: dict[str, Any] = {"rng": RngState()}
    if accelerator.scaler is not None:
        extra["grad_scaler"] = accelerator.scaler
    return State(
        model=model, optimizer=optimizer, sampler=sampler, scheduler=scheduler, **extra, **kwargs
    )
