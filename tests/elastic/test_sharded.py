"""A SplitBrain-sharded model: checkpoint written at 2 ranks, resumed at 3 (uneven), final."""

import pytest
import torch
from interstice.models.launch import run_group
from interstice.models.splitbrain import ColumnParallelLinear, RowParallelLinear
from torch import nn

from interstice import elastic

pytestmark = pytest.mark.slow


def sharded_model(rank: int, world_size: int, seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    full = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4))
    full[0] = ColumnParallelLinear(full[0], rank, world_size)  # rows 10 -> 5+5 or 4+3+3
    full[2] = RowParallelLinear(full[2], rank, world_size)
    return full


def full_gradients(model: nn.Sequential, rank: int, world_size: int, step: int) -> None:
    """Give each parameter its slice of a seeded full-size gradient."""
    generator = torch.Generator().manual_seed(step)
    for name, parameter in model.named_parameters():
        dims = getattr(model[int(name.split(".")[0])], "shard_dims", {})
        dim = dims.get(name.split(".")[1])
        shape = list(parameter.shape)
        if dim is not None:
            shape[dim] = {0: 10, 1: 10}[dim]
        grad = torch.randn(shape, generator=generator)
        parameter.grad = grad if dim is None else grad.tensor_split(world_size, dim)[rank]


def train_and_save(rank: int, world_size: int, folder: str) -> dict:
    elastic.init()
    model = sharded_model(rank, world_size, seed=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    sampler = elastic.ElasticSampler(100, 10)
    state = elastic.State(model=model, optimizer=optimizer, sampler=sampler, checkpoint_dir=folder)
    assert elastic.is_sharded(model)
    for step in range(2):
        full_gradients(model, rank, world_size, step)
        optimizer.step()
        state.step()
    state.save()
    state._signals.restore()
    return {"params": model.state_dict(), "adam": optimizer.state_dict()["state"]}


def resume(rank: int, world_size: int, folder: str) -> dict:
    elastic.init()
    model = sharded_model(rank, world_size, seed=1)  # other values: the load must replace them
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    sampler = elastic.ElasticSampler(100, 10)
    state = elastic.State(model=model, optimizer=optimizer, sampler=sampler, checkpoint_dir=folder)
    assert state.load() and state.steps == 2
    state._signals.restore()
    final = elastic.save_final(model, f"{folder}/final.pt")
    return {"params": model.state_dict(), "adam": optimizer.state_dict()["state"], "final": final}


def joined(parts: list[dict], name: str, dim: int | None) -> torch.Tensor:
    tensors = [part["params"][name] for part in parts]
    return tensors[0] if dim is None else torch.cat(tensors, dim)


def joined_adam(parts: list[dict], index: int, key: str, dim: int | None) -> torch.Tensor:
    tensors = [part["adam"][index][key] for part in parts]
    return tensors[0] if dim is None else torch.cat(tensors, dim)


def test_a_sharded_checkpoint_resumes_at_another_world_size(tmp_path):
    saved = run_group(train_and_save, 2, (str(tmp_path),))
    assert len(list(tmp_path.glob("sharded-*"))) == 1
    resumed = run_group(resume, 3, (str(tmp_path),))
    assert [p["params"]["0.weight"].shape[0] for p in resumed] == [4, 3, 3]
    layout = {"0.weight": 0, "0.bias": 0, "2.weight": 1, "2.bias": None}
    for name, dim in layout.items():
        torch.testing.assert_close(joined(resumed, name, dim), joined(saved, name, dim))
    for index, dim in enumerate(layout.values()):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            want = joined_adam(saved, index, key, None if key == "step" else dim)
            torch.testing.assert_close(
                joined_adam(resumed, index, key, None if key == "step" else dim), want
            )
