"""Writing an allocation: jobs that trade nodes (each job's move sees the nodes it holds
after the moves written before it in the same transaction), the nodes as the control loop
reads them, and the record of each solve."""

from __future__ import annotations

import pytest
from api_helpers import Api
from interstice.api.control import loop
from interstice.api.control.loop import apply_allocation
from interstice.api.services import state
from interstice.api.store.tables import Agent, AllocationRecord, Command, Node
from interstice.optimizer import Allocation, JobAllocation
from sqlalchemy import func, select, update


def _share(job_id: str, nodes: list[str]) -> JobAllocation:
    return JobAllocation(
        job_id=job_id,
        node_count=len(nodes),
        node_names=tuple(nodes),
        spb_depth=0,
        samples_per_s=1.0,
        goodput=1.0,
        rescaled=True,
    )


def _allocation(*shares: JobAllocation) -> Allocation:
    return Allocation(
        status="optimal", objective=0.0, backend="cpsat", solve_time_s=0.0, horizon_s=60.0,
        jobs=shares,
    )  # fmt: skip


def test_two_jobs_that_swap_a_node_each_keep_every_node_held(api: Api) -> None:
    nodes = ["n1", "n2", "n3", "n4"]
    agents = {n: api.register(n) for n in nodes}
    api.node_events(*((f"e-{n}", n, "idle", 0) for n in nodes))
    a = api.submit(max_nodes=2)["job_id"]
    b = api.submit(max_nodes=2)["job_id"]
    api.wait_for(lambda: len(api.job(a)["nodes"]) == 2 and len(api.job(b)["nodes"]) == 2)
    (a1, a2), (b1, b2) = api.job(a)["nodes"], api.job(b)["nodes"]
    # Equal growth (0): the moves are written in job order, A first. A gives a2 to B and
    # takes b1; when B's move is written, b1 is already A's: B must not stop or free it.
    swap = _allocation(_share(a, sorted([a1, b1])), _share(b, sorted([a2, b2])))
    service = api.app.state.service
    apply_allocation(service, swap)
    with service.db.read() as session:
        holders = {n.name: n.holder_job_id for n in session.scalars(select(Node))}
        b_number = int(b.split("-")[1])
        stops_for_b = [
            c.agent_id
            for c in session.scalars(
                select(Command).where(Command.job_id == b_number, Command.kind == "stop")
            )
        ]
    number = {a: int(a.split("-")[1]), b: b_number}
    assert holders == {a1: number[a], b1: number[a], a2: number[b], b2: number[b]}
    assert int(agents[b1].split("-")[1]) not in stops_for_b  # b1 went to A, not to nobody


def test_the_node_view_gives_the_pool_and_every_held_node_sorted(api: Api) -> None:
    for node in ["n3", "n1", "n2"]:
        api.register(node)
    api.node_events(("e-n3", "n3", "idle", 0), ("e-n1", "n1", "idle", 0))
    api.node_events(("e-n9", "n9", "idle", 0))  # idle, but no agent: not allocatable
    job = api.submit(max_nodes=2)["job_id"]
    api.wait_for(lambda: len(api.job(job)["nodes"]) == 2)
    service = api.app.state.service
    with service.db.write() as session:  # n3's agent lost: held, out of the pool
        session.execute(update(Agent).where(Agent.node == "n3").values(state="lost"))
    with service.db.read() as session:
        view = state.node_view(session)
    assert view.pool == ["n1"]
    assert view.held == {int(job.split("-")[1]): ["n1", "n3"]}


def test_a_solve_is_recorded_without_node_names_and_only_the_newest_are_kept(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = ["n1", "n2"]
    for node in nodes:
        api.register(node)
    api.node_events(*((f"e-{n}", n, "idle", 0) for n in nodes))
    job = api.submit(max_nodes=2)["job_id"]
    api.wait_for(lambda: len(api.job(job)["nodes"]) == 2)
    service = api.app.state.service
    monkeypatch.setattr(loop, "SOLVES_KEPT", 2)
    with service.db.read() as session:
        commands_before = session.scalar(select(func.count()).select_from(Command))
    for _ in range(3):  # what the job already holds: no move, three records
        changes = apply_allocation(service, _allocation(_share(job, nodes)))
        assert not changes.wake
    with service.db.read() as session:
        records = list(session.scalars(select(AllocationRecord).order_by(AllocationRecord.id)))
        commands_after = session.scalar(select(func.count()).select_from(Command))
    assert commands_after == commands_before
    assert len(records) == 2 and records[1].id == records[0].id + 1
    ours = {"job_id": job, "node_count": 2, "spb_depth": 0, "samples_per_s": 1.0}
    ours |= {"goodput": 1.0, "rescaled": True}
    assert [ours] in [r.jobs for r in records]  # the control loop may have solved too
    solves = api.call("GET", "/v1/solves", "admin").json()
    assert solves["count"] == 2 and solves["data"][0]["jobs"][0]["node_count"] == 2
