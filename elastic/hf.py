"""Hugging Face ``transformers.Trainer``, elastic and exactly-once: a callback and a mixin.

A Trainer script changes two names: ``Trainer`` becomes :class:`ElasticTrainer` (or a
Trainer subclass gets :class:`ElasticTrainerMixin` first in its bases), and
``callbacks=[ElasticCallback(...)]`` says where the checkpoint goes (without one the
trainer adds one that reads the job's ``INTERSTICE_*`` environment). ``trainer.train()``
then:

- trains from an :class:`~interstice.elastic.ElasticSampler`: each optimizer step takes the
  next ``global_batch_size`` positions of the seeded epoch order, split across the ranks of
  the moment; the trainer's loader is a plain ``DataLoader`` (not sharded again by
  Accelerate) whose items are this rank's share of a step, in
  ``gradient_accumulation_steps`` micro-batches;
- runs until the sample budget (``total_samples``; ``args.max_steps`` is set to its steps),
  or until the agent's ``stop`` file or SIGTERM/SIGINT, the same step on every rank;
- checkpoints with an :class:`~interstice.elastic.State`: the model, the optimizer, the
  scheduler, the sampler's position, Accelerate's gradient scaler, the random number
  generators and the ``TrainerState``'s counters (``global_step``, ``epoch``,
  ``total_flos``, ``num_input_tokens_seen``), restored in ``on_train_begin`` whatever world
  size wrote them. The Trainer's own ``resume_from_checkpoint`` is not used: it skips
  ``global_step % steps_per_epoch`` batches of a loader whose batches depend on the world
  size;
- reports progress with :func:`~interstice.elastic.report` after each step and writes the
  finished model with :func:`~interstice.elastic.save_final`.

Imports: torch and transformers (accelerate through :mod:`interstice.elastic.accelerate`)
besides :mod:`interstice.elastic` (tests/test_import_rules.py); ``interstice.elastic`` itself
never imports this module.
"""

import copy
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from interstice.elastic import env
from interstice.elastic.accelerate import check_world, elastic_state
from interstice.elastic.batch import shares
from interstice.elastic.final import save_final
from interstice.elastic.report import report
from interstice.elastic.sampler import ElasticSampler
from interstice.elastic.state import State
from torch.utils.data import DataLoader, Dataset
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

_COUNTERS = ("global_step", "epoch", "total_flos", "num_input_tokens_seen")


class _TrainerCounters:
    """The ``TrainerState``'s loop counters in PyTorch's checkpoint protocol."""

    def __init__(self, trainer_state: TrainerState) -> None:
        self.trainer_state = trainer_state

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self.trainer_state, name) for name in _COUNTERS}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name, value in state_dict.items():
            setattr(self.trainer_state, name, value)


class _StepBatches:
    """The trainer's batch sampler: this rank's share of each step from the sampler's
    position, split into ``parts`` micro-batches (the gradient accumulation steps).

    Each pass reads the position when it starts and walks a copy of the sampler, so batches
    fetched ahead (workers, prefetching) never move the position: only ``State.step`` does.
    A pass yields steps until the trainer leaves it (its ``max_steps`` or the agreed stop),
    and nothing when the stop is agreed before the first step.
    """

    def __init__(self, callback: "ElasticCallback", parts: int, steps: int) -> None:
        self.callback = callback
        self.parts = parts
        self.steps = steps

    def __iter__(self) -> Iterator[list[int]]:
        state = self.callback.state
        if state is not None and state.should_stop():
            return
        cursor = copy.copy(self.callback.sampler)
        for _ in range(self.steps):
            indices = next(iter(cursor))
            if len(indices) < self.parts:
                raise ValueError(
                    f"gradient_accumulation_steps={self.parts} exceeds this rank's share of "
                    f"{len(indices)} samples per step: lower it or raise global_batch_size"
                )
            start = 0
            for size in shares(len(indices), self.parts):
                yield indices[start : start + size]
                start += size
            cursor.advance()

    def __len__(self) -> int:
        return self.steps * self.parts


class ElasticCallback(TrainerCallback):
    """Checkpoint, resume, agreed stop and progress reports for a ``transformers.Trainer``.

    Use it with :class:`ElasticTrainer` (or :class:`ElasticTrainerMixin`), which feeds the
    trainer from :attr:`sampler`. Every argument left None falls back to the job's
    environment (see :class:`~interstice.elastic.Context`), then to the Trainer's arguments.

    Args:
        checkpoint_dir: the job's checkpoint folder (``State``'s); None:
            ``INTERSTICE_CHECKPOINT_DIR``.
        total_samples: the sample budget; None: ``INTERSTICE_TOTAL_SAMPLES``, else
            ``args.max_steps`` steps when set, else ``args.num_train_epochs`` epochs of the
            training set. ``args.max_steps`` becomes ``ceil(total_samples /
            global_batch_size)`` (the step the budget is reached, and the schedule's length).
        global_batch_size: samples per optimizer step at any world size; None:
            ``INTERSTICE_GLOBAL_BATCH_SIZE``, else ``per_device_train_batch_size * world size
            * gradient_accumulation_steps`` of the run that binds it (pass it, or the job's
            variable, to keep it across world sizes).
        save_every_s: also save every this many seconds (``State``'s).
        save_every_steps: also save every this many steps (``State``'s).
        run_dir: the node's run folder (its ``stop`` file); None: ``INTERSTICE_RUN_DIR``.
        **extra: further values for the checkpoint (``State``'s ``**extra``), e.g.
            ``world_sizes=[]``.

    Attributes:
        sampler: the :class:`~interstice.elastic.ElasticSampler` (set when the trainer is
            bound). ``sampler.current_share()`` is the step just trained until this
            callback's ``on_step_end`` moves the sampler: read it in ``on_optimizer_step``.
        state: the :class:`~interstice.elastic.State` (set in ``on_train_begin``).

    Raises:
        ValueError: at binding, the global batch is smaller than the world size, the
            trainer's training set has no length (an iterable data set), or the Trainer does
            not train with every process of the group (on CPU under ``torchrun``:
            ``TrainingArguments(use_cpu=True)``).
    """

    def __init__(
        self,
        checkpoint_dir: str | Path | None = None,
        total_samples: int | None = None,
        global_batch_size: int | None = None,
        save_every_s: float | None = 60.0,
        save_every_steps: int | None = None,
        run_dir: str | Path | None = None,
        **extra: Any,
    ) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.total_samples = total_samples
        self.global_batch_size = global_batch_size
        self.save_every_s = save_every_s
        self.save_every_steps = save_every_steps
        self.run_dir = run_dir
        self.extra = extra
        self.sampler: ElasticSampler | None = None
        self.state: State | None = None
        self.trainer: Trainer | None = None
        self._loss: torch.Tensor | None = None  # this step's training_step losses, summed

    def bind(self, trainer: Trainer) -> None:
        """Take the trainer's data set and arguments: the sampler, the budget, ``max_steps``."""
        ctx = env.current()
        args = trainer.args
        check_world(args.world_size)
        dataset = trainer.train_dataset
        if dataset is None or not hasattr(dataset, "__len__"):
            raise ValueError("train_dataset: the elastic trainer needs a data set with a length")
        batch = self.global_batch_size or ctx.global_batch_size
        if batch is None:
            batch = args.per_device_train_batch_size * ctx.world_size
            batch *= args.gradient_accumulation_steps
        if self.total_samples is None:
            self.total_samples = ctx.total_samples
        if self.total_samples is None:
            if args.max_steps > 0:
                self.total_samples = args.max_steps * batch
            else:
                self.total_samples = math.ceil(args.num_train_epochs * len(dataset))
        seed = args.data_seed if args.data_seed is not None else args.seed
        self.global_batch_size = batch
        self.sampler = ElasticSampler(
            len(dataset), batch, seed=seed, drop_last=args.dataloader_drop_last
        )
        shares(batch, ctx.world_size)  # raises when a rank would get no sample
        args.max_steps = math.ceil(self.total_samples / batch)
        self.trainer = trainer

    def add_loss(self, loss: torch.Tensor) -> None:
        """Add one micro-batch's loss as ``training_step`` returned it."""
        self._loss = loss if self._loss is None else self._loss + loss

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs
    ) -> None:
        trainer = self.trainer
        if trainer is None:
            raise ValueError(
                "ElasticCallback: train with ElasticTrainer (or a Trainer subclass with "
                "ElasticTrainerMixin first in its bases), which feeds it the sampler"
            )
        self.state = elastic_state(
            trainer.accelerator,
            model=trainer.model,
            optimizer=trainer.optimizer,
            sampler=self.sampler,
            scheduler=trainer.lr_scheduler,
            checkpoint_dir=self.checkpoint_dir,
            save_every_steps=self.save_every_steps,
            save_every_s=self.save_every_s,
            total_samples=self.total_samples,
            run_dir=self.run_dir,
            trainer_state=_TrainerCounters(state),
            **self.extra,
        )
        self.state.load()
        # The trainer took these before this hook; a resumed run counts from its own start.
        trainer._globalstep_last_logged = state.global_step
        trainer._initial_global_step = state.global_step
        trainer._initial_num_input_tokens_seen = state.num_input_tokens_seen
        if self.state.should_stop():
            control.should_training_stop = True

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs
    ) -> None:
        elastic = self.state
        # training_step's losses average to what DDP minimises (the global batch's mean loss
        # with num_items_in_batch, else the mean of the ranks' means): as a sum over this
        # rank's share of the global batch, State adds the ranks' and divides by the batch.
        loss_sum = None
        if self._loss is not None:
            loss_sum = self._loss * (self.global_batch_size / env.current().world_size)
        self._loss = None
        elastic.step(loss_sum=loss_sum)
        state.epoch = elastic.samples / self.sampler.dataset_len
        scheduler = self.trainer.lr_scheduler
        metrics = {"lr": scheduler.get_last_lr()[0]} if scheduler is not None else {}
        report(step=elastic.steps, samples=elastic.samples, loss=elastic.loss, **metrics)
        if elastic.should_stop():
            control.should_training_stop = True
            elastic.save()  # now: the grace period runs, the trainer's epilogue can wait

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs
    ) -> None:
        elastic = self.state
        elastic.save()
        outcome = "finished" if elastic.finished else "stopped"
        report(elastic.steps, elastic.samples, elastic.loss, state=outcome)
        if elastic.finished:
            save_final(self.trainer.model)


class ElasticTrainerMixin:
    """Put before ``Trainer`` (or a subclass of it) in a class's bases to make it elastic.

    It feeds the training loop from the :class:`ElasticCallback`'s sampler (the callback is
    added with its defaults when ``callbacks`` holds none) and passes the loss of each
    micro-batch to the callback. Evaluation and prediction loaders are the Trainer's own.

    Example:
        >>> from transformers import Seq2SeqTrainer
        >>> from interstice.elastic.hf import ElasticTrainerMixin
        >>> class ElasticSeq2SeqTrainer(ElasticTrainerMixin, Seq2SeqTrainer):
        ...     pass
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        callbacks = [c for c in self.callback_handler.callbacks if isinstance(c, ElasticCallback)]
        if not callbacks:
            callbacks = [ElasticCallback()]
            self.add_callback(callbacks[0])
        self.elastic_callback: ElasticCallback = callbacks[0]
        self.elastic_callback.bind(self)

    def get_train_dataloader(self) -> DataLoader:
        """A plain loader over the sampler's steps (the trainer does not prepare it)."""
        dataset: Dataset = self.train_dataset
        collator = self.data_collator
        if _is_hf_dataset(dataset):
            dataset = self._remove_unused_columns(dataset, description="training")
        else:
            collator = self._get_collator_with_removed_columns(collator, description="training")
        steps = _StepBatches(
            self.elastic_callback, self.args.gradient_accumulation_steps, self.args.max_steps
        )
        return DataLoader(
            dataset,
            batch_sampler=steps,
            collate_fn=collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory and self.args.device.type == "cuda",
        )

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        loss = super().training_step(*args, **kwargs)
        self.elastic_callback.add_loss(loss)
        return loss


class ElasticTrainer(ElasticTrainerMixin, Trainer):
    """``transformers.Trainer`` fed by an ``ElasticSampler`` and checkpointed by a ``State``.

    Takes the Trainer's arguments; see the module doc and :class:`ElasticCallback`.
    """


def _is_hf_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` is a ``datasets.Dataset`` (without importing ``datasets``)."""
    return type(dataset).__module__.startswith("datasets.")
