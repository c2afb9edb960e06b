"""Framework integrations' overhead: an example with interstice against the framework's own DDP.

For each ``--example`` script that supports ``--plain`` (``examples/train_lightning.py``,
``examples/train_hf.py``), each round runs it three times under ``torchrun`` (CPU, gloo,
``--nproc-per-node W``, ``OMP_NUM_THREADS=1``), in an order that rotates from round to
round: twice ``--plain`` (the framework's own DDP and DistributedSampler, no interstice: the
A/A pair) and once with interstice (its callback, sampler and checkpoint in a fresh
folder). A run's rate is ``samples / train_s`` from its result line (``train_s``: the
seconds in the framework's training call, imports and process start excluded); an example
whose line has no ``train_s`` is timed by the whole ``torchrun`` process instead
(``"timed": "process"``).

Prints one JSON line per example: ``aa_ratio`` (median over rounds of the second plain
run's rate over the first's: what the harness resolves on this machine, ideally 1),
``ratio`` (median of the interstice run's rate over the first plain run's),
``overhead = 1 - ratio`` (read it against ``1 - aa_ratio``), the rounds' ratios, the median
rates, ``load_avg`` (``os.getloadavg()`` before and after) and the date.

Example:
    nice -n 10 python bench/frameworks.py --example examples/train_lightning.py --rounds 3
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from interstice.ports import free_port


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", type=Path, action="append", required=True)
    parser.add_argument("--world-size", type=int, default=2, help="torchrun --nproc-per-node")
    parser.add_argument("--total-samples", type=int, default=32000, help="per run")
    parser.add_argument("--global-batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per run")
    return parser.parse_args()


def run_once(args: argparse.Namespace, example: Path, plain: bool) -> tuple[float, str]:
    """One ``torchrun`` of ``example``: its rate in samples/s and how it was timed.

    Raises:
        RuntimeError: the run failed or printed no result line.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERSTICE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    with tempfile.TemporaryDirectory() as folder:
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
            str(args.world_size), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", str(example),
            "--checkpoint-dir", folder, "--total-samples", str(args.total_samples),
            "--global-batch-size", str(args.global_batch_size), *(["--plain"] if plain else []),
        ]  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=args.timeout_s
        )
        process_s = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{example} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1])
    samples = result.get("samples", result.get("steps", 0) * args.global_batch_size)
    if "train_s" in result:
        return samples / result["train_s"], "train_s"
    return samples / process_s, "process"


def bench(args: argparse.Namespace, example: Path) -> dict:
    """The rounds of one example (see the module doc)."""
    load_before = os.getloadavg()
    modes = ("plain", "plain_again", "interstice")
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    timed = set()
    for round_index in range(args.rounds):
        shift = round_index % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            rate, how = run_once(args, example, plain=mode != "interstice")
            rates[mode].append(rate)
            timed.add(how)
    aa = [b / a for a, b in zip(rates["plain"], rates["plain_again"], strict=True)]
    ratios = [b / a for a, b in zip(rates["plain"], rates["interstice"], strict=True)]
    return {
        "bench": "frameworks",
        "example": str(example),
        "world_size": args.world_size,
        "total_samples": args.total_samples,
        "global_batch_size": args.global_batch_size,
        "rounds": args.rounds,
        "timed": "/".join(sorted(timed)),
        "aa_ratio": statistics.median(aa),
        "ratio": statistics.median(ratios),
        "overhead": 1 - statistics.median(ratios),
        "aa_ratios": aa,
        "ratios": ratios,
        "samples_per_s": {mode: statistics.median(values) for mode, values in rates.items()},
        "load_avg": [load_before[0], os.getloadavg()[0]],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def main() -> None:
    args = parse_args()
    for example in args.example:
        print(json.dumps(bench(args, example)), flush=True)


if __name__ == "__main__":
    main()
