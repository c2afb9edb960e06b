"""SplitBrain over gloo: the same mathematics as the unsharded model and as data parallel."""

import pytest
import torch
import torch.nn.functional as F
from interstice.models import Layout, build_trainer
from interstice.models.launch import run_group
from interstice.models.splitbrain import bytes_per_worker
from interstice.models.zoo import build_blocks

BATCH, SIDE, STEPS = 4, 8, 3


def _batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(BATCH, 3, SIDE, SIDE, generator=gen), torch.randint(
        0, 10, (BATCH,), generator=gen
    )


def _splitbrain_worker(rank: int, world_size: int) -> dict:
    torch.manual_seed(rank)
    trainer = build_trainer("tinycnn", Layout("splitbrain"), image_size=SIDE)
    reference = build_blocks("tinycnn")
    reference.load_state_dict(trainer.state_dict()["model"])
    # Unsharded reference: each rank's batch through the whole model, mean of the ranks' losses.
    batches = [_batch(0, r) for r in range(world_size)]
    ref_logits = [reference(x) for x, _ in batches]
    ref_losses = [F.cross_entropy(out, y) for out, (_, y) in zip(ref_logits, batches, strict=True)]
    torch.stack(ref_losses).mean().backward()
    logits = trainer.model(batches[rank][0])
    loss = trainer.step(*batches[rank])
    grads = {n: trainer._full_tensor(n, p.grad) for n, p in trainer.model.named_parameters()}
    out = {
        "logits_gap": (logits - ref_logits[rank]).abs().max().item(),
        "loss_gap": abs(loss - ref_losses[rank].item()),
        "grad_gap": {
            n: (grads[n] - p.grad).abs().max().item() for n, p in reference.named_parameters()
        },
    }
    # A few more steps against data parallel from the same start.
    dp = build_trainer("tinycnn", Layout("dp"), image_size=SIDE)
    start = trainer.state_dict()
    dp.load_state_dict(start)
    for step in range(1, STEPS):
        trainer.step(*_batch(step, rank))
        dp.step(*_batch(step, rank))
    hybrid_state, dp_state = trainer.state_dict(), dp.state_dict()
    out["dp_gap"] = max(
        (hybrid_state["model"][k] - v).abs().max().item() for k, v in dp_state["model"].items()
    )
    out["momentum_gap"] = max(
        (hybrid_state["momentum"][k] - v).abs().max().item()
        for k, v in dp_state["momentum"].items()
    )
    # A data-parallel checkpoint loads into the sharded trainer and comes back whole.
    trainer.load_state_dict(dp_state)
    out["reload_equal"] = all(
        torch.equal(trainer.state_dict()["model"][k], v) for k, v in dp_state["model"].items()
    )
    out["sharded_shape"] = tuple(dict(trainer.model.named_parameters())["3.1.0.weight"].shape)
    return out


@pytest.mark.parametrize("world_size", [2, 4])
def test_splitbrain_equals_unsharded_model_and_data_parallel(world_size: int) -> None:
    for rank, r in enumerate(run_group(_splitbrain_worker, world_size, timeout_s=120)):
        assert r["sharded_shape"] == (128 // world_size, 256), "Linear1 is not sharded"
        assert r["logits_gap"] < 1e-5, f"rank {rank}: logits differ by {r['logits_gap']}"
        assert r["loss_gap"] < 1e-5, f"rank {rank}: loss differs by {r['loss_gap']}"
        worst = max(r["grad_gap"], key=r["grad_gap"].get)
        assert r["grad_gap"][worst] < 1e-5, f"rank {rank}: gradient of {worst} differs"
        assert r["dp_gap"] < 1e-5 and r["momentum_gap"] < 1e-5, f"rank {rank}: differs from DP"
        assert r["reload_equal"]


def test_memory_per_worker_shrinks_by_the_sharded_layers() -> None:
    pytest.importorskip("torchvision", reason="vgg16 needs the vision extra")
    with torch.device("meta"):
        vgg = build_blocks("vgg16", 10)
    dp = bytes_per_worker(vgg, 4, hybrid=False)
    hybrid = bytes_per_worker(vgg, 4, hybrid=True)
    # vgg16: 138.4M parameters at 1000 classes, 134.3M at 10; Linear1 25088x4096, Linear2 4096^2.
    total = sum(p.numel() for p in vgg.parameters())
    sharded = 25088 * 4096 + 4096 + 4096 * 4096
    assert dp == 12 * total
    assert hybrid == 12 * (total - sharded + sharded // 4)


def _uneven_worker(rank: int, world_size: int) -> dict:
    """Per parallelism, the largest gradient gap of one step over a global batch of 7 samples
    split 4 + 3, against the unsharded model's gradient of the mean loss over the 7."""
    x0, y0 = _batch(0, 0)  # rank 0: 4 samples
    x1, y1 = (t[:3] for t in _batch(0, 1))  # rank 1: 3 samples
    gaps = {}
    for parallelism in ("dp", "splitbrain"):
        torch.manual_seed(rank)
        trainer = build_trainer("tinycnn", Layout(parallelism), image_size=SIDE)
        reference = build_blocks("tinycnn")
        reference.load_state_dict(trainer.state_dict()["model"])
        # BatchNorm normalises each rank's batch alone, so the reference runs them apart; a
        # SplitBrain rank short of the largest share pads with a copy of its first sample,
        # which BatchNorm sees and the loss ignores.
        padded = torch.cat([x1, x1[:1]]) if parallelism == "splitbrain" else x1
        loss_sum = F.cross_entropy(reference(x0), y0, reduction="sum") + F.cross_entropy(
            reference(padded)[:3], y1, reduction="sum"
        )
        (loss_sum / 7).backward()
        trainer.step(*((x0, y0) if rank == 0 else (x1, y1)), global_batch_size=7)
        expected = dict(reference.named_parameters())
        gaps[parallelism] = max(
            (trainer._full_tensor(n, p.grad) - expected[n].grad).abs().max().item()
            for n, p in trainer.model.named_parameters()
        )
    return gaps


def test_unequal_shares_of_a_global_batch_give_its_mean_gradient() -> None:
    for rank, gaps in enumerate(run_group(_uneven_worker, 2, timeout_s=120)):
        for parallelism, gap in gaps.items():
            assert gap < 1e-5, f"rank {rank} {parallelism}: gradient off by {gap}"
