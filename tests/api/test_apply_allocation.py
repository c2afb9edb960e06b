"""Writing an allocation whose jobs trade nodes: each job's move sees the nodes it holds
after the moves written before it in the same transaction."""

from __future__ import annotations

from api_helpers import Api
from interstice.api.control.loop import apply_allocation
from interstice.api.store.tables import Command, Node
from interstice.optimizer import Allocation, JobAllocation
from sqlalchemy import select


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
    swap = Allocation(
        status="optimal",
        objective=0.0,
        backend="cpsat",
        solve_time_s=0.0,
        horizon_s=60.0,
        jobs=(_share(a, sorted([a1, b1])), _share(b, sorted([a2, b2]))),
    )
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
