"""ElasticSampler and the fixed global batch, in one process (ranks simulated)."""

import pytest
import torch
from elastic_records import coverage_problems
from hypothesis import given, settings
from hypothesis import strategies as st
from interstice.elastic import ElasticSampler, accumulate, micro_batch_sizes, plan, shares
from torch.utils.data import DataLoader, TensorDataset


def run_steps(state: dict, dataset_len: int, global_batch_size: int, world_size: int, steps: int,
              drop_last: bool = False) -> tuple[list[tuple[int, int]], dict]:  # fmt: skip
    """Train ``steps`` steps at ``world_size`` from ``state``: every rank's (epoch, index)."""
    samplers = [
        ElasticSampler(
            dataset_len,
            global_batch_size,
            seed=7,
            drop_last=drop_last,
            rank=r,
            world_size=world_size,
        )  # fmt: skip
        for r in range(world_size)
    ]
    trained = []
    for sampler in samplers:
        if state:
            sampler.load_state_dict(state)
    for _ in range(steps):
        shares_of_step = [s.current_share() for s in samplers]
        assert [p for share in shares_of_step for p in share] == samplers[0].global_batch()
        for sampler, share in zip(samplers, shares_of_step, strict=True):
            trained.extend(share)
            sampler.advance()
    return trained, samplers[0].state_dict()


@settings(max_examples=60, deadline=None)
@given(
    dataset_len=st.integers(1, 60),
    global_batch_size=st.integers(1, 16),
    runs=st.lists(st.tuples(st.integers(1, 16), st.integers(0, 12)), min_size=1, max_size=6),
)
def test_any_world_size_sequence_trains_each_index_once_per_epoch(
    dataset_len, global_batch_size, runs
):
    state, trained = {}, []
    for world_size, steps in runs:
        world_size = min(world_size, global_batch_size)
        pairs, state = run_steps(state, dataset_len, global_batch_size, world_size, steps)
        trained.extend(pairs)
    complete = len(trained) // dataset_len
    assert coverage_problems(trained, dataset_len, complete) == []
    assert len(trained) == global_batch_size * sum(steps for _, steps in runs)


def test_a_resume_without_the_offset_repeats_samples_and_the_check_catches_it():
    first, state = run_steps({}, 100, 8, 2, steps=5)
    second, _ = run_steps({**state, "offset": 0}, 100, 8, 4, steps=5)  # offset lost
    assert coverage_problems(first + second, 100, 0) != []
    second, _ = run_steps(state, 100, 8, 4, steps=5)
    assert coverage_problems(first + second, 100, 0) == []


def test_the_order_of_an_epoch_does_not_depend_on_the_world_size():
    orders = []
    for world_size in (1, 2, 3, 5):
        pairs, _ = run_steps({}, 37, 10, world_size, steps=4)
        orders.append(pairs)
    assert all(order == orders[0] for order in orders)
    assert sorted(i for e, i in orders[0] if e == 0) == list(range(37))


def test_a_step_at_the_end_of_an_epoch_completes_itself_from_the_next_one():
    pairs, state = run_steps({}, 10, 4, 2, steps=3)  # 12 samples: 10 of epoch 0, 2 of epoch 1
    assert [e for e, _ in pairs] == [0] * 10 + [1] * 2
    assert (state["epoch"], state["offset"]) == (1, 2)


def test_drop_last_skips_the_incomplete_batch_of_each_epoch():
    pairs, state = run_steps({}, 10, 4, 2, steps=3, drop_last=True)
    assert [e for e, _ in pairs] == [0] * 8 + [1] * 4
    assert len({i for e, i in pairs if e == 0}) == 8
    assert (state["epoch"], state["offset"]) == (1, 4)


def test_one_pass_runs_to_the_end_of_the_epoch_and_starts_at_the_saved_position():
    sampler = ElasticSampler(10, 4, seed=0, shuffle=False, rank=0, world_size=1)
    assert len(sampler) == 3
    assert list(sampler) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    sampler.advance(2)
    assert len(sampler) == 1 and list(sampler) == [[8, 9, 0, 1]]


def test_a_plain_dataloader_takes_it_as_batch_sampler_or_as_sampler_of_index_lists():
    dataset = TensorDataset(torch.arange(10.0), torch.arange(10))
    sampler = ElasticSampler(10, 4, seed=0, shuffle=False, rank=1, world_size=2)
    by_batch_sampler = [y.tolist() for _, y in DataLoader(dataset, batch_sampler=sampler)]
    by_sampler = [y.tolist() for _, y in DataLoader(dataset, sampler=sampler, batch_size=None)]
    assert by_batch_sampler == by_sampler == [[2, 3], [6, 7], [0, 1]]


def test_a_state_of_other_data_is_refused():
    state = ElasticSampler(10, 4, seed=0).state_dict()
    with pytest.raises(ValueError, match="dataset_len"):
        ElasticSampler(11, 4, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="seed"):
        ElasticSampler(10, 4, seed=1).load_state_dict(state)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="global_batch_size"):
        ElasticSampler(10, 0)
    with pytest.raises(ValueError, match="drop_last"):
        ElasticSampler(3, 4, drop_last=True)
    with pytest.raises(ValueError, match="world_size"):
        shares(4, 5)


def test_shares_and_micro_batches_add_up():
    assert shares(64, 3) == [22, 21, 21]
    assert micro_batch_sizes(22, 8) == [8, 7, 7]
    p = plan(64, 3, 8)
    assert sum(p.shares) == 64 and p.accumulation_steps == (3, 3, 3)
    assert all(sum(m) == s for m, s in zip(p.micro_batch_sizes, p.shares, strict=True))


def test_unequal_shares_with_micro_batches_give_the_global_mean_gradient():
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    x, y = torch.randn(13, 5), torch.randint(3, (13,))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    start = 0
    for share in shares(13, 4):  # 4 simulated ranks; summing their grads = all-reduce SUM
        part = (x[start : start + share], y[start : start + share])
        for (xb, yb), scale in accumulate(model, part, 13, max_micro_batch_size=2):
            (torch.nn.functional.cross_entropy(model(xb), yb, reduction="sum") * scale).backward()
        start += share
    for got, want in zip((p.grad for p in model.parameters()), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
