"""SplitBrain benchmark: memory per worker and throughput, hybrid against data parallel.

Memory: parameter + gradient + SGD-momentum bytes per worker, computed exactly from shard shapes
(``interstice.models.splitbrain.bytes_per_worker`` on a model built on the ``meta`` device, so no
process is launched) for VGG16 at CIFAR-10 shape (32x32, 10 classes) and ImageNet shape (224x224,
1000 classes), W = 2, 4, 8. torchvision's VGG16 pools adaptively to 512x7x7 before its classifier
whatever the input side, so at 32x32 the classifier is the same 25088-4096-4096 stack; the input
side changes activations, not these bytes. The paper (Lai et al., arXiv 2112.15317) reports
"up to 67 %" less memory.

Throughput: W processes (``launch.run_group``) train ``--model`` with ``build_trainer`` under
``dp`` and ``splitbrain``; samples/s = W * batch * steps / slowest rank's seconds.

Prints JSON lines. Example:
    python bench/splitbrain.py --device cpu --workers 2 --model vgg16 --steps 2
"""

import argparse
import json
import time

import torch
import torch.distributed as dist
from interstice.models import Layout, build_trainer
from interstice.models.launch import run_group
from interstice.models.splitbrain import bytes_per_worker
from interstice.models.zoo import build_blocks


def memory_rows() -> list[dict]:
    rows = []
    for shape, side, classes in (("cifar10", 32, 10), ("imagenet", 224, 1000)):
        with torch.device("meta"):
            vgg = build_blocks("vgg16", classes)
        for workers in (2, 4, 8):
            dp = bytes_per_worker(vgg, workers, hybrid=False)
            hybrid = bytes_per_worker(vgg, workers, hybrid=True)
            rows.append(
                {
                    "bench": "splitbrain_memory",
                    "model": "vgg16",
                    "shape": f"{shape} {side}x{side}, {classes} classes",
                    "workers": workers,
                    "dp_mib": round(dp / 2**20, 1),
                    "hybrid_mib": round(hybrid / 2**20, 1),
                    "reduction": round(1 - hybrid / dp, 4),
                    "paper_reduction_up_to": 0.67,
                }
            )
    return rows


def _worker(rank, world_size, model, parallelism, device, steps, batch, side):  # noqa: ANN001, ANN201
    target = torch.device(device)
    trainer = build_trainer(model, Layout(parallelism), image_size=side, device=target)
    inputs = torch.randn(batch, 3, side, side, device=target)
    targets = torch.randint(0, 10, (batch,), device=target)
    trainer.step(inputs, targets)  # warm-up
    if target.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        trainer.step(inputs, targets)
    if target.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--backend", default="gloo", help="gloo works with several ranks per GPU")
    parser.add_argument("--model", default="vgg16")
    parser.add_argument("--workers", default="2,4")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--threads-per-rank", type=int, default=1)
    args = parser.parse_args()
    for row in memory_rows():
        print(json.dumps(row), flush=True)
    for workers in (int(w) for w in args.workers.split(",")):
        rates = {}
        for parallelism in ("dp", "splitbrain"):
            seconds = run_group(
                _worker,
                workers,
                (
                    args.model,
                    parallelism,
                    args.device,
                    args.steps,
                    args.batch_size,
                    args.image_size,
                ),
                backend=args.backend,
                threads_per_rank=args.threads_per_rank,
            )
            rates[parallelism] = workers * args.batch_size * args.steps / max(seconds)
        print(
            json.dumps(
                {
                    "bench": "splitbrain_throughput",
                    "model": args.model,
                    "device": args.device,
                    "backend": args.backend,
                    "workers": workers,
                    "batch_size": args.batch_size,
                    "image_size": args.image_size,
                    "dp_samples_per_s": round(rates["dp"], 2),
                    "hybrid_samples_per_s": round(rates["splitbrain"], 2),
                    "hybrid_over_dp": round(rates["splitbrain"] / rates["dp"], 3),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
