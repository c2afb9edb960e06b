"""A user's own elastic training script, as the pilot (test_pilot.py) submits it.

A linear classifier on a fixed synthetic data set (512 samples of 8 features), trained with
the ``interstice.elastic`` calls only: process group, elastic sampler, fixed global batch,
agreed stop, checkpoint/resume, progress reports, final model. Each rank appends the
``epoch index`` pairs it trains to ``<record-samples>/rank<R>-pid<P>.txt`` so the test can
check that every index of every epoch was trained exactly once across every rescale.

``--pace-file``: while that file exists, each step also sleeps the seconds per sample it
holds times the samples of this rank's share, a stand-in for the compute of a real model
(the data set is too small to take time on its own): throughput grows with the world size,
as the optimizer expects from the rates it measures, and the test decides when the rest of
the budget trains at full speed. Rank 0 prints one ``generation start`` line per generation
and a JSON line at the end.
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from interstice import elastic

SAMPLES = 512
FEATURES = 8


def data_set() -> TensorDataset:
    """The same 512 samples on every rank: features [512, 8], labels [512] in {0, 1}."""
    x = torch.randn(SAMPLES, FEATURES, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, (x.sum(1) > 0).long())


def build_model() -> torch.nn.Module:
    return torch.nn.Linear(FEATURES, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--total-samples", type=int, required=True)
    parser.add_argument("--global-batch-size", type=int, required=True)
    parser.add_argument("--record-samples", type=Path, required=True)
    parser.add_argument("--pace-file", type=Path, required=True)
    args = parser.parse_args()

    ctx = elastic.init()
    data = data_set()
    torch.manual_seed(0)
    model = build_model()
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = elastic.ElasticSampler(len(data), args.global_batch_size, seed=0)
    state = elastic.State(
        model=ddp, optimizer=optimizer, sampler=sampler, checkpoint_dir=args.checkpoint_dir,
        total_samples=args.total_samples, save_every_s=30,
    )  # fmt: skip
    state.load()
    if ctx.rank == 0:
        print(f"generation start: world_size={ctx.world_size} samples={state.samples}", flush=True)
    args.record_samples.mkdir(parents=True, exist_ok=True)
    records = open(args.record_samples / f"rank{ctx.rank}-pid{os.getpid()}.txt", "a")
    loader = DataLoader(data, batch_sampler=sampler)
    while not state.should_stop():
        for batch in loader:
            optimizer.zero_grad()
            loss_sum = torch.zeros(())
            for (x, y), scale in elastic.accumulate(ddp, batch, args.global_batch_size):
                loss = F.cross_entropy(ddp(x), y, reduction="sum")
                (loss * scale).backward()
                loss_sum += loss.detach()
            optimizer.step()
            share = sampler.current_share()
            records.write("".join(f"{e} {i}\n" for e, i in share))
            records.flush()
            state.step(loss_sum=loss_sum)
            elastic.report(step=state.steps, samples=state.samples, loss=state.loss)
            try:
                time.sleep(float(args.pace_file.read_text()) * len(share))
            except (FileNotFoundError, ValueError):
                pass
            if state.should_stop():
                break
    state.save()
    if state.finished:
        elastic.save_final(model)
    if ctx.rank == 0:
        outcome = {"samples": state.samples, "finished": state.finished, "loss": state.loss}
        print(json.dumps(outcome), flush=True)
    elastic.shutdown()


if __name__ == "__main__":
    main()
