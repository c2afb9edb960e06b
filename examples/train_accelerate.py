"""A plain Hugging Face Accelerate loop on scikit-learn's digits, elastic and exactly-once.

    torchrun --nproc-per-node 2 examples/train_accelerate.py --checkpoint-dir /tmp/acc
    # stop it (Ctrl-C / SIGTERM), then go on at another world size from the checkpoint:
    torchrun --nproc-per-node 3 examples/train_accelerate.py --checkpoint-dir /tmp/acc

The data and the CNN are train_digits.py's; the loop is Accelerate's (``accelerator.prepare``,
``accelerator.backward``, ``accelerator.clip_grad_norm_``) with the elastic contract around
it: the loader through ``prepare_loader``, the State from ``elastic_state``
(interstice.elastic.accelerate). ``--plain`` runs the same training as a stock Accelerate
loop (its sharded loader, no interstice) for comparisons. As an interstice job the agent
sets INTERSTICE_CHECKPOINT_DIR, INTERSTICE_TOTAL_SAMPLES and INTERSTICE_GLOBAL_BATCH_SIZE,
the flags' defaults. Prints one JSON line (rank 0); once the sample budget is spent, with
the held-out accuracy.
"""

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from interstice.elastic.accelerate import elastic_state, prepare_loader
from interstice.examples.train_digits import accuracy, build_model, digits
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import DataLoader

from interstice import elastic

WARMUP_STEPS = 10


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, default=env("INTERSTICE_CHECKPOINT_DIR"))
    parser.add_argument("--total-samples", type=int, default=env("INTERSTICE_TOTAL_SAMPLES", 15000))
    gbs = env("INTERSTICE_GLOBAL_BATCH_SIZE", 64)
    parser.add_argument("--global-batch-size", type=int, default=gbs, help="samples per step")
    parser.add_argument("--max-micro-batch-size", type=int, default=None, help="per rank")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    elastic.SampleRecorder.add_argument(parser)
    parser.add_argument("--float64", action="store_true", help="train in float64 (comparisons)")
    parser.add_argument("--plain", action="store_true", help="stock Accelerate, no interstice")
    return parser.parse_args()


def warmup_cosine(
    optimizer: torch.optim.Optimizer, steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over WARMUP_STEPS optimizer steps, then a cosine decay to 0 at ``steps``."""

    def factor(step: int) -> float:
        if step < WARMUP_STEPS:
            return (step + 1) / WARMUP_STEPS
        return 0.5 * (
            1 + math.cos(math.pi * min(1.0, (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS)))
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@record
def main() -> None:
    args = parse_args()
    if args.float64:
        torch.set_default_dtype(torch.float64)
    # First: under torchrun it creates the process group. On CPU it distributes only when told.
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    ctx = elastic.init()
    try:
        (plain if args.plain else train)(accelerator, ctx, args)
    finally:
        elastic.shutdown()  # destroy the process group, also when this rank raised


def train(accelerator: Accelerator, ctx: elastic.Context, args: argparse.Namespace) -> None:
    """Train from the checkpoint (if any) until a stop or the budget, then save."""
    train_set, test_set = digits()
    torch.manual_seed(args.seed)
    model = build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    scheduler = warmup_cosine(optimizer, math.ceil(args.total_samples / args.global_batch_size))
    model, optimizer = accelerator.prepare(model, optimizer)  # the scheduler stays unprepared
    sampler = elastic.ElasticSampler(len(train_set), args.global_batch_size, seed=args.seed)
    state = elastic_state(
        accelerator, model, optimizer, sampler, scheduler, checkpoint_dir=args.checkpoint_dir,
        total_samples=args.total_samples, save_every_s=60, world_sizes=[],
    )  # fmt: skip
    started = time.perf_counter()
    state.load()
    state.world_sizes.append(ctx.world_size)
    loader = prepare_loader(accelerator, DataLoader(train_set, batch_sampler=sampler))
    recorder = elastic.SampleRecorder(args.record_samples, ctx.rank)
    while not state.should_stop():
        for batch in loader:
            optimizer.zero_grad()
            loss_sum = torch.zeros((), device=accelerator.device)
            for (x, y), scale in elastic.accumulate(
                model, batch, args.global_batch_size, args.max_micro_batch_size
            ):
                loss = F.cross_entropy(model(x), y, reduction="sum")
                accelerator.backward(loss * scale)
                loss_sum += loss.detach()
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            recorder.write(sampler.current_share())
            state.step(loss_sum=loss_sum)
            elastic.report(step=state.steps, samples=state.samples, loss=state.loss)
            if state.should_stop():
                break
    state.save()
    train_s = time.perf_counter() - started  # the checkpoint's load and last save included
    # A stop is on the clock of the grace period: only a finished model is evaluated.
    held_out = {"accuracy": accuracy(model, test_set, ctx.device)} if state.finished else {}
    outcome = "finished" if state.finished else "stopped"
    elastic.report(state.steps, state.samples, state.loss, state=outcome, **held_out)
    if state.finished:
        elastic.save_final(model)
    if ctx.rank == 0:
        print(json.dumps({
            "samples": state.samples, "steps": state.steps, "world_sizes": state.world_sizes,
            "state": outcome, "stop_reason": state.stop_reason, "loss": state.loss,
            "train_s": train_s, **held_out,
        }))  # fmt: skip


def plain(accelerator: Accelerator, ctx: elastic.Context, args: argparse.Namespace) -> None:
    """The same budget as a stock Accelerate loop: its sharded, shuffled loader, mean losses."""
    train_set, _ = digits()
    torch.manual_seed(args.seed)
    model = build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    steps = math.ceil(args.total_samples / args.global_batch_size)
    scheduler = warmup_cosine(optimizer, steps)
    per_rank = args.global_batch_size // ctx.world_size
    loader = DataLoader(train_set, batch_size=per_rank, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    started = time.perf_counter()
    step = 0
    while step < steps:
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            if step == steps:
                break
    train_s = time.perf_counter() - started
    if ctx.rank == 0:
        samples = step * args.global_batch_size
        print(
            json.dumps({"samples": samples, "steps": step, "loss": loss.item(), "train_s": train_s})
        )


if __name__ == "__main__":
    main()
