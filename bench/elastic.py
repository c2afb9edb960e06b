"""interstice.elastic benchmark: the elastic loop against a plain DDP loop, and checkpoints.

Both loops train the same model on the same data, in the same process group of W local
processes (``interstice.models.launch.run_group``; nccl with one GPU per rank on
``--device cuda``, gloo on ``--device cpu``), with the model and each batch on that device:

* plain: ``DistributedSampler`` + ``DataLoader(batch_size=G/W)`` + DDP, mean loss (with
  ``--plain-item`` it also reads ``loss.item()`` every step, a host sync per step);
* elastic: the documented loop: ``ElasticSampler`` as batch sampler +
  ``elastic.accumulate`` (loss sum scaled) + ``State.step`` + ``elastic.report`` +
  ``State.should_stop``.

``--aa`` (an A/A test) runs the plain loop's code in the elastic loop's place too, on the
elastic loop's model instance with a loader of its own: the two loops then differ only in
their model instance and their turn, and its ``overhead`` is what the harness resolves for
that model on that machine; read an elastic ``overhead`` against it.

``--fetch batched`` builds both loops' batches with one indexing call per step instead of one
per sample (``DataLoader(dataset, sampler=..., batch_size=None)`` over the ``ElasticSampler``,
resp. a ``BatchSampler`` of the ``DistributedSampler``), which a ``TensorDataset`` allows.

Models (``--model NAME[:G]``, repeatable; G defaults to ``--global-batch-size``): ``charlm``
(the transformer of ``examples/train_charlm.py`` on its data), ``resnet18`` and ``resnet50``
(torchvision, ``weights=None``, 10 classes, on random 3x32x32 images).

Timed in rounds of ``--steps`` steps of each loop, alternating which goes first (rank 0's
clock, between barriers, the device synchronised); the overhead is the median over rounds of
each round's ratio, so slow drifts of a shared machine hit both loops alike. Then the
model's checkpoint (model + AdamW state + sampler): ``State.save`` and ``State.load`` wall
time (median of ``--checkpoint-rounds``), and its size.

Prints JSON lines: ``{"bench": "loop", ..., "overhead"}`` with ``overhead = 1 - median of
elastic/ddp steps/s ratios`` (goal <= 0.02; ``overhead_min``/``_max``: the rounds' spread),
``cpu_overhead`` (the same from rank 0's process CPU time per round instead of wall time:
the work the elastic loop adds, which other load on a shared machine blurs less; not
meaningful on CUDA, where the host also spins while it waits for the device),
``phases_ms`` (rank 0's median host time per step of each phase of both loops: ``data`` is
the DataLoader's next batch; ``compute`` the rest up to ``optimizer.step()``, the copy to the
device included; ``accumulate`` the time inside ``elastic.accumulate``'s generator;
``state_step``, ``report``, ``should_stop`` the elastic calls), ``state_step_ms`` (median of
``State.step`` + ``report`` + ``should_stop`` together, which includes waiting for the
slowest rank at a collective), ``state_step_share`` (that time times the elastic steps/s:
its share of a step), ``own_share`` (the same with ``accumulate`` added: what the elastic
calls cost the host per step, as a share of a step) and ``load_avg`` (``os.getloadavg()``
before and after); then ``{"bench": "checkpoint", ...}``. ``--profile DIR`` also writes a
``torch.profiler`` chrome trace of 5 steps of each loop per model (rank 0) into DIR and
prints each one's top ops.

Examples:
    nice -n 10 python bench/elastic.py --world-size 2 --model charlm:32
    python bench/elastic.py --device cuda --world-size 1 --model charlm:256 \
        --model resnet18:256 --model resnet50:512 --plain-item
"""

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from interstice.models.launch import run_group
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset

from interstice import elastic

CHARLM = Path(__file__).resolve().parents[1] / "examples" / "train_charlm.py"
MODELS = ("charlm", "resnet18", "resnet50")
WARMUP_STEPS = 5
PROFILE_STEPS = 5


def _charlm():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("train_charlm", CHARLM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _workload(name: str, gbs: int) -> tuple[TensorDataset, Callable, Callable, Callable]:
    """``(train set, build model, loss sum, mean loss)`` of model ``name``."""
    if name == "charlm":
        charlm = _charlm()
        train_set, _, vocab = charlm.text_data()

        def mean_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(logits.flatten(0, 1), y.flatten())

        return train_set, lambda: charlm.CharTransformer(vocab), charlm.loss_sum, mean_loss
    import torchvision

    generator = torch.Generator().manual_seed(0)
    samples = max(8192, 16 * gbs)
    images = torch.randn(samples, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (samples,), generator=generator)
    build = getattr(torchvision.models, name)

    def loss_sum(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, y, reduction="sum")

    return (
        TensorDataset(images, labels),
        lambda: build(weights=None, num_classes=10),
        loss_sum,
        F.cross_entropy,
    )


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(
    steps_fn: Callable[[int], None], steps: int, device: torch.device
) -> tuple[float, float]:
    """Steps per second of ``steps_fn(steps)`` on rank 0, between barriers: per wall-clock
    second, and per second of this process's CPU time."""
    _synchronize(device)
    dist.barrier()
    started, cpu_started = time.perf_counter(), time.process_time()
    steps_fn(steps)
    _synchronize(device)
    cpu_s = time.process_time() - cpu_started
    dist.barrier()
    return steps / (time.perf_counter() - started), steps / max(cpu_s, 1e-9)


def _endless(loader: DataLoader):  # noqa: ANN202
    while True:
        yield from loader


def _profiled(name: str, steps_fn: Callable[[int], None], folder: Path | None, rank: int) -> None:
    if folder is None or rank != 0:
        steps_fn(PROFILE_STEPS)
        return
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        steps_fn(PROFILE_STEPS)
    folder.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(folder / f"{name}.json"))
    sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    print(f"== {name}", file=sys.stderr)
    print(prof.key_averages().table(sort_by=sort, row_limit=15), file=sys.stderr)


def measure_model(
    name: str, gbs: int, rank: int, world_size: int, args: argparse.Namespace
) -> list[dict] | None:
    """Both loops and the checkpoint timing of one model on this rank; rank 0's records."""
    ctx = elastic.current()
    device = ctx.device
    load_before = os.getloadavg()
    train_set, build, loss_sum, mean_loss = _workload(name, gbs)
    pin = device.type == "cuda"
    shared = [tempfile.mkdtemp(prefix="bench-elastic-") if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)  # one checkpoint dir for all ranks (one host)
    work = Path(shared[0])
    run_dir = work / f"run-{rank}"  # node-local in a job: one per rank here
    run_dir.mkdir()
    phases: dict[str, dict[str, list[float]]] = {
        "plain": defaultdict(list),
        "elastic": defaultdict(list),
    }

    def plain_batches() -> Iterator:
        sampler = DistributedSampler(train_set, world_size, rank, seed=0, drop_last=True)
        if args.fetch == "batched":
            batches_of = BatchSampler(sampler, gbs // world_size, drop_last=True)
            return _endless(DataLoader(train_set, sampler=batches_of, batch_size=None,
                                       pin_memory=pin))  # fmt: skip
        return _endless(DataLoader(train_set, batch_size=gbs // world_size, sampler=sampler,
                                   pin_memory=pin, drop_last=True))  # fmt: skip

    def plain_loop(net: DistributedDataParallel, opt: torch.optim.Optimizer,
                   times: dict[str, list[float]]) -> Callable[[int], None]:  # fmt: skip
        batches = plain_batches()

        def plain_steps(steps: int) -> None:
            for _ in range(steps):
                t0 = time.perf_counter()
                x, y = next(batches)
                t1 = time.perf_counter()
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                opt.zero_grad()
                loss = mean_loss(net(x), y)
                loss.backward()
                opt.step()
                t2 = time.perf_counter()
                if args.plain_item:
                    loss.item()
                t3 = time.perf_counter()
                times["data"].append(t1 - t0)
                times["compute"].append(t2 - t1)
                times["item"].append(t3 - t2)

        return plain_steps

    torch.manual_seed(0)
    plain_model = build().to(device)
    plain_opt = torch.optim.AdamW(plain_model.parameters(), lr=1e-3)
    plain_steps = plain_loop(DistributedDataParallel(plain_model), plain_opt, phases["plain"])

    torch.manual_seed(0)
    model = build().to(device)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sampler = elastic.ElasticSampler(len(train_set), gbs, seed=0)
    state = elastic.State(model=ddp, optimizer=optimizer, sampler=sampler,
                          checkpoint_dir=work / "checkpoints", run_dir=run_dir)  # fmt: skip
    if args.fetch == "batched":
        loader = DataLoader(train_set, sampler=sampler, batch_size=None, pin_memory=pin)
    else:
        loader = DataLoader(train_set, batch_sampler=sampler, pin_memory=pin)
    batches = _endless(loader)
    times = phases["elastic"]

    def elastic_steps(steps: int) -> None:
        # The loop of the README, with a clock around each phase.
        for _ in range(steps):
            t0 = time.perf_counter()
            batch = next(batches)
            t1 = time.perf_counter()
            optimizer.zero_grad()
            step_loss = torch.zeros((), device=device)
            inside = 0.0
            micro_batches = iter(elastic.accumulate(ddp, batch, gbs))
            while True:
                ta = time.perf_counter()
                item = next(micro_batches, None)
                inside += time.perf_counter() - ta
                if item is None:
                    break
                (x, y), scale = item
                loss = loss_sum(ddp(x.to(device, non_blocking=True)),
                                y.to(device, non_blocking=True))  # fmt: skip
                (loss * scale).backward()
                step_loss += loss.detach()
            optimizer.step()
            t2 = time.perf_counter()
            state.step(loss_sum=step_loss)
            t3 = time.perf_counter()
            elastic.report(step=state.steps, samples=state.samples, loss=state.loss)
            t4 = time.perf_counter()
            stop = state.should_stop()
            t5 = time.perf_counter()
            times["data"].append(t1 - t0)
            times["compute"].append(t2 - t1 - inside)
            times["accumulate"].append(inside)
            times["state_step"].append(t3 - t2)
            times["report"].append(t4 - t3)
            times["should_stop"].append(t5 - t4)
            times["bookkeeping"].append(t5 - t2)
            if stop:
                raise RuntimeError(f"stopped: {state.stop_reason}")

    # --aa: the plain loop's code on the elastic loop's model, with its own loader
    second_steps = plain_loop(ddp, optimizer, times) if args.aa else elastic_steps

    plain_steps(WARMUP_STEPS)
    second_steps(WARMUP_STEPS)
    _profiled(f"{name}-plain", plain_steps, args.profile, rank)
    _profiled(f"{name}-elastic", second_steps, args.profile, rank)
    for loop in phases.values():
        loop.clear()
    plain_rates, elastic_rates, plain_cpu, elastic_cpu = [], [], [], []
    for round_ in range(args.rounds):
        pair = [(plain_rates, plain_cpu, plain_steps), (elastic_rates, elastic_cpu, second_steps)]
        for rates, cpu_rates, fn in pair if round_ % 2 == 0 else reversed(pair):
            rate, cpu_rate = _timed(fn, args.steps, device)
            rates.append(rate)
            cpu_rates.append(cpu_rate)

    save_s, load_s = [], []
    for _ in range(args.checkpoint_rounds):
        state._saved_at_step = None  # save the same step again
        started = time.perf_counter()
        state.save()
        save_s.append(time.perf_counter() - started)
        dist.barrier()
        started = time.perf_counter()
        state.load()
        dist.barrier()
        load_s.append(time.perf_counter() - started)
    state._signals.restore()
    checkpoint_bytes = state.checkpoint_path.stat().st_size
    dist.barrier()
    if rank != 0:
        return None
    shutil.rmtree(work, ignore_errors=True)
    ddp_rate, elastic_rate = statistics.median(plain_rates), statistics.median(elastic_rates)
    ratios = [e / p for e, p in zip(elastic_rates, plain_rates, strict=True)]
    cpu_ratios = [e / p for e, p in zip(elastic_cpu, plain_cpu, strict=True)]
    bookkeeping = statistics.median(phases["elastic"].get("bookkeeping", [0.0]))  # --aa: none
    own = bookkeeping + statistics.median(phases["elastic"].get("accumulate", [0.0]))
    common = {
        "world_size": world_size,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if pin else "cpu",
        "backend": dist.get_backend(),
        "torch": torch.__version__,
        "model": name,
    }
    return [
        {
            "bench": "loop",
            **common,
            "global_batch_size": gbs,
            "plain_item": args.plain_item,
            "aa": args.aa,
            "fetch": args.fetch,
            "steps_per_round": args.steps,
            "rounds": args.rounds,
            "ddp_steps_per_s": round(ddp_rate, 3),
            "elastic_steps_per_s": round(elastic_rate, 3),
            "overhead": round(1 - statistics.median(ratios), 4),
            "overhead_min": round(1 - max(ratios), 4),
            "overhead_max": round(1 - min(ratios), 4),
            "cpu_overhead": round(1 - statistics.median(cpu_ratios), 4),
            "phases_ms": {
                loop: {k: round(1000 * statistics.median(v), 3) for k, v in times_.items()}
                for loop, times_ in phases.items()
            },
            "state_step_ms": round(1000 * bookkeeping, 3),
            "state_step_share": round(bookkeeping * elastic_rate, 4),
            "own_share": round(own * elastic_rate, 4),
            "load_avg": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        {
            "bench": "checkpoint",
            **common,
            "parameters": sum(p.numel() for p in model.parameters()),
            "bytes": checkpoint_bytes,
            "save_s": round(statistics.median(save_s), 4),
            "load_s": round(statistics.median(load_s), 4),
        },
    ]


def measure(rank: int, world_size: int, args: argparse.Namespace) -> list[dict] | None:
    """Every model of ``args.model`` on this rank; rank 0 returns the records."""
    os.environ["LOCAL_RANK"] = str(rank)  # one GPU per rank (elastic.init picks it)
    ctx = elastic.init()
    if ctx.device.type != args.device:
        raise RuntimeError(f"elastic.init() picked {ctx.device}, not {args.device}")
    if args.device == "cuda":
        torch.backends.cudnn.benchmark = True
    records: list[dict] = []
    for name, gbs in args.model:
        records += measure_model(name, gbs, rank, world_size, args) or []
    return records if rank == 0 else None


def _model(text: str) -> tuple[str, int | None]:
    name, _, gbs = text.partition(":")
    if name not in MODELS:
        raise argparse.ArgumentTypeError(f"unknown model {name!r} (one of {', '.join(MODELS)})")
    return name, int(gbs) if gbs else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default=default_device,
        help=f"where models and batches live (default here: {default_device})",
    )
    parser.add_argument("--world-size", type=int, default=2, help="local processes")
    parser.add_argument(
        "--model",
        type=_model,
        action="append",
        help=f"NAME[:G], repeatable; NAME one of {', '.join(MODELS)} (default: charlm)",
    )
    parser.add_argument(
        "--global-batch-size", type=int, default=32, help="samples per step of a --model without :G"
    )
    parser.add_argument(
        "--plain-item", action="store_true", help="the plain loop also reads loss.item() every step"
    )
    parser.add_argument(
        "--aa",
        action="store_true",
        help="A/A: the elastic loop's place runs the plain loop on its own model instance; "
        "its overhead is the harness's resolution",
    )
    parser.add_argument(
        "--fetch",
        choices=("per-index", "batched"),
        default="per-index",
        help="per-index: DataLoader(batch_size=...) / batch_sampler=, as "
        "documented; batched: one dataset[indices] call per step",
    )
    parser.add_argument("--steps", type=int, default=10, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds of each loop")
    parser.add_argument("--checkpoint-rounds", type=int, default=5, help="saves and loads")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--profile", type=Path, help="write torch.profiler traces here")
    args = parser.parse_args()  # fmt: skip
    args.model = [(n, g or args.global_batch_size) for n, g in args.model or [("charlm", None)]]
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the ranks' elastic.init() picks the CPU
        backend = "gloo"
    else:
        if torch.cuda.device_count() < args.world_size:
            parser.error(f"--world-size {args.world_size} needs as many GPUs")
        backend = "nccl"
    with contextlib.suppress(AttributeError):
        args.profile = args.profile.resolve()
    results = run_group(measure, args.world_size, (args,), backend=backend,
                        threads_per_rank=args.threads)  # fmt: skip
    for record in results[0]:
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
