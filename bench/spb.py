"""SPB benchmark: backward-time saving of each depth against the saving FLOPs predict.

One worker, one process (no communication: this isolates the compute SPB saves). For each model
and depth d, a partial worker runs blocks 0..d-1 under no_grad and backpropagates through the
rest (``interstice.models.spb.forward``); d = 0 is the full worker. Measured per depth:

* backward_ms: median wall time of ``loss.backward()`` (CUDA synchronised);
* backward_saving = 1 - backward_ms(d) / backward_ms(0);
* flop_saving = 1 - backward FLOPs(d) / backward FLOPs(0), FLOPs counted by
  ``torch.utils.flop_counter.FlopCounterMode`` during ``loss.backward()``;
* fraction_of_flop_saving = backward_saving / flop_saving (target >= 0.9 on GPU);
* saved_activation_bytes: bytes autograd stores for backward (saved-tensor hooks);
* peak_bytes (CUDA only): ``torch.cuda.max_memory_allocated`` over forward + backward.

Prints one JSON line per (model, depth). Example:
    python bench/spb.py --device cpu --models resnet18 --batch-size 8 --image-size 32
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from interstice.models.spb import forward
from interstice.models.zoo import build_blocks
from torch.utils.flop_counter import FlopCounterMode


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _one_pass(blocks, depth, inputs, targets, device):  # noqa: ANN001, ANN202
    """(backward seconds, saved activation bytes, peak bytes or None) of one step."""
    saved = 0
    weights = {p.data_ptr() for p in blocks.parameters()}

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        if t.data_ptr() not in weights:  # activations only, not references to parameters
            saved += t.numel() * t.element_size()
        return t

    blocks.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.cross_entropy(forward(blocks, depth, inputs, full=False), targets)
    _sync(device)
    start = time.perf_counter()
    loss.backward()
    _sync(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    return seconds, saved, peak


def _backward_flops(blocks, depth, inputs, targets) -> int:  # noqa: ANN001
    blocks.zero_grad(set_to_none=True)
    loss = F.cross_entropy(forward(blocks, depth, inputs, full=False), targets)
    with FlopCounterMode(display=False) as counter:
        loss.backward()
    return counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--models", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-depth", type=int, default=3)
    args = parser.parse_args()
    device = torch.device(args.device)
    for model in args.models.split(","):
        torch.manual_seed(0)
        blocks = build_blocks(model, 1000 if args.image_size >= 224 else 10).to(device).train()
        inputs = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
        targets = torch.randint(0, 10, (args.batch_size,), device=device)
        base_ms = base_flops = None
        for depth in range(min(args.max_depth, len(blocks) - 1) + 1):
            for _ in range(2):  # warm-up: allocator, cuDNN algorithm choice
                _one_pass(blocks, depth, inputs, targets, device)
            runs = [_one_pass(blocks, depth, inputs, targets, device) for _ in range(args.repeats)]
            backward_ms = 1000 * statistics.median(r[0] for r in runs)
            flops = _backward_flops(blocks, depth, inputs, targets)
            if depth == 0:
                base_ms, base_flops = backward_ms, flops
            time_saving = 1 - backward_ms / base_ms
            flop_saving = 1 - flops / base_flops
            print(
                json.dumps(
                    {
                        "bench": "spb",
                        "model": model,
                        "device": str(device),
                        "batch_size": args.batch_size,
                        "image_size": args.image_size,
                        "spb_depth": depth,
                        "backward_ms": round(backward_ms, 3),
                        "backward_gflops": round(flops / 1e9, 3),
                        "backward_saving": round(time_saving, 4),
                        "flop_saving": round(flop_saving, 4),
                        "fraction_of_flop_saving": round(time_saving / flop_saving, 3)
                        if flop_saving > 0
                        else None,
                        "saved_activation_bytes": runs[-1][1],
                        "peak_bytes": runs[-1][2],
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
