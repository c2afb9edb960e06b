"""The built-in training job (``python -m interstice.agents.worker``), a user of elastic.

Started by PyTorch elastic (the node agent's launcher, or plain ``torchrun``): it trains one
model of ``interstice.models`` under one ``Layout`` (data parallel, SPB or SplitBrain) on a
seeded synthetic data set, with the calls any user script makes:

1. ``elastic.init()``: rank, world size, device, the job's folders from the environment;
2. an ``ElasticSampler`` over the data set with the job's global batch, so each optimizer
   step trains the same ``--global-batch-size`` samples whatever the world size, split across
   the ranks of the moment;
3. ``elastic.State(...).load()``: resume from the job's checkpoint, written at any world size;
4. train until ``State.should_stop()`` (the sample budget, the agent's ``stop`` file or
   SIGTERM: every rank stops after the same step), ``elastic.report`` after every step
   (rate-limited inside);
5. ``State.save()``; when the budget is reached, ``elastic.save_final(model)``.

Data: ``SyntheticImages``, ``--dataset-size`` images of ``--num-classes`` noisy class
prototypes; image ``i`` depends only on (seed, i), so every rank, run and world size sees the
same data set, and the sampler's position alone says what was trained.

Checkpoints: the State holds the trainer's model and optimizer as they are. SplitBrain's
sharded classifier layers (marked by their ``shard_dims``) are written by every rank with
``torch.distributed.checkpoint`` (``interstice.elastic.State`` does it), so every checkpoint
resumes at any world size. The final model is always whole: SplitBrain's shards are gathered
into the unsharded model first.

The per-step log ``steps-<node>-<local_rank>.jsonl`` in the run directory (one line per
resume, step and exit; ``agents.rundir``) is what the end-to-end test reads.

Legend: ``B`` batch, ``C`` channels, ``H``/``W`` image height/width, ``K`` classes.
"""

import argparse
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch._dynamo  # noqa: F401  (see below)
from interstice.agents import rundir
from interstice.models.parallelize import Layout, build_trainer
from interstice.models.zoo import build_blocks
from torch.distributed.elastic.multiprocessing.errors import record

from interstice import elastic, wire

# Everything a worker needs is imported with this module, so that a fork server that preloads
# it (the agent's launcher) starts workers with nothing left to import: torch.optim imports
# torch._dynamo when the first optimizer is built, 3 s of a rescale on a loaded 2-core VM.

CHANNELS = 3
NOISE = 0.5  # standard deviation of the noise added to a class prototype


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The worker's command line; the job's numbers default to the ``INTERSTICE_*`` variables.

    Raises:
        SystemExit: (exit code 2, one line) a required value is neither given nor in the
            environment, or a value is malformed.
    """
    parser = argparse.ArgumentParser(prog="python -m interstice.agents.worker")
    parser.add_argument("--model", default="tinycnn", help="a name of interstice.models")
    parser.add_argument("--parallelism", choices=wire.PARALLELISMS, default="dp")
    parser.add_argument("--spb-depth", type=int, default=0, help="SPB depth (spb only)")
    parser.add_argument(
        "--global-batch-size",
        type=int,
        default=_env_int(wire.ENV_GLOBAL_BATCH_SIZE),
        help=f"samples per optimizer step, whole job (default: ${wire.ENV_GLOBAL_BATCH_SIZE})",
    )
    parser.add_argument(
        "--total-samples",
        type=int,
        default=_env_int(wire.ENV_TOTAL_SAMPLES),
        help=f"the job's sample budget (default: ${wire.ENV_TOTAL_SAMPLES})",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=os.environ.get(wire.ENV_CHECKPOINT_DIR) or None,
        help=f"shared by every node (default: ${wire.ENV_CHECKPOINT_DIR})",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=os.environ.get(wire.ENV_RUN_DIR) or None,
        help=f"node-local: the agent's stop file, the step log (default: ${wire.ENV_RUN_DIR})",
    )
    parser.add_argument(
        "--node",
        default=os.environ.get(wire.ENV_NODE) or os.uname().nodename,
        help="names the step log",
    )
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps")
    parser.add_argument("--dataset-size", type=int, default=4096, help="synthetic images")
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--image-size", type=int, default=32, help="pixels per side")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("global_batch_size", "total_samples", "checkpoint_dir"):
        if getattr(args, name) is None:
            option = "--" + name.replace("_", "-")
            parser.error(f"{option} is required (or set the job's INTERSTICE_* environment)")
    for name in ("global_batch_size", "total_samples", "checkpoint_every", "dataset_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)} must be >= 1")
    return args


class SyntheticImages(torch.utils.data.Dataset):
    """``size`` images of ``num_classes`` noisy class prototypes; image ``i`` depends only on
    (``seed``, ``i``).

    Args:
        size: images in the data set.
        num_classes: classes K.
        image_size: pixels per side.
        seed: fixes the prototypes and every image.
    """

    def __init__(self, size: int, num_classes: int, image_size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.prototypes_KCHW = torch.randn(
            num_classes, CHANNELS, image_size, image_size, generator=generator
        )
        self.size = size
        self.seed = seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        """Image ``x_CHW`` and its class."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = int(torch.randint(len(self.prototypes_KCHW), (), generator=generator))
        noise_CHW = torch.randn(self.prototypes_KCHW.shape[1:], generator=generator)
        return self.prototypes_KCHW[label] + NOISE * noise_CHW, label


class StepLog:
    """Appends this rank's ``resume``, ``step`` and ``exit`` lines to the run dir's step log."""

    def __init__(self, run_dir: Path | None, node: str, ctx: elastic.Context) -> None:
        self._file = None
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            self._file = rundir.steps_path(run_dir, node, ctx.local_rank).open("a")
        self.common = {
            "rendezvous_id": ctx.rendezvous_id,
            "rank": ctx.rank,
            "world_size": ctx.world_size,
            "nodes": ctx.nodes,
        }

    def write(self, event: str, step: int, **extra: Any) -> None:
        """Append one line (nothing without a run dir)."""
        if self._file is not None:
            line = {"event": event, "step": step, **self.common, "time": time.time(), **extra}
            self._file.write(rundir.json_line(line))
            self._file.flush()

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()


def whole_model(trainer: Any, args: argparse.Namespace) -> torch.nn.Module:
    """The trained model, unsharded (SplitBrain's shards gathered: a collective)."""
    if args.parallelism != "splitbrain":
        return trainer.model
    model = build_blocks(args.model, args.num_classes)
    model.load_state_dict(trainer.state_dict()["model"])
    return model


def train(args: argparse.Namespace, ctx: elastic.Context) -> str:
    """Resume the job from its checkpoint and train until the budget or a stop.

    Returns:
        ``"finished"`` (``total_samples`` reached) or ``"stopped"`` (checkpointed on request).

    Raises:
        ValueError: a layout, model or world size the job cannot run (names the value).
    """
    elastic.shares(args.global_batch_size, ctx.world_size)  # a rank with no sample: ValueError
    trainer = build_trainer(
        args.model,
        Layout(args.parallelism, args.spb_depth),
        num_classes=args.num_classes,
        image_size=args.image_size,
        lr=args.lr,
        device=ctx.device,
    )
    dataset = SyntheticImages(args.dataset_size, args.num_classes, args.image_size, args.seed)
    sampler = elastic.ElasticSampler(len(dataset), args.global_batch_size, seed=args.seed)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)
    state = elastic.State(
        model=trainer.model,
        optimizer=trainer.optimizer,
        sampler=sampler,
        checkpoint_dir=args.checkpoint_dir,
        save_every_steps=args.checkpoint_every,
        total_samples=args.total_samples,
        run_dir=args.run_dir,
    )
    state.load()
    trainer.step_count = state.steps  # SPB's rotation of full workers follows the step
    log = StepLog(args.run_dir, args.node, ctx)
    log.write("resume", state.steps)
    try:
        while not state.should_stop():
            for x_BCHW, y_B in loader:
                x_BCHW, y_B = x_BCHW.to(ctx.device), y_B.to(ctx.device)
                loss = trainer.step(x_BCHW, y_B, args.global_batch_size)
                state.step(loss_sum=loss * len(y_B))
                log.write("step", state.steps, loss=loss)
                elastic.report(step=state.steps, samples=state.samples, loss=state.loss)
                if state.should_stop():
                    break
        state.save()
        outcome = "finished" if state.finished else "stopped"
        if state.finished:
            elastic.save_final(whole_model(trainer, args))
        elastic.report(step=state.steps, samples=state.samples, loss=state.loss, state=outcome)
        log.write("exit", state.steps, outcome=outcome)
    finally:
        log.close()
    return outcome


@record
def main(argv: list[str] | None = None) -> None:
    """Run one generation of the job on this rank: build, train, and close in ``finally``.

    Args:
        argv: the worker's arguments (see :func:`parse_args`); None reads ``sys.argv``.
    """
    args = parse_args(argv)
    ctx = elastic.init()
    try:
        train(args, ctx)
    finally:
        elastic.shutdown()


if __name__ == "__main__":
    main()
