"""A character-level transformer on Python's own documentation, elastic and exactly-once.

    torchrun --nproc-per-node 2 examples/train_charlm.py --checkpoint-dir /tmp/charlm

The text is CPython's pydoc topics (``pydoc_data.topics``, shipped with Python): 90 % for
training in windows of 64 characters, the last 10 % held out. Prints one JSON line (rank 0);
once the sample budget is spent, with the held-out loss (nats per character) and perplexity.
"""

import argparse
import json
import math
import os
import pydoc_data.topics
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from interstice import elastic

CONTEXT = 64  # characters per sample


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, default=env("INTERSTICE_CHECKPOINT_DIR"))
    parser.add_argument("--total-samples", type=int, default=env("INTERSTICE_TOTAL_SAMPLES", 8000))
    gbs = env("INTERSTICE_GLOBAL_BATCH_SIZE", 32)
    parser.add_argument("--global-batch-size", type=int, default=gbs, help="samples per step")
    parser.add_argument("--max-micro-batch-size", type=int, default=None, help="per rank")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    elastic.SampleRecorder.add_argument(parser)
    parser.add_argument("--deterministic", action="store_true", help="for bitwise-stable runs")
    return parser.parse_args()


def windows(codes: torch.Tensor) -> TensorDataset:
    """Inputs [N, CONTEXT] and next-character targets [N, CONTEXT], non-overlapping."""
    n = (len(codes) - 1) // CONTEXT
    return TensorDataset(
        codes[: n * CONTEXT].view(n, CONTEXT), codes[1 : n * CONTEXT + 1].view(n, CONTEXT)
    )


def text_data() -> tuple[TensorDataset, TensorDataset, int]:
    """Training and held-out windows of the pydoc topics, and the alphabet size."""
    text = "".join(pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics))
    alphabet = {c: i for i, c in enumerate(sorted(set(text)))}
    codes = torch.tensor([alphabet[c] for c in text])
    cut = int(0.9 * len(codes))
    return windows(codes[:cut]), windows(codes[cut:]), len(alphabet)


class CharTransformer(nn.Module):
    """Causal transformer: characters [B, T] -> next-character logits [B, T, V]."""

    def __init__(self, vocab: int, width: int = 64, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(CONTEXT, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, x_BT: torch.Tensor) -> torch.Tensor:
        mask_TT = nn.Transformer.generate_square_subsequent_mask(x_BT.shape[1], x_BT.device)
        h_BTD = self.blocks(self.embed(x_BT) + self.position, mask=mask_TT, is_causal=True)
        return self.head(h_BTD)


def loss_sum(logits_BTV: torch.Tensor, y_BT: torch.Tensor) -> torch.Tensor:
    """Sum over samples of each sample's mean loss per character (nats)."""
    return F.cross_entropy(logits_BTV.flatten(0, 1), y_BT.flatten(), reduction="sum") / CONTEXT


def held_out_metrics(model: nn.Module, test_set: TensorDataset, device: torch.device) -> dict:
    """The held-out loss (nats per character) and perplexity of ``model``."""
    model.eval()
    with torch.no_grad():
        x_test, y_test = (t.to(device) for t in test_set.tensors)
        held_out_loss = loss_sum(model(x_test), y_test).item() / len(x_test)
    return {"held_out_loss": held_out_loss, "perplexity": math.exp(held_out_loss)}


@record
def main() -> None:
    args = parse_args()
    torch.use_deterministic_algorithms(args.deterministic)
    ctx = elastic.init()
    try:
        train(ctx, args)
    finally:
        elastic.shutdown()  # destroy the process group, also when this rank raised


def train(ctx: elastic.Context, args: argparse.Namespace) -> None:
    """Train from the checkpoint (if any) until a stop or the budget, then save."""
    train_set, test_set, vocab = text_data()
    torch.manual_seed(args.seed)
    model = CharTransformer(vocab).to(ctx.device)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
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
            step_loss = torch.zeros((), device=ctx.device)
            for (x, y), scale in elastic.accumulate(
                ddp, batch, args.global_batch_size, args.max_micro_batch_size
            ):
                loss = loss_sum(ddp(x.to(ctx.device)), y.to(ctx.device))
                (loss * scale).backward()
                step_loss += loss.detach()
            optimizer.step()
            recorder.write(sampler.current_share())
            state.step(loss_sum=step_loss)
            elastic.report(step=state.steps, samples=state.samples, loss=state.loss)
            if state.should_stop():
                break
    state.save()
    # A stop (a rescale, a reclaim within its grace period) leaves at once: evaluate only
    # the finished model.
    held_out = held_out_metrics(model, test_set, ctx.device) if state.finished else {}
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
