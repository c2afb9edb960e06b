"""interstice.elastic benchmark: the elastic loop against a plain DDP loop, and checkpoints.

Both loops train the character transformer of ``examples/train_charlm.py`` on its data, in
the same process group of W local processes (``interstice.models.launch.run_group``, gloo):

* plain: ``DistributedSampler`` + ``DataLoader(batch_size=G/W)`` + DDP, mean loss;
* elastic: ``ElasticSampler`` as batch sampler + ``elastic.accumulate`` (loss sum scaled) +
  ``State.step`` (the one stop/loss all-reduce per step) + ``elastic.report`` (progress file).

Timed in rounds of ``--steps`` steps of each loop, alternating which goes first (rank 0's
clock, between barriers); the overhead is the median over rounds of each round's ratio, so
slow drifts of a shared machine hit both loops alike. Then the charlm model's
checkpoint (model + AdamW state + sampler): ``State.save`` and ``State.load`` wall time
(median of ``--rounds``), and its size.

Prints JSON lines: ``{"bench": "loop", ..., "overhead"}`` with ``overhead = 1 - median of
elastic/ddp steps/s ratios`` (goal <= 0.02; ``overhead_min``/``_max``: the rounds' spread),
``state_step_ms`` (median wall time of ``State.step`` + ``report`` + ``should_stop``, the
elastic loop's own work, which includes waiting for the slowest rank at its all-reduce) and
``state_step_share`` (that time times the elastic steps/s: its share of a step, a bound on
the overhead that the machine's noise does not blur), and ``{"bench": "checkpoint", ...}``.
Example:
    nice -n 10 python bench/elastic.py --world-size 2 --global-batch-size 32
"""

import argparse
import importlib.util
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from interstice.models.launch import run_group
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from interstice import elastic

CHARLM = Path(__file__).resolve().parents[1] / "examples" / "train_charlm.py"


def _charlm():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("train_charlm", CHARLM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _timed(steps_fn, steps: int) -> float:  # noqa: ANN001
    """Steps per second of ``steps_fn(steps)`` on rank 0, between barriers."""
    dist.barrier()
    started = time.perf_counter()
    steps_fn(steps)
    dist.barrier()
    return steps / (time.perf_counter() - started)


def _endless(loader):  # noqa: ANN001, ANN202
    while True:
        yield from loader


def measure(rank: int, world_size: int, args: argparse.Namespace) -> list[dict] | None:
    """Run both loops and the checkpoint timing on this rank; rank 0 returns the records."""
    charlm = _charlm()
    train_set, _, vocab = charlm.text_data()
    gbs = args.global_batch_size
    work = Path(tempfile.mkdtemp(prefix="bench-elastic-"))
    ctx = elastic.init()

    torch.manual_seed(0)
    plain_model = charlm.CharTransformer(vocab)
    plain = DistributedDataParallel(plain_model)
    plain_opt = torch.optim.AdamW(plain_model.parameters(), lr=1e-3)
    plain_sampler = DistributedSampler(train_set, world_size, rank, seed=0, drop_last=True)
    plain_batches = _endless(DataLoader(train_set, batch_size=gbs // world_size,
                                        sampler=plain_sampler))  # fmt: skip

    def plain_steps(steps: int) -> None:
        for _ in range(steps):
            x, y = next(plain_batches)
            plain_opt.zero_grad()
            F.cross_entropy(plain(x).flatten(0, 1), y.flatten()).backward()
            plain_opt.step()

    torch.manual_seed(0)
    model = charlm.CharTransformer(vocab)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sampler = elastic.ElasticSampler(len(train_set), gbs, seed=0)
    state = elastic.State(model=ddp, optimizer=optimizer, sampler=sampler,
                          checkpoint_dir=work / "checkpoints", run_dir=work)  # fmt: skip
    batches = _endless(DataLoader(train_set, batch_sampler=sampler))
    bookkeeping_s: list[float] = []

    def elastic_steps(steps: int) -> None:
        for _ in range(steps):
            batch = next(batches)
            optimizer.zero_grad()
            step_loss = torch.zeros(())
            for (x, y), scale in elastic.accumulate(ddp, batch, gbs):
                loss = charlm.loss_sum(ddp(x), y)
                (loss * scale).backward()
                step_loss += loss.detach()
            optimizer.step()
            started = time.perf_counter()
            state.step(loss_sum=step_loss)
            elastic.report(step=state.steps, samples=state.samples, loss=state.loss)
            stop = state.should_stop()
            bookkeeping_s.append(time.perf_counter() - started)
            if stop:
                raise RuntimeError(f"stopped: {state.stop_reason}")

    plain_steps(3)
    elastic_steps(3)
    plain_rates, elastic_rates = [], []
    for round_ in range(args.rounds):
        pair = [(plain_rates, plain_steps), (elastic_rates, elastic_steps)]
        for rates, fn in pair if round_ % 2 == 0 else reversed(pair):
            rates.append(_timed(fn, args.steps))

    save_s, load_s = [], []
    for _ in range(args.rounds):
        state._saved_at_step = None  # save the same step again
        started = time.perf_counter()
        state.save()
        save_s.append(time.perf_counter() - started)
        dist.barrier()
        started = time.perf_counter()
        state.load()
        dist.barrier()
        load_s.append(time.perf_counter() - started)
    if rank != 0:
        return None
    ddp_rate, elastic_rate = statistics.median(plain_rates), statistics.median(elastic_rates)
    ratios = [e / p for e, p in zip(elastic_rates, plain_rates, strict=True)]
    common = {"world_size": world_size, "device": str(ctx.device), "backend": dist.get_backend()}
    return [
        {
            "bench": "loop",
            **common,
            "model": "charlm",
            "global_batch_size": gbs,
            "steps_per_round": args.steps,
            "rounds": args.rounds,
            "ddp_steps_per_s": round(ddp_rate, 3),
            "elastic_steps_per_s": round(elastic_rate, 3),
            "overhead": round(1 - statistics.median(ratios), 4),
            "overhead_min": round(1 - max(ratios), 4),
            "overhead_max": round(1 - min(ratios), 4),
            "state_step_ms": round(1000 * statistics.median(bookkeeping_s), 3),
            "state_step_share": round(statistics.median(bookkeeping_s) * elastic_rate, 4),
        },
        {
            "bench": "checkpoint",
            **common,
            "model": "charlm",
            "parameters": sum(p.numel() for p in model.parameters()),
            "bytes": state.checkpoint_path.stat().st_size,
            "save_s": round(statistics.median(save_s), 4),
            "load_s": round(statistics.median(load_s), 4),
        },
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2, help="local processes")
    parser.add_argument("--global-batch-size", type=int, default=32, help="samples per step")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds of each loop")
    args = parser.parse_args()
    for record in run_group(measure, args.world_size, (args,))[0]:
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
