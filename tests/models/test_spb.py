"""SPB over gloo: gradients equal the single-process definition; d = 0 equals DDP."""

import copy

import pytest
import torch
from interstice.models import Layout, build_trainer
from interstice.models.launch import run_group
from interstice.models.spb import full_ranks, num_full_workers, simulate_gradients
from torch.nn.parallel import DistributedDataParallel

BATCH, SIDE, STEPS = 4, 8, 3


def _batches(step: int, world_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every rank's batch at ``step`` (each rank can compute all of them)."""
    gen = torch.Generator().manual_seed(1000 + step)
    return [
        (
            torch.randn(BATCH, 3, SIDE, SIDE, generator=gen),
            torch.randint(0, 10, (BATCH,), generator=gen),
        )
        for _ in range(world_size)
    ]


def _spb_worker(rank: int, world_size: int) -> dict:
    """Per depth: largest gradient error against the reference; final parameters."""
    torch.manual_seed(rank)  # different fresh weights per rank: the broadcast must fix that
    errors, params = {}, {}
    for depth in range(4):
        trainer = build_trainer("tinycnn", Layout("spb", depth), image_size=SIDE)
        worst = 0.0
        for step in range(STEPS):
            reference_model = copy.deepcopy(trainer.model)
            batches = _batches(step, world_size)
            full = full_ranks(step, world_size, num_full_workers(world_size, 0.5))
            expected = simulate_gradients(reference_model, depth, batches, full)
            trainer.step(*batches[rank])
            for name, p in trainer.model.named_parameters():
                worst = max(worst, (p.grad - expected[name]).abs().max().item())
        errors[depth] = worst
        params[depth] = torch.cat([p.detach().reshape(-1) for p in trainer.model.parameters()])
    # d = 0 against DDP, from the same weights and batches.
    trainer = build_trainer("tinycnn", Layout("dp"), image_size=SIDE)
    ddp = DistributedDataParallel(copy.deepcopy(trainer.model))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    for step in range(STEPS):
        inputs, targets = _batches(step, world_size)[rank]
        trainer.step(inputs, targets)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(ddp(inputs), targets).backward()
        optimizer.step()
    ddp_gap = max(
        (a - b).abs().max().item()
        for a, b in zip(trainer.model.parameters(), ddp.module.parameters(), strict=True)
    )
    return {"errors": errors, "params": params, "ddp_gap": ddp_gap, "state": trainer.state_dict()}


@pytest.mark.parametrize("world_size", [2, 4])
def test_spb_gradients_match_reference_and_ranks_agree(world_size: int) -> None:
    results = run_group(_spb_worker, world_size, timeout_s=120)
    for rank, result in enumerate(results):
        for depth, error in result["errors"].items():
            assert error < 1e-5, f"rank {rank} depth {depth}: gradient off by {error}"
        assert result["ddp_gap"] < 1e-5, f"rank {rank}: d=0 differs from DDP by {result['ddp_gap']}"
    for depth in range(4):
        for result in results[1:]:
            assert torch.equal(result["params"][depth], results[0]["params"][depth])
    for key, value in results[0]["state"]["model"].items():
        assert torch.equal(value, results[-1]["state"]["model"][key]), key


def test_partial_workers_skip_lower_gradients_and_data_reaches_every_rank() -> None:
    # Rotating windows: with W = 4 and k = 2 every rank is full within 2 steps.
    assert full_ranks(0, 4, 2) | full_ranks(1, 4, 2) == frozenset(range(4))
    assert num_full_workers(1, 0.5) == 1 and num_full_workers(3, 0.5) == 2
    # The definition itself: lower blocks average over full ranks only.
    torch.manual_seed(0)
    model = build_blocks_for_test()
    batches = _batches(0, 2)
    spb = simulate_gradients(model, 2, batches, frozenset({0}))
    only_rank0 = simulate_gradients(model, 0, batches[:1], frozenset({0}))
    both = simulate_gradients(model, 0, batches, frozenset({0, 1}))
    lower = "0.0.weight"
    upper = "3.1.4.weight"
    assert torch.allclose(spb[lower], only_rank0[lower], atol=1e-6)
    assert torch.allclose(spb[upper], both[upper], atol=1e-6)
    assert not torch.allclose(spb[lower], both[lower], atol=1e-6)


def build_blocks_for_test() -> torch.nn.Sequential:
    from interstice.models.zoo import build_blocks

    return build_blocks("tinycnn")


def test_bad_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match="spb_depth 4 is out of range"):
        run_or_raise("tinycnn", Layout("spb", 4))
    with pytest.raises(ValueError, match="model 'nope' is unknown"):
        run_or_raise("nope", Layout("spb", 0))


def test_bad_arguments_of_imagenet_models_name_the_value() -> None:
    pytest.importorskip("torchvision", reason="resnet18 and AlexNet need the vision extra")
    with pytest.raises(ValueError, match="splitbrain"):
        run_or_raise("resnet18", Layout("splitbrain"))
    with pytest.raises(ValueError, match="image_size 32"):
        run_or_raise("AlexNet", Layout("dp"))


def test_layout_names_the_value_to_change() -> None:
    with pytest.raises(ValueError, match="parallelism 'tp': choose one of dp, spb, splitbrain"):
        Layout("tp")
    with pytest.raises(ValueError, match="spb_depth 2: only parallelism 'spb'.*set spb_depth to 0"):
        Layout("splitbrain", 2)
    with pytest.raises(ValueError, match="full_fraction 0 must be in"):
        Layout("spb", 1, full_fraction=0)
    tiny = build_blocks_for_test()
    Layout("splitbrain").check(tiny, 128)  # tinycnn's first classifier layer: 128 outputs
    with pytest.raises(ValueError, match="world size 129: .*lower the job's max_nodes to 128"):
        Layout("splitbrain").check(tiny, 129)
    with pytest.raises(ValueError, match="spb_depth 3 is out of range"):
        Layout("spb", 3).check(torch.nn.Sequential(*tiny[:3]), 2)
    with pytest.raises(ValueError, match="world size 0"):
        Layout("dp").check(tiny, 0)


def run_or_raise(model: str, layout: Layout) -> None:
    """build_trainer in a world of one, in this process."""
    import torch.distributed as dist

    from interstice.ports import free_port

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        build_trainer(model, layout)
    finally:
        dist.destroy_process_group()
