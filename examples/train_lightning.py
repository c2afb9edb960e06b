"""A PyTorch Lightning MLP on scikit-learn's digits, elastic and exactly-once.

    torchrun --nproc-per-node 2 examples/train_lightning.py --checkpoint-dir /tmp/lit
    # stop it (Ctrl-C / SIGTERM), then go on at another world size from the checkpoint:
    torchrun --nproc-per-node 3 examples/train_lightning.py --checkpoint-dir /tmp/lit

``Trainer.fit`` stays; interstice adds the callback, the sampler as the loader's
``batch_sampler`` and the Trainer's size from the launcher. ``--plain`` runs Lightning's own
DDP instead (its DistributedSampler, no interstice: the overhead bench's baseline). Prints one
JSON line (rank 0); ``train_s`` is the time in ``Trainer.fit`` (for bench/frameworks.py).
"""

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import lightning.pytorch as L
import torch
import torch.nn.functional as F
from interstice.elastic.lightning import ElasticCallback, devices_and_nodes
from sklearn.datasets import load_digits
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import DataLoader, TensorDataset

from interstice import elastic


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, default=env("INTERSTICE_CHECKPOINT_DIR"))
    parser.add_argument("--total-samples", type=int, default=env("INTERSTICE_TOTAL_SAMPLES", 15000))
    gbs = env("INTERSTICE_GLOBAL_BATCH_SIZE", 64)
    parser.add_argument("--global-batch-size", type=int, default=gbs, help="samples per step")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    elastic.SampleRecorder.add_argument(parser)
    parser.add_argument("--float64", action="store_true", help="Lightning's 64-true precision")
    parser.add_argument("--plain", action="store_true", help="Lightning's own DDP, no interstice")
    return parser.parse_args()


class DigitsMLP(L.LightningModule):
    """An MLP on the 8x8 digits, SGD with momentum, the LR halved every 100 steps."""

    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)  # the mean over this rank's samples

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.5)
        schedule = {"scheduler": scheduler, "interval": "step"}
        return {"optimizer": optimizer, "lr_scheduler": schedule}


class RecordSamples(L.Callback):
    """Records the ``epoch index`` pairs of each trained batch (before the sampler moves)."""

    def __init__(self, sampler: elastic.ElasticSampler, recorder: elastic.SampleRecorder) -> None:
        self.sampler, self.recorder = sampler, recorder

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.recorder.write(self.sampler.current_share())


def digits() -> TensorDataset:
    """The 1,437 training digits of train_digits.py's split, flattened: [N, 64] in [0, 1]."""
    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16
    y = torch.tensor(data.target)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))[:1437]
    return TensorDataset(x[order], y[order])


def trainer_args(args: argparse.Namespace) -> dict:
    return {
        **devices_and_nodes(), "accelerator": "cpu", "precision": "64-true" if args.float64 else
        "32-true", "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
    }  # fmt: skip


@record
def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    train_set = digits()
    torch.manual_seed(args.seed)
    model = DigitsMLP(args.lr)
    if args.plain:
        plain(args, model, train_set)
        return
    sampler = elastic.ElasticSampler(len(train_set), args.global_batch_size, seed=args.seed)
    callback = ElasticCallback(
        sampler, checkpoint_dir=args.checkpoint_dir, total_samples=args.total_samples
    )
    callbacks: list[L.Callback] = [callback]
    if args.record_samples:
        recorder = elastic.SampleRecorder(args.record_samples, int(os.environ.get("RANK", "0")))
        callbacks.insert(0, RecordSamples(sampler, recorder))
    trainer = L.Trainer(
        **trainer_args(args), max_epochs=-1, use_distributed_sampler=False, callbacks=callbacks
    )
    started = time.perf_counter()
    trainer.fit(model, DataLoader(train_set, batch_sampler=sampler))
    train_s = time.perf_counter() - started
    state = callback.state
    if trainer.is_global_zero:
        print(json.dumps({
            "samples": state.samples, "steps": state.steps, "world_sizes": state.world_sizes,
            "state": "finished" if state.finished else "stopped", "loss": state.loss,
            "stop_reason": state.stop_reason, "global_step": trainer.global_step,
            "epoch": trainer.current_epoch, "lr": trainer.optimizers[0].param_groups[0]["lr"],
            "train_s": train_s,
        }))  # fmt: skip


def plain(args: argparse.Namespace, model: L.LightningModule, train_set: TensorDataset) -> None:
    """Lightning's own DDP: its DistributedSampler, a per-rank batch, the same steps."""
    placement = devices_and_nodes()
    world_size = placement["devices"] * placement["num_nodes"]
    steps = args.total_samples // args.global_batch_size
    loader = DataLoader(train_set, batch_size=args.global_batch_size // world_size, shuffle=True)
    trainer = L.Trainer(**trainer_args(args), max_steps=steps, enable_checkpointing=False)
    started = time.perf_counter()
    trainer.fit(model, loader)
    train_s = time.perf_counter() - started
    if trainer.is_global_zero:
        samples = trainer.global_step * args.global_batch_size
        print(json.dumps({
            "steps": trainer.global_step, "samples": samples, "world_sizes": [world_size],
            "train_s": train_s,
        }))  # fmt: skip


if __name__ == "__main__":
    main()
