"""Node events in bulk: a large batch is applied chunk by chunk, a reclaim posted
meanwhile is applied between two chunks, a conflicting ``event_id`` anywhere in a batch
refuses all of it, and the write lock is granted first come, first served."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from api_helpers import Api, start_job
from interstice.api.services import ingest
from interstice.api.store.db import FairLock
from interstice.api.store.tables import NodeEvent
from polling import wait_until
from sqlalchemy import func, select

AT = "2026-01-01T00:00:00Z"


def _events(count: int, prefix: str = "x") -> list[dict]:
    return [
        {"event_id": f"{prefix}{i}", "node": f"{prefix}{i % 3000}", "state": "idle", "at": AT}
        for i in range(count)
    ]


def _stored_events(api: Api) -> int:
    with api.app.state.service.db.read() as session:
        return session.scalar(select(func.count()).select_from(NodeEvent)) or 0


def test_a_reclaim_posted_during_a_large_batch_is_applied(api: Api) -> None:
    agents, job, _ = start_job(api, ["n1", "n2"])
    before = _stored_events(api)
    big = {"events": _events(10000)}
    with ThreadPoolExecutor(1) as pool:
        batch = pool.submit(api.call, "POST", "/v1/nodes/events", "scheduler", json=big)
        wait_until(lambda: _stored_events(api) > before or batch.done(), what="the batch began")
        reclaim = api.node_events(("r1", "n2", "busy", 30))
        assert reclaim.status_code == 200, reclaim.text
        assert reclaim.json()["data"][0]["reclaimed_job_id"] == job["job_id"]
        assert [c["kind"] for c in api.poll(agents["n2"], wait=5)] == ["stop"]
        assert [c["kind"] for c in api.poll(agents["n1"], wait=5)] == ["rescale"]
        answer = batch.result(timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["count"] == 10000
    assert _stored_events(api) == before + 10001
    nodes = api.nodes()
    assert sum(n["name"].startswith("x") for n in nodes) == 3000
    assert {n["name"]: n["state"] for n in nodes}["n2"] == "busy"


def test_a_conflict_anywhere_in_a_batch_applies_none_of_it(api: Api) -> None:
    assert api.node_events(("taken", "n1", "idle", 0), at=AT).status_code == 200
    events = _events(ingest.CHUNK_EVENTS + 500)
    events[ingest.CHUNK_EVENTS + 100] = {
        "event_id": "taken",
        "node": "n1",
        "state": "busy",
        "at": AT,
    }
    r = api.call("POST", "/v1/nodes/events", "scheduler", json={"events": events})
    assert r.status_code == 409
    assert r.json() == {"detail": "event_id 'taken' was already used for a different event"}
    assert _stored_events(api) == 1
    same_id_twice = [*_events(2), {**_events(1)[0], "state": "busy"}]
    r = api.call("POST", "/v1/nodes/events", "scheduler", json={"events": same_id_twice})
    assert r.status_code == 409 and _stored_events(api) == 1


def test_a_batch_repeating_an_event_answers_its_first_record(api: Api) -> None:
    events = _events(ingest.CHUNK_EVENTS + 1)
    events.append(events[0])  # in another chunk than its first
    r = api.call("POST", "/v1/nodes/events", "scheduler", json={"events": events})
    assert r.status_code == 200, r.text
    assert r.json()["data"][-1] == r.json()["data"][0]
    assert _stored_events(api) == ingest.CHUNK_EVENTS + 1


def _hold_in_thread(lock: FairLock, order: list[str], name: str, urgent: bool) -> threading.Thread:
    """Ask for the lock in a new thread; return once the request waits."""
    asked = lock.waiting

    def holder() -> None:
        with lock.hold(urgent):
            order.append(name)

    thread = threading.Thread(target=holder)
    thread.start()
    wait_until(lambda: lock.waiting == asked + 1, what=f"{name} to ask")
    return thread


def test_the_write_lock_goes_to_the_writer_that_waited() -> None:
    lock, order = FairLock(), []
    with lock.hold():
        thread = _hold_in_thread(lock, order, "waiter", urgent=False)
    with lock.hold():  # asks again at once: after the waiter
        order.append("again")
    thread.join()
    assert order == ["waiter", "again"]


def test_an_urgent_writer_goes_before_the_waiting_ones_in_its_own_order() -> None:
    lock, order = FairLock(), []
    with lock.hold():
        threads = [
            _hold_in_thread(lock, order, name, urgent)
            for name, urgent in [("ack", False), ("reclaim-1", True), ("solve", False)]
        ]
        threads.append(_hold_in_thread(lock, order, "reclaim-2", urgent=True))
    for thread in threads:
        thread.join()
    assert order == ["reclaim-1", "reclaim-2", "ack", "solve"]
