"""Command acknowledgements that arrive together are written in one transaction, each with
its own answer (api/control/acks.py)."""

from __future__ import annotations

import asyncio

from api_helpers import Api, start_job
from interstice.api.control import acks
from interstice.api.schemas.agents import CommandAck
from interstice.api.services.agents import Ack, ack_batch
from interstice.api.services.state import NotFound


def _count_batches(monkeypatch) -> list[int]:
    """The size of every batch of acks written from now on (one transaction each)."""
    sizes = []

    def counted(service, batch):
        sizes.append(len(batch))
        return ack_batch(service, batch)

    monkeypatch.setattr(acks, "ack_batch", counted)
    return sizes


def test_acks_that_arrive_together_take_one_transaction_and_keep_their_own_answers(
    api: Api, monkeypatch
) -> None:
    nodes = [f"n{i}" for i in range(4)]
    agents, job, _ = start_job(api, nodes)
    api.node_events(("r1", "n0", "busy", 30))  # a reclaim: stop on n0, rescale on the others
    pending = {node: api.poll(agents[node], wait=0) for node in nodes}
    assert all(len(commands) == 1 for commands in pending.values())
    service = api.app.state.service
    batches = _count_batches(monkeypatch)
    acks = [Ack(agents[n], pending[n][0]["command_id"], CommandAck(ok=True)) for n in nodes]
    acks.insert(3, Ack(agents["n1"], 10**6, CommandAck(ok=True)))  # no such command
    acks.append(Ack("a-999", 1, CommandAck(ok=True)))  # no such agent

    async def together():
        return await asyncio.gather(*(service.acks.ack(a) for a in acks), return_exceptions=True)

    answers = api.client.portal.call(together)
    assert batches == [len(acks)]
    kinds = [type(a).__name__ for a in answers]
    assert kinds == ["CommandAckAnswer"] * 3 + ["NotFound"] + ["CommandAckAnswer", "NotFound"]
    assert [a.command_id for a in answers if not isinstance(a, NotFound)] == [
        pending[n][0]["command_id"] for n in nodes
    ]
    assert all(api.poll(agents[n], wait=0) == [] for n in nodes)  # every ack written


def test_an_ack_over_http_is_answered_from_its_batch(api: Api) -> None:
    agents, _, _ = start_job(api, ["n1"])
    api.node_events(("r1", "n1", "busy", 30))
    (stop,) = api.poll(agents["n1"], wait=0)
    path = f"/v1/agents/{agents['n1']}/commands/{stop['command_id']}/ack"
    first = api.call("POST", path, "agent", json={"ok": True})
    again = api.call("POST", path, "agent", json={"ok": False, "error": "late"})
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()  # idempotent: the first ack's record
    missing = api.call("POST", f"/v1/agents/{agents['n1']}/commands/999/ack", "agent", json={})
    assert missing.status_code == 404 and "command 999" in missing.text


def test_a_batch_that_fails_is_written_ack_by_ack(api: Api, monkeypatch) -> None:
    agents, _, _ = start_job(api, ["n1", "n2"])
    api.node_events(("r1", "n1", "busy", 30))
    pending = {n: api.poll(agents[n], wait=0)[0]["command_id"] for n in ("n1", "n2")}
    service = api.app.state.service

    def poisoned(svc, batch):  # a batch holding n1's ack fails as a whole
        if any(a.agent_id == agents["n1"] for a in batch):
            raise RuntimeError("poison")
        return ack_batch(svc, batch)

    monkeypatch.setattr(acks, "ack_batch", poisoned)

    async def together():
        return await asyncio.gather(
            *(service.acks.ack(Ack(agents[n], pending[n], CommandAck(ok=True))) for n in pending),
            return_exceptions=True,
        )

    first, second = api.client.portal.call(together)
    assert isinstance(first, RuntimeError) and second.command_id == pending["n2"]


def test_an_ack_of_a_command_id_beyond_any_row_is_a_404(api: Api) -> None:
    agents, _, _ = start_job(api, ["n1"])
    path = f"/v1/agents/{agents['n1']}/commands/{2**70}/ack"
    r = api.call("POST", path, "agent", json={"ok": True})
    assert r.status_code == 404 and "not found" in r.text
