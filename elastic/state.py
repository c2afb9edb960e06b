"""Everything a job must carry across a rescale, and the agreement on when to stop.

Like Horovod elastic's ``State``: the user's training loop stays theirs and calls
:meth:`State.load` once, :meth:`State.step` after each optimizer step, :meth:`State.should_stop`
to leave the loop, and :meth:`State.save` at the end. A checkpoint holds the model, the
optimizer, the sampler's position, the scheduler, the step and sample counters and any
``**extra`` value, and resumes at any world size.

Stop agreement (the sync rule): every rank leaves the loop after the same step, and the loop
never waits for the device at every step. The ranks exchange each rank's wish to stop (the
run dir's ``stop`` file exists, or SIGTERM/SIGINT arrived), rank 0's "a timed save is due",
rank 0's choice of ``k`` (below) and each rank's loss sum in one small all-reduce (SUM), but
only at *sync steps*. A sync step's collective runs in the background (on CUDA: its copy to
a pinned host buffer too, on a side stream) and is read at the next step: that read is the
loop's only host synchronisation (an event a whole step old, so normally already complete).
Sync steps are ``k`` steps apart; rank 0 picks ``k`` from the step time it measures between
reads, as many steps as fit in :data:`SYNC_INTERVAL_S`, between 1 and
:data:`MAX_SYNC_EVERY_STEPS`, and the ranks learn it from the collective itself, so they
all agree on the next sync step. ``k`` is 1 until a step time is measured, and stays 1 while
steps take :data:`SYNC_INTERVAL_S` or more.

Hence a stop asked (stop file, signal) during step ``s`` is seen at the first sync step
``b >= s`` and ends every rank after step ``b + 1``: after a step between ``s + 1`` and
``s + k``, that is within one step plus about :data:`SYNC_INTERVAL_S` of steps, and never more
than :data:`MAX_SYNC_EVERY_STEPS` steps after ``s``. A timed save (``save_every_s``) is
agreed the same way. The sample budget is reached on every rank at the same step by
construction. The step that stops reads its own loss at once (one more collective, the
run's last).
"""

import io
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from interstice.elastic import env, lock, sharded, watchdog
from interstice.elastic.sampler import ElasticSampler
from interstice.elastic.signals import StopSignals
from torch.nn.parallel import DistributedDataParallel

from interstice import wire
from interstice.files import write_atomic

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = 1
SYNC_INTERVAL_S = 0.1  # seconds of steps between sync steps that rank 0 aims for
MAX_SYNC_EVERY_STEPS = 16  # most steps from one sync step to the next (bounds the stop latency)

# The sync collective's vector: stop votes by reason, timed-save votes, rank 0's k, loss sums.
_SIGNAL, _STOP_FILE, _SAVE, _EVERY, _LOSS = range(5)

_OWN = (
    "model",
    "optimizer",
    "sampler",
    "scheduler",
    "checkpoint_dir",
    "save_every_steps",
    "save_every_s",
    "total_samples",
    "run_dir",
    "steps",
    "samples",
    "loss",
    "loss_step",
    "stop_reason",
    "extra",
)


def write_torch(path: Path, obj: Any) -> None:
    """``torch.save`` ``obj`` to ``path`` atomically, creating its folder (mode 0700).

    Raises:
        OSError: the folder or the file cannot be written (``path`` is left untouched).
    """
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, buffer.getvalue())


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside a ``DistributedDataParallel`` wrapper (the model itself otherwise).

    Checkpoints hold the unwrapped state dict, so they load with or without DDP.

    Example:
        >>> import torch
        >>> from interstice.elastic import unwrap
        >>> linear = torch.nn.Linear(2, 2)
        >>> unwrap(linear) is linear
        True
    """
    return model.module if isinstance(model, DistributedDataParallel) else model


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether some parameter holds only this rank's shard.

    A module marks its sharded parameters with a non-empty ``shard_dims`` mapping (parameter
    name -> sharded dimension), as SplitBrain's ``ColumnParallelLinear`` and
    ``RowParallelLinear`` do.

    Example:
        >>> import torch
        >>> from interstice.elastic import is_sharded
        >>> is_sharded(torch.nn.Linear(2, 2))
        False
    """
    return bool(sharded.shard_dims(unwrap(model)))


class _Sync:
    """One sync collective in flight: the step that started it and how to read it."""

    __slots__ = ("step", "work", "vector", "has_loss", "event", "result")

    def __init__(self, step: int, work: Any, vector: torch.Tensor, has_loss: bool) -> None:
        self.step = step
        self.work = work  # the all-reduce (None at world size 1)
        self.vector = vector  # on the device; kept alive until read
        self.has_loss = has_loss
        self.event: Any = None  # CUDA: recorded after the copy to the pinned buffer
        self.result = vector  # what the read turns into numbers (CUDA: the pinned buffer)


class State:
    """The model, optimizer, sampler and counters of a job, saved and restored as one.

    Args:
        model: the model (DDP-wrapped or not; the checkpoint holds the unwrapped weights).
        optimizer: its optimizer.
        sampler: the :class:`ElasticSampler` feeding the steps (its position is saved).
        scheduler: a learning-rate scheduler stepped once per optimizer step, or None.
        checkpoint_dir: folder of the job's checkpoint (shared by all nodes); None takes
            ``INTERSTICE_CHECKPOINT_DIR``; with neither, :meth:`save` and :meth:`load` do
            nothing. Constructing the State waits until no worker of an earlier run of the
            job holds it (:mod:`interstice.elastic.lock`), then holds it until this
            process exits: a run never loads a checkpoint an earlier run is still saving.
        save_every_steps: also save after every this many steps (None: never by count).
        save_every_s: also save when this many seconds passed since the last save, measured
            on rank 0 and agreed in the step's collective (None: never by time).
        total_samples: the job's sample budget; None takes ``INTERSTICE_TOTAL_SAMPLES``; with
            neither, only a stop file or a signal stops the loop.
        run_dir: node-local folder whose ``stop`` file asks to stop; None takes
            ``INTERSTICE_RUN_DIR``.
        **extra: further values to carry across runs, read and written as attributes
            (``state.world_sizes``); objects with ``state_dict``/``load_state_dict`` are
            saved through them, others (lists, numbers, strings) as they are.

    Attributes:
        steps: optimizer steps the job has done (across all runs).
        samples: samples the job has trained (across all runs).
        loss: the global mean loss per sample of step :attr:`loss_step`, when :meth:`step`
            gets loss sums. It is read at sync steps (see the module doc): while running, the
            loss of a step at most ``k`` (<= :data:`MAX_SYNC_EVERY_STEPS`) steps back; the
            last step's once :meth:`should_stop` is True. None before the first read.
        loss_step: the step whose loss :attr:`loss` is (None before the first read).
        stop_reason: why :meth:`should_stop` said yes, the same on every rank: ``"budget"``,
            ``"signal"`` (some rank got SIGTERM/SIGINT), ``"stop file"`` (some rank saw its
            run dir's ``stop`` file, and none a signal), or None.

    Raises:
        ValueError: ``save_every_steps`` or ``save_every_s`` not positive.
        OSError: the checkpoint dir or its lock file cannot be created.

    Example:
        >>> import tempfile, torch
        >>> from interstice import elastic
        >>> ctx = elastic.init()
        >>> model = torch.nn.Linear(4, 2)
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> sampler = elastic.ElasticSampler(100, 10, seed=0)
        >>> state = elastic.State(model=model, optimizer=opt, sampler=sampler,
        ...                       checkpoint_dir=tempfile.mkdtemp(), total_samples=30,
        ...                       world_sizes=[])
        >>> state.load()
        False
        >>> data = torch.randn(100, 4)
        >>> while not state.should_stop():
        ...     for indices in sampler:
        ...         opt.zero_grad()
        ...         loss_sum = model(data[indices]).square().sum()
        ...         (loss_sum / 10).backward()
        ...         opt.step()
        ...         state.step(loss_sum=loss_sum)
        ...         if state.should_stop():
        ...             break
        >>> state.save()
        >>> state.steps, state.samples, state.stop_reason
        (3, 30, 'budget')
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        sampler: ElasticSampler,
        scheduler: Any = None,
        checkpoint_dir: str | Path | None = None,
        save_every_steps: int | None = None,
        save_every_s: float | None = None,
        total_samples: int | None = None,
        run_dir: str | Path | None = None,
        **extra: Any,
    ) -> None:
        for name, value in (("save_every_steps", save_every_steps), ("save_every_s", save_every_s)):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        ctx = env.current()
        self.model = model
        self.optimizer = optimizer
        self.sampler = sampler
        self.scheduler = scheduler
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else ctx.checkpoint_dir
        self.save_every_steps = save_every_steps
        self.save_every_s = save_every_s
        self.total_samples = total_samples if total_samples is not None else ctx.total_samples
        self.run_dir = Path(run_dir) if run_dir else ctx.run_dir
        self.steps = 0
        self.samples = 0
        self.loss: float | None = None
        self.loss_step: int | None = None
        self.stop_reason: str | None = None
        self.extra = dict(extra)
        self._device = ctx.device
        self._rank, self._world_size = ctx.rank, ctx.world_size  # one process group per run
        self._stop_file: tuple[Path | None, str] = (None, "")  # run dir, its stop file
        self._signals = StopSignals()
        if self.checkpoint_dir is not None:
            lock.hold(self.checkpoint_dir)  # waits for an earlier run's workers to exit
        self._decided_at_step: int | None = None
        self._pending: _Sync | None = None  # the sync collective in flight (at most one)
        self._next_sync = 0  # the step at or after which the next sync collective starts
        self._read_clock: tuple[float, int] | None = None  # rank 0: (time, step) of last read
        self._step_s: float | None = None  # rank 0: measured seconds per step
        self._host: torch.Tensor | None = None  # CUDA: the pinned buffer the result lands in
        self._copy_stream: Any = None  # CUDA: the side stream that copies it there
        self._stop = False
        self._saved_at_step: int | None = None
        self._saved_at_s = time.monotonic()
        self._timed_save_due = False
        if self.checkpoint_dir is not None:
            env.use_checkpoint_dir(self.checkpoint_dir)

    def __getattr__(self, name: str) -> Any:
        extra = self.__dict__.get("extra", {})
        if name in extra:
            return extra[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN or name.startswith("_") or name not in self.__dict__.get("extra", {}):
            object.__setattr__(self, name, value)
        else:
            self.extra[name] = value

    @property
    def finished(self) -> bool:
        """Whether the sample budget is reached."""
        return self.total_samples is not None and self.samples >= self.total_samples

    @property
    def checkpoint_path(self) -> Path | None:
        """The checkpoint file (None without a checkpoint dir)."""
        return None if self.checkpoint_dir is None else self.checkpoint_dir / CHECKPOINT_FILE

    def _wants_stop(self) -> str | None:
        if self._signals.received:
            return "signal"
        if self.run_dir is None:
            return None
        if self._stop_file[0] is not self.run_dir:
            self._stop_file = (self.run_dir, str(wire.stop_path(self.run_dir)))
        return "stop file" if os.path.exists(self._stop_file[1]) else None

    def _proposal(self) -> int:
        """Rank 0's ``k``: the steps of :data:`SYNC_INTERVAL_S`, clamped (1 while unknown)."""
        if self._step_s is None:
            return 1
        steps = min(MAX_SYNC_EVERY_STEPS, SYNC_INTERVAL_S / max(self._step_s, 1e-9))
        return max(1, int(steps))

    def _vector(self, values: list[float], loss_sum: float | torch.Tensor | None) -> torch.Tensor:
        """The collective's vector on the device, built without waiting for the device."""
        if self._device.type == "cpu":
            vector = torch.tensor([*values, 0.0], dtype=torch.float64)
        else:  # fills and a device copy: no host-to-device copy, which would synchronise
            vector = torch.zeros(len(values) + 1, dtype=torch.float64, device=self._device)
            for index, value in enumerate(values):
                if value:
                    vector[index].fill_(value)
        if isinstance(loss_sum, torch.Tensor):
            loss = loss_sum.detach().reshape(())
            if loss.device != vector.device and loss.device.type == "cpu":
                vector[_LOSS].fill_(loss.item())  # a CPU tensor: no device to wait for
            else:
                vector[_LOSS].copy_(loss)
        elif loss_sum is not None:
            vector[_LOSS].fill_(float(loss_sum))
        return vector

    def _issue(self, loss_sum: float | torch.Tensor | None) -> None:
        """Start this step's sync collective (async): stop votes by reason, rank 0's timed
        save and ``k``, loss sums."""
        if self._pending is not None:
            self._collect()
        wish = self._wants_stop()
        rank_0 = self._rank == 0
        save_due = (
            rank_0
            and self.save_every_s is not None
            and time.monotonic() - self._saved_at_s >= self.save_every_s
        )
        values = [0.0] * _LOSS
        values[_SIGNAL] = float(wish == "signal")
        values[_STOP_FILE] = float(wish == "stop file")
        values[_SAVE] = float(save_due)
        values[_EVERY] = float(self._proposal()) if rank_0 else 0.0
        vector = self._vector(values, loss_sum)
        work = None
        if self._world_size > 1:
            work = dist.all_reduce(vector, op=dist.ReduceOp.SUM, async_op=True)
        sync = _Sync(self.steps, work, vector, loss_sum is not None)
        if vector.is_cuda:
            self._copy_to_host(sync)
        self._pending = sync

    def _copy_to_host(self, sync: _Sync) -> None:
        """Queue the result's copy into the pinned buffer on a side stream, and an event.

        Neither the host nor the training stream waits for the collective: the side stream
        does, and the read waits for the event.
        """
        device = self._device
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(device)
            self._host = torch.empty(_LOSS + 1, dtype=torch.float64, pin_memory=True)
        stream = self._copy_stream
        stream.wait_stream(torch.cuda.current_stream(device))  # the vector's fills and copy
        with torch.cuda.stream(stream):
            if sync.work is not None:
                sync.work.wait()  # makes this stream, not the host, wait for the all-reduce
            self._host.copy_(sync.vector, non_blocking=True)
            sync.event = torch.cuda.Event()
            sync.event.record(stream)
        sync.vector.record_stream(stream)
        sync.result = self._host

    def _collect(self) -> None:
        """Finish the sync collective in flight and apply what the ranks agreed."""
        sync, self._pending = self._pending, None
        if sync is None:
            return
        if sync.event is not None:
            sync.event.synchronize()  # the one host synchronisation per sync step
        elif sync.work is not None:
            sync.work.wait()
        values = sync.result.tolist()
        if sync.has_loss:
            self.loss = values[_LOSS] / self.sampler.global_batch_size
            self.loss_step = sync.step
        if values[_SIGNAL] + values[_STOP_FILE] > 0 and not self._stop:  # one reason, agreed
            self._stop = True
            self.stop_reason = "signal" if values[_SIGNAL] > 0 else "stop file"
        self._timed_save_due = values[_SAVE] > 0
        every = max(1, min(MAX_SYNC_EVERY_STEPS, round(values[_EVERY])))
        self._next_sync = sync.step + every
        if self._rank == 0:
            now = time.monotonic()
            if self._read_clock is not None and self.steps > self._read_clock[1]:
                then, then_steps = self._read_clock
                self._step_s = (now - then) / (self.steps - then_steps)
            self._read_clock = (now, self.steps)

    def step(self, loss_sum: float | torch.Tensor | None = None) -> None:
        """Record one optimizer step: move the sampler, count, agree on stopping, maybe save.

        Call it once after each ``optimizer.step()`` (and ``scheduler.step()``), on every rank.
        At a sync step (every ``k`` steps, see the module doc) it starts the collective that
        agrees on stopping and reads the previous sync step's one (a step old, so normally
        without waiting); at other steps it only counts. A stop wish raised during step ``s``
        stops every rank after a step between ``s + 1`` and ``s + k`` (``k`` is 1 for steps
        of :data:`SYNC_INTERVAL_S` or more; at most :data:`MAX_SYNC_EVERY_STEPS`); the
        sample budget: after the step that reaches it.

        Args:
            loss_sum: this rank's sum of per-sample losses over its share of the step
                (unscaled; a tensor on the device is not read, so the host does not wait for
                it); at sync steps the ranks' sums are added in the collective and
                :attr:`loss` becomes their mean over the global batch (see there). None: no
                loss.
        """
        watchdog.disarm()
        self.sampler.advance()
        self.steps += 1
        self.samples += self.sampler.global_batch_size
        if self._pending is not None and self._pending.step < self.steps:
            self._collect()
        if self.finished and not self._stop:
            self._stop, self.stop_reason = True, "budget"
        if self._stop:  # the last step: its loss at once, the run's last collective
            self._issue(loss_sum)
            self._collect()
        elif self.steps >= self._next_sync:
            self._issue(loss_sum)
        self._decided_at_step = self.steps
        by_count = self.save_every_steps is not None and self.steps % self.save_every_steps == 0
        if by_count or self._timed_save_due:
            self._timed_save_due = False
            self.save()

    def should_stop(self) -> bool:
        """Whether every rank leaves the loop now (the same answer on every rank).

        True when the sample budget is reached, or when some rank saw the run dir's
        ``stop`` file or received SIGTERM/SIGINT (see :meth:`step` for when). Between steps
        it reads a flag, without any collective. Called before the first step of a run it
        runs a collective itself, so a stop requested before the run trained anything is
        agreed at once.
        """
        if self._decided_at_step != self.steps:
            self._issue(None)
            self._collect()
            if self.finished and not self._stop:
                self._stop, self.stop_reason = True, "budget"
            self._decided_at_step = self.steps
        return self._stop

    def _payload(self, sharded_folder: str | None) -> dict[str, Any]:
        model = unwrap(self.model)
        return {
            "format": CHECKPOINT_FORMAT,
            "steps": self.steps,
            "samples": self.samples,
            "world_size": dist.get_world_size(),
            "sharded": sharded_folder,
            "model": (
                sharded.replicated_model_state(model) if sharded_folder else model.state_dict()
            ),
            "optimizer": (
                sharded.replicated_optimizer_state(model, self.optimizer)
                if sharded_folder
                else self.optimizer.state_dict()
            ),
            "sampler": self.sampler.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "extra": {
                name: value.state_dict() if hasattr(value, "state_dict") else value
                for name, value in self.extra.items()
            },
        }

    def save(self) -> None:
        """Write the checkpoint (rank 0, atomically), then wait for it on every rank.

        Call it on every rank. Does nothing without a checkpoint dir or when this step is
        already saved. The file is ``<checkpoint_dir>/checkpoint.pt``; the newest replaces
        the previous one with ``os.replace``, so a crash leaves the previous one whole. A
        sharded model (:func:`is_sharded`) also has every rank write its slices into a
        ``sharded-*`` folder beside it with ``torch.distributed.checkpoint`` first; the file
        names that folder, and older folders are removed once it is written (see
        :mod:`interstice.elastic.sharded`).

        Raises:
            OSError: the checkpoint cannot be written.
        """
        if self.checkpoint_path is None or self._saved_at_step == self.steps:
            return
        folder_name = None
        if is_sharded(self.model):
            names = [f"sharded-{self.steps}-{time.time_ns()}"]
            dist.broadcast_object_list(names, src=0)
            folder_name = names[0]
            sharded.save(self.checkpoint_dir / folder_name, unwrap(self.model), self.optimizer)
        if dist.get_rank() == 0:
            write_torch(self.checkpoint_path, self._payload(folder_name))
            for old in self.checkpoint_dir.glob("sharded-*"):
                if old.name != folder_name:
                    shutil.rmtree(old, ignore_errors=True)
        dist.barrier()
        self._saved_at_step = self.steps
        self._saved_at_s = time.monotonic()

    def load(self) -> bool:
        """Restore the newest checkpoint, whatever world size wrote it (call it on every rank).

        Returns:
            Whether a checkpoint was found (False: a fresh start, nothing changed).

        Raises:
            ValueError: the checkpoint belongs to other data (see
                :meth:`ElasticSampler.load_state_dict`) or has an unknown format.
            RuntimeError: the model or optimizer does not match the saved one.
        """
        path = self.checkpoint_path
        if path is None or not path.exists():
            return False
        # The job's own file in its 0700 folder; extra values may be any picklable object.
        payload = torch.load(path, map_location="cpu", weights_only=False)
        if payload.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{path}: unknown checkpoint format {payload.get('format')!r}")
        if payload["sharded"]:
            folder = self.checkpoint_dir / payload["sharded"]
            model, optimizer = unwrap(self.model), self.optimizer
            sharded.load(folder, model, optimizer, payload["model"], payload["optimizer"])
        else:
            unwrap(self.model).load_state_dict(payload["model"])
            self.optimizer.load_state_dict(payload["optimizer"])
        self.sampler.load_state_dict(payload["sampler"])
        if self.scheduler is not None and payload["scheduler"] is not None:
            self.scheduler.load_state_dict(payload["scheduler"])
        for name, value in payload["extra"].items():
            current = self.extra.get(name)
            if hasattr(current, "load_state_dict"):
                current.load_state_dict(value)
            else:
                self.extra[name] = value
        self.steps, self.samples = payload["steps"], payload["samples"]
        self._saved_at_step = self.steps
        return True
