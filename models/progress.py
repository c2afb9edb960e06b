"""SPB's statistical effect, measured: ``progress_per_sample`` of each depth on real data.

SPB makes partial workers' samples train only the upper blocks, so a sample at depth d > 0 is
worth less than a full-backprop sample. The optimizer needs that worth as a number; this module
measures it instead of assuming it.

Set-up (fixed, so the figures are comparable): scikit-learn's handwritten digits (1797 8x8
grey images shipped with the package, nothing downloaded), 1397 for training and 400 held out;
``tinycnn`` with one input channel; W = 4 simulated workers with SPB's full-worker rotation
(``spb.full_ranks``, full_fraction 0.5), each taking ``batch_size`` samples per step; SGD with
momentum. One process computes what the W ranks would (``spb.simulate_gradients``, which the
distributed tests check against the real trainer); BatchNorm running statistics see every
simulated rank's batch.

Derivation of ``progress_per_sample`` for depth d (averaged over seeds): train d = 0 and d for the
same N samples, recording the held-out loss every few steps. Let L_d be depth d's final held-out
loss and n0(L) the samples d = 0 needed to first reach loss L (linear interpolation on the running
minimum of its curve, from the initial loss at n = 0). Then

    progress_per_sample(d) = clip(n0(L_d) / N, 1 / N, 1),

i.e. the samples of full-backprop training one SPB sample is worth. d = 0 gives 1 by definition.
The profiler reports this for every model, using the same depth on ``tinycnn`` (capped at its
last block) as a proxy: training every torchvision model to convergence here is out of reach.
"""

from dataclasses import dataclass
from functools import cache

import numpy as np
import torch
import torch.nn.functional as F
from interstice.models.spb import check_depth, full_ranks, num_full_workers, simulate_gradients
from interstice.models.zoo import tinycnn
from torch import nn

WORLD_SIZE = 4
FULL_FRACTION = 0.5
TRAIN_SAMPLES = 1397


@dataclass(frozen=True)
class DepthProgress:
    """What training at one SPB depth achieved on digits.

    Attributes:
        spb_depth: d.
        samples: training samples seen (all simulated workers together).
        final_loss: held-out cross-entropy after training, nats (mean over seeds).
        accuracy: held-out accuracy after training, in [0, 1] (mean over seeds).
        progress_per_sample: samples of d = 0 progress one sample is worth, in (0, 1].
    """

    spb_depth: int
    samples: int
    final_loss: float
    accuracy: float
    progress_per_sample: float


@cache
def _digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = (images - images.mean()) / images.std()
    labels = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    train, test = order[:TRAIN_SAMPLES], order[TRAIN_SAMPLES:]
    return images[train], labels[train], images[test], labels[test]


def _evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        logits = model(images)
    model.train()
    loss = F.cross_entropy(logits, labels).item()
    return loss, (logits.argmax(1) == labels).float().mean().item()


def _train_curve(
    depth: int, seed: int, steps: int, batch_size: int, lr: float, eval_every: int
) -> tuple[list[int], list[float], float]:
    """Held-out loss at samples 0, eval_every*W*B, ...; and the final accuracy."""
    x_train, y_train, x_test, y_test = _digits()
    torch.manual_seed(seed)
    model = tinycnn(num_classes=10, in_channels=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    gen = torch.Generator().manual_seed(seed)
    num_full = num_full_workers(WORLD_SIZE, FULL_FRACTION)
    samples_per_step = WORLD_SIZE * batch_size
    xs, losses = [0], [_evaluate(model, x_test, y_test)[0]]
    for step in range(steps):
        index = torch.randint(0, len(y_train), (samples_per_step,), generator=gen)
        batches = list(
            zip(x_train[index].chunk(WORLD_SIZE), y_train[index].chunk(WORLD_SIZE), strict=True)
        )
        grads = simulate_gradients(model, depth, batches, full_ranks(step, WORLD_SIZE, num_full))
        for name, p in model.named_parameters():
            p.grad = grads[name]
        optimizer.step()
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            xs.append((step + 1) * samples_per_step)
            losses.append(_evaluate(model, x_test, y_test)[0])
    return xs, losses, _evaluate(model, x_test, y_test)[1]


def samples_to_reach(samples: list[int], losses: list[float], target: float) -> float:
    """Samples the curve first needs to reach ``target`` loss (linear interpolation on the
    running minimum); ``inf`` if it never does."""
    best = np.minimum.accumulate(np.asarray(losses, dtype=float))
    if target >= best[0]:
        return 0.0
    for i in range(1, len(best)):
        if best[i] <= target:
            fraction = (best[i - 1] - target) / (best[i - 1] - best[i])
            return samples[i - 1] + fraction * (samples[i] - samples[i - 1])
    return float("inf")


def measure_progress(
    depths: tuple[int, ...] = (0, 1, 2, 3),
    *,
    steps: int = 120,
    batch_size: int = 16,
    lr: float = 0.05,
    seeds: tuple[int, ...] = (0, 1, 2),
    eval_every: int = 5,
) -> list[DepthProgress]:
    """Train ``tinycnn`` on digits at each depth for the same samples; see the module docstring.

    Args:
        depths: SPB depths, each in 0..3 (tinycnn has 4 blocks).
        steps: optimizer steps; samples = steps * 4 workers * batch_size.
        batch_size: samples per simulated worker per step.
        lr: SGD learning rate.
        seeds: runs averaged per depth.
        eval_every: steps between held-out evaluations.

    Returns:
        One ``DepthProgress`` per depth, in order.

    Raises:
        ValueError: a depth outside 0..3.
    """
    blocks = tinycnn(in_channels=1)
    for d in depths:
        check_depth(blocks, d)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: more threads only add synchronisation
    try:
        curves = {
            d: [_train_curve(d, s, steps, batch_size, lr, eval_every) for s in seeds]
            for d in sorted(set(depths) | {0})
        }
    finally:
        torch.set_num_threads(threads)
    samples = curves[0][0][0]
    total = samples[-1]
    mean_loss = {d: np.mean([c[1] for c in runs], axis=0) for d, runs in curves.items()}
    results = []
    for d in depths:
        final = float(mean_loss[d][-1])
        needed = samples_to_reach(samples, list(mean_loss[0]), final)
        progress = 1.0 if d == 0 else float(np.clip(needed / total, 1 / total, 1.0))
        accuracy = float(np.mean([c[2] for c in curves[d]]))
        results.append(DepthProgress(d, total, final, accuracy, progress))
    return results
