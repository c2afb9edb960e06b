"""A small CNN on scikit-learn's handwritten digits, elastic and exactly-once.

    torchrun --nproc-per-node 2 examples/train_digits.py --checkpoint-dir /tmp/digits
    # stop it (Ctrl-C / SIGTERM), then go on at another world size from the checkpoint:
    torchrun --nproc-per-node 3 examples/train_digits.py --checkpoint-dir /tmp/digits

As an interstice job the agent sets INTERSTICE_CHECKPOINT_DIR, INTERSTICE_TOTAL_SAMPLES and
INTERSTICE_GLOBAL_BATCH_SIZE, the flags' defaults. Prints one JSON line (rank 0); once the
sample budget is spent, with the held-out accuracy.
"""

import argparse
import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from interstice import elastic


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, default=env("INTERSTICE_CHECKPOINT_DIR"))
    parser.add_argument("--total-samples", type=int, default=env("INTERSTICE_TOTAL_SAMPLES", 15000))
    gbs = env("INTERSTICE_GLOBAL_BATCH_SIZE", 64)
    parser.add_argument("--global-batch-size", type=int, default=gbs, help="samples per step")
    parser.add_argument("--max-micro-batch-size", type=int, default=None, help="per rank")
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    elastic.SampleRecorder.add_argument(parser)
    parser.add_argument("--deterministic", action="store_true", help="for bitwise-stable runs")
    parser.add_argument(
        "--float64", action="store_true", help="train in float64 (trajectory comparisons)"
    )
    return parser.parse_args()


def digits() -> tuple[TensorDataset, TensorDataset]:
    """Train and held-out sets (80/20, fixed split): images [N, 1, 8, 8] in [0, 1], labels."""
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.get_default_dtype()).unsqueeze(1) / 16
    y = torch.tensor(data.target)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    return TensorDataset(x_train, y_train), TensorDataset(x_test, y_test)


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10),
    )  # fmt: skip


def accuracy(model: nn.Module, test_set: TensorDataset, device: torch.device) -> float:
    """The share of ``test_set``'s digits that ``model`` classifies right, in [0, 1]."""
    model.eval()
    with torch.no_grad():
        x_test, y_test = test_set.tensors
        predicted = model(x_test.to(device)).argmax(1).cpu()
    return (predicted == y_test).float().mean().item()


@record
def main() -> None:
    args = parse_args()
    torch.use_deterministic_algorithms(args.deterministic)
    if args.float64:
        torch.set_default_dtype(torch.float64)
    ctx = elastic.init()
    try:
        train(ctx, args)
    finally:
        elastic.shutdown()  # destroy the process group, also when this rank raised


def train(ctx: elastic.Context, args: argparse.Namespace) -> None:
    """Train from the checkpoint (if any) until a stop or the budget, then save."""
    train_set, test_set = digits()
    torch.manual_seed(args.seed)
    model = build_model().to(ctx.device)
    ddp = DistributedDataParallel(model)
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = elastic.ElasticSampler(len(train_set), args.global_batch_size, seed=args.seed)
    state = elastic.State(
        model=ddp, optimizer=optimizer, sampler=sampler, checkpoint_dir=args.checkpoint_dir,
        total_samples=args.total_samples, save_every_s=60, world_sizes=[],
    )  # fmt: skip
    state.load()
    state.world_sizes.append(ctx.world_size)
    loader = DataLoader(train_set, batch_sampler=sampler)
    recorder = elastic.SampleRecorder(args.record_samples, ctx.rank)
    while not state.should_stop():
        for batch in loader:
            optimizer.zero_grad()
            loss_sum = torch.zeros((), device=ctx.device)
            for (x, y), scale in elastic.accumulate(
                ddp, batch, args.global_batch_size, args.max_micro_batch_size
            ):
                loss = F.cross_entropy(ddp(x.to(ctx.device)), y.to(ctx.device), reduction="sum")
                (loss * scale).backward()
                loss_sum += loss.detach()
            optimizer.step()
            recorder.write(sampler.current_share())
            state.step(loss_sum=loss_sum)
            elastic.report(step=state.steps, samples=state.samples, loss=state.loss)
            if state.should_stop():
                break
    state.save()
    # A stop (a rescale, a reclaim within its grace period) leaves at once: evaluate only
    # the finished model.
    held_out = {"accuracy": accuracy(model, test_set, ctx.device)} if state.finished else {}
    outcome = "finished" if state.finished else "stopped"
    elastic.report(state.steps, state.samples, state.loss, state=outcome, **held_out)
    if state.finished:
        elastic.save_final(model)
    if ctx.rank == 0:
        print(json.dumps({
            "samples": state.samples, "steps": state.steps, "world_sizes": state.world_sizes,
            "state": outcome, "stop_reason": state.stop_reason, "loss": state.loss, **held_out,
        }))  # fmt: skip


if __name__ == "__main__":
    main()
