"""PyTorch Lightning's ``Trainer.fit``, elastic and exactly-once, with one callback.

A Lightning script keeps its ``LightningModule`` and its ``Trainer.fit`` call; it adds
:class:`ElasticCallback`, feeds ``fit`` a ``DataLoader`` whose ``batch_sampler`` is an
:class:`~interstice.elastic.ElasticSampler`, and sizes the ``Trainer`` from the launcher
(:func:`devices_and_nodes`)::

    sampler = elastic.ElasticSampler(len(train_set), global_batch_size, seed=0)
    callback = ElasticCallback(sampler, checkpoint_dir=..., total_samples=...)
    trainer = L.Trainer(**devices_and_nodes(), max_epochs=-1, use_distributed_sampler=False,
                        callbacks=[callback])
    trainer.fit(model, DataLoader(train_set, batch_sampler=sampler))

The callback drives an :class:`~interstice.elastic.State` (the contract of
``docs/user-guide/elastic.md``): one ``State.step`` per training batch (one optimizer step),
the agreed stop (the agent's ``stop`` file, SIGTERM/SIGINT), periodic and final saves,
:func:`~interstice.elastic.report` and :func:`~interstice.elastic.save_final`. The
checkpoint holds the model, the optimizers, the LR schedulers, the precision plugin (its
grad scaler), rank 0's RNG states, Lightning's loop counters, the other callbacks' states
and the module's ``on_save_checkpoint`` keys. A resume starts the sampler's epoch where the
sampler stands, with Lightning's ``current_epoch`` and ``global_step`` carried on, at any
world size. Lightning's own SIGTERM handling (it ends every rank without a checkpoint) is
replaced by the State's for the run.

Needs ``lightning`` 2.x (the ``lightning`` extra); nothing else in ``interstice.elastic``
imports it.
"""

import os
import signal
import threading
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from interstice.elastic.batch import shares
from interstice.elastic.final import save_final
from interstice.elastic.report import report
from interstice.elastic.sampler import ElasticSampler
from interstice.elastic.signals import STOP_SIGNALS
from interstice.elastic.state import State
from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states
from lightning.pytorch.callbacks import Checkpoint
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

REQUESTED_STOPS = ("signal", "stop file")  # State.stop_reason values that are not an end


def devices_and_nodes() -> dict[str, int]:
    """``Trainer`` arguments that match the launcher: ``{"devices": ..., "num_nodes": ...}``.

    Lightning checks that ``devices * num_nodes`` equals torchrun's ``WORLD_SIZE``, and an
    elastic job's world size changes from one generation to the next, so the script reads
    them at each start: ``devices`` is ``LOCAL_WORLD_SIZE`` (processes on this node),
    ``num_nodes`` is ``WORLD_SIZE // LOCAL_WORLD_SIZE``; both 1 without torchrun.

    Raises:
        ValueError: the nodes run different numbers of processes (Lightning has one
            ``devices`` for all nodes).

    Example:
        >>> from interstice.elastic.lightning import devices_and_nodes
        >>> devices_and_nodes()  # python script.py
        {'devices': 1, 'num_nodes': 1}
    """
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    world = int(os.environ.get("WORLD_SIZE", str(local)))
    if world % local:
        raise ValueError(f"WORLD_SIZE {world} is not a multiple of LOCAL_WORLD_SIZE {local}")
    return {"devices": local, "num_nodes": world // local}


def _share_weighted_allreduce(
    weight: float, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP's all-reduce (a mean over ranks) of gradients scaled by this rank's share."""
    bucket.buffer().mul_(weight)
    return default_hooks.allreduce_hook(None, bucket)


class _TrainerState:
    """What Lightning owns beside the model and the first optimizer, in PyTorch's protocol.

    The loops' state is kept at load and applied by the callback once the step count is
    known (:meth:`ElasticCallback.on_fit_start`).
    """

    def __init__(self, trainer: pl.Trainer, callback: pl.Callback) -> None:
        self.trainer = trainer
        self.callback = callback
        self.loops: dict[str, Any] | None = None

    def _callbacks(self) -> dict[str, pl.Callback]:
        return {cb.state_key: cb for cb in self.trainer.callbacks if cb is not self.callback}

    def state_dict(self) -> dict[str, Any]:
        trainer = self.trainer
        module_keys: dict[str, Any] = {}
        trainer.lightning_module.on_save_checkpoint(module_keys)
        return {
            "optimizers": [optimizer.state_dict() for optimizer in trainer.optimizers[1:]],
            "schedulers": [c.scheduler.state_dict() for c in trainer.lr_scheduler_configs],
            "precision": trainer.precision_plugin.state_dict(),
            "loops": trainer.fit_loop.state_dict(),
            "callbacks": {key: cb.state_dict() for key, cb in self._callbacks().items()},
            "module": module_keys,
            "rng": _collect_rng_states(),  # Lightning's: torch, CUDA, NumPy, Python
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        trainer = self.trainer
        for optimizer, saved in zip(trainer.optimizers[1:], state["optimizers"], strict=True):
            optimizer.load_state_dict(saved)
        configs = trainer.lr_scheduler_configs
        for config, saved in zip(configs, state["schedulers"], strict=True):
            config.scheduler.load_state_dict(saved)
        trainer.precision_plugin.load_state_dict(state["precision"])
        for key, cb in self._callbacks().items():
            if key in state["callbacks"]:
                cb.load_state_dict(state["callbacks"][key])
        trainer.lightning_module.on_load_checkpoint(state["module"])
        _set_rng_states(state["rng"])
        self.loops = state["loops"]


class ElasticCallback(Checkpoint):
    """Makes ``Trainer.fit`` elastic and exactly-once (see the module doc for the script).

    It is Lightning's checkpoint callback for the run (a ``Checkpoint``: Lightning adds no
    ``ModelCheckpoint`` of its own and runs it after the other callbacks, so theirs see each
    batch before the sampler moves on). Each training batch must be one optimizer step of
    the sampler's global batch: ``accumulate_grad_batches`` must be 1. The loss a
    ``training_step`` returns is taken as the mean over this rank's samples; the callback
    turns it into the job's mean (``State.loss``). When the ranks' shares differ
    (``global_batch_size`` not a multiple of the world size) it weights each rank's gradient
    by its share in DDP's all-reduce, so a step's gradient is the global batch's mean at any
    world size (a DDP communication hook: the strategy must not set one of its own).

    Args:
        sampler: the ``batch_sampler`` of the training ``DataLoader``.
        checkpoint_dir: as for :class:`~interstice.elastic.State` (None:
            ``INTERSTICE_CHECKPOINT_DIR``).
        total_samples: the sample budget (None: ``INTERSTICE_TOTAL_SAMPLES``; with neither,
            Lightning's ``max_epochs``/``max_steps`` or a stop end the run).
        save_every_s: seconds between timed saves (agreed by the ranks), None for none.
        save_every_steps: steps between saves, None for none.
        run_dir: folder of the agent's ``stop`` file (None: ``INTERSTICE_RUN_DIR``).

    Attributes:
        state: the run's :class:`~interstice.elastic.State` (from ``on_fit_start``); its
            ``world_sizes`` extra lists the world size of each run of the job.

    Raises:
        ValueError: (at ``fit``) ``accumulate_grad_batches`` is not 1, the model has no
            optimizer, or the training loader does not use ``sampler``.
    """

    def __init__(
        self,
        sampler: ElasticSampler,
        checkpoint_dir: str | os.PathLike | None = None,
        total_samples: int | None = None,
        save_every_s: float | None = 60.0,
        save_every_steps: int | None = None,
        run_dir: str | os.PathLike | None = None,
    ) -> None:
        self.sampler = sampler
        self.checkpoint_dir = checkpoint_dir
        self.total_samples = total_samples
        self.save_every_s = save_every_s
        self.save_every_steps = save_every_steps
        self.run_dir = run_dir
        self.state: State | None = None
        self._handlers: dict[int, Any] = {}

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if trainer.accumulate_grad_batches != 1:
            raise ValueError(
                "accumulate_grad_batches must be 1 with ElasticCallback: a batch is one "
                "optimizer step of the sampler's global batch"
            )
        # Lightning computes an epoch's batch count once per loader; the sampler's passes
        # differ (a resumed epoch is shorter, an epoch end carries into the next), so the
        # loader is re-read at each epoch: the same DataLoader, its new length.
        trainer.reload_dataloaders_every_n_epochs = 1

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.optimizers:
            raise ValueError("ElasticCallback needs an optimizer (configure_optimizers)")
        self.state = State(
            model=pl_module, optimizer=trainer.optimizers[0], sampler=self.sampler,
            checkpoint_dir=self.checkpoint_dir, save_every_steps=self.save_every_steps,
            save_every_s=self.save_every_s, total_samples=self.total_samples,
            run_dir=self.run_dir, lightning=_TrainerState(trainer, self), world_sizes=[],
        )  # fmt: skip
        # Lightning registers its SIGTERM handler after this hook; on_train_start puts the
        # State's back.
        self._handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
        self._weight_shares(trainer)
        if self.state.load():
            self._resume_loops(trainer)
        self.state.world_sizes.append(trainer.world_size)

    def _weight_shares(self, trainer: pl.Trainer) -> None:
        ddp = trainer.strategy.model
        world_size = trainer.world_size
        sizes = shares(self.sampler.global_batch_size, world_size)
        if isinstance(ddp, DistributedDataParallel) and len(set(sizes)) > 1:
            weight = sizes[trainer.global_rank] * world_size / self.sampler.global_batch_size
            ddp.register_comm_hook(weight, _share_weighted_allreduce)

    def _resume_loops(self, trainer: pl.Trainer) -> None:
        """Lightning's counters from the checkpoint, at the start of the sampler's epoch.

        Lightning's own mid-epoch restart counts the batches of the epoch already done and
        ends the epoch after its first length less those; the sampler's pass from its
        position is the rest of the epoch whatever the world size, so the loops start it
        as a fresh epoch, keeping ``global_step`` and ``current_epoch``.
        """
        loops = self.state.lightning.loops
        fit_loop = trainer.fit_loop
        fit_loop.load_state_dict(loops)
        fit_loop.restarting = False
        epoch = self.sampler.state_dict()["epoch"]
        for tracker in (fit_loop.epoch_progress.total, fit_loop.epoch_progress.current):
            tracker.ready = tracker.started = tracker.processed = tracker.completed = epoch
        fit_loop.epoch_loop._batches_that_stepped = self.state.steps  # one step per batch

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loaders = trainer.fit_loop._combined_loader.flattened
        if not any(getattr(loader, "batch_sampler", None) is self.sampler for loader in loaders):
            raise ValueError(
                "the training DataLoader must use the callback's sampler: "
                "DataLoader(dataset, batch_sampler=sampler) and "
                "Trainer(use_distributed_sampler=False)"
            )
        if threading.current_thread() is threading.main_thread():
            for signum, handler in self._handlers.items():
                signal.signal(signum, handler)
        if self.state.should_stop():  # a stop asked before the first step
            self._stop(trainer)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        state = self.state
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        loss_sum = None
        if isinstance(loss, torch.Tensor):
            loss_sum = loss.detach() * self.sampler.samples_per_step
        state.step(loss_sum=loss_sum)
        report(step=state.steps, samples=state.samples, loss=state.loss)
        if state.should_stop():
            self._stop(trainer)

    def _stop(self, trainer: pl.Trainer) -> None:
        self.state.save()  # at once: the grace period runs
        trainer.should_stop = True
        if self.state.stop_reason in REQUESTED_STOPS:
            # Lightning validates when told to stop (as for early stopping): a rescale or a
            # reclaim leaves at once instead.
            trainer.limit_val_batches = 0

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        state = self.state
        state.save()  # nothing when this step is saved; else Lightning's own limit ended it
        stopped = state.stop_reason in REQUESTED_STOPS
        outcome = "stopped" if stopped else "finished"
        report(state.steps, state.samples, state.loss, state=outcome)
        if not stopped:
            save_final(pl_module)
