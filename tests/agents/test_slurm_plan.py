"""Forecasts from Slurm's plan (agents/slurm/plan.py): captured ``squeue --start``
and ``scontrol show res -o`` output, N/A and (null) before the backfill pass, the earliest
start per node, and which events a pass posts (new, revised, withdrawn, nothing) against a
stand-in service."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from interstice.agents.slurm.plan import (
    PLAN_ENV,
    Plan,
    Posted,
    event_id,
    forecast_events,
    forecast_pass,
    parse_planned_starts,
    parse_reservations,
    slurm_time,
    wanted_back,
)

from interstice.wire import EVENT_ID_MAX_CHARS

NOW = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
EPOCH = int(NOW.timestamp())

# squeue --start -t PD -h -o "%i %S %Y" with SLURM_TIME_FORMAT=%s: a planned job, one the
# backfill pass has not seen yet, and a job array element planned later on an overlapping node
SQUEUE = f"""\
12 {EPOCH + 300} n[1-3]
13 N/A (null)
14_2 {EPOCH + 900} n3,n7
"""
# scontrol show res -o (Slurm 22.05), a maintenance window and a reservation without nodes
SCONTROL = f"""\
ReservationName=maint StartTime={EPOCH + 600} EndTime={EPOCH + 4200} Duration=01:00:00 Nodes=n[7-8] NodeCnt=2 CoreCnt=2 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES TRES=cpu=2 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=lic StartTime={EPOCH + 60} EndTime={EPOCH + 120} Duration=00:01:00 Nodes= NodeCnt=0 CoreCnt=0 Features=(null) PartitionName=(null) Flags=ANY_NODES TRES=(null) Users=root Groups=(null) Accounts=(null) Licenses=x:1 State=INACTIVE
"""  # noqa: E501


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def test_planned_starts_take_the_earliest_per_node_and_skip_unplanned_jobs() -> None:
    assert parse_planned_starts(SQUEUE).starts == {
        "n1": at(300),
        "n2": at(300),
        "n3": at(300),
        "n7": at(900),
    }
    assert parse_planned_starts("13 N/A (null)\n\n") == Plan()
    assert parse_planned_starts("") == Plan()


def test_reservations_and_maintenance_windows() -> None:
    assert parse_reservations(SCONTROL) == Plan({"n7": at(600), "n8": at(600)})
    assert parse_reservations("No reservations in the system\n") == Plan()
    merged = wanted_back(parse_planned_starts(SQUEUE), parse_reservations(SCONTROL)).starts
    assert merged["n7"] == at(600) and merged["n1"] == at(300) and merged["n8"] == at(600)


def test_slurm_times_local_or_epoch() -> None:
    assert slurm_time(str(EPOCH)) == NOW
    assert slurm_time("2026-11-28T11:00:00", timezone(timedelta(hours=1))) == NOW
    assert slurm_time("N/A") is None and slurm_time("Unknown") is None
    with pytest.raises(ValueError, match="Invalid isoformat"):
        slurm_time("soon")


# Lines a hostile or broken squeue/scontrol may print, each next to a good one: a 20-digit
# StartTime, a node list of 10^12 names, a malformed one, a short line, a start after 2100
HOSTILE_SQUEUE = f"""\
20 {"9" * 20} n1
21 {EPOCH + 300} r[1-999999]n[1-999999]
22 {EPOCH + 300} n[1-
23 N/A
24 4294967295 n2
12 {EPOCH + 300} n[3-4]
"""
HOSTILE_SCONTROL = f"""\
ReservationName=far StartTime=4294967295 Nodes=n5
ReservationName=bad StartTime=2026-13-01T00:00:00 Nodes=n5
ReservationName=maint StartTime={EPOCH + 600} Nodes=n[5-6]
"""


def test_unreadable_lines_are_left_out_with_a_note_and_the_others_read() -> None:
    planned = parse_planned_starts(HOSTILE_SQUEUE)
    assert planned.starts == {"n3": at(300), "n4": at(300)}
    assert len(planned.dropped) == 5
    assert "out of range" in planned.dropped[0] and "99999999999999999999" in planned.dropped[0]
    assert "is too long: it expands to 999998000001 names" in planned.dropped[1]
    assert "unclosed '['" in planned.dropped[2]
    assert "expected JOBID STARTTIME SCHEDNODES" in planned.dropped[3]
    assert "start 2106-02-07T06:28:15Z is past the service's times" in planned.dropped[4]
    assert all(note.startswith("squeue --start: left out '") for note in planned.dropped)
    reserved = parse_reservations(HOSTILE_SCONTROL)
    assert reserved.starts == {"n5": at(600), "n6": at(600)}
    assert [note.split(":")[0] for note in reserved.dropped] == ["scontrol show res"] * 2


def test_events_new_unchanged_revised_due_and_withdrawn() -> None:
    posted = Posted({"n1": at(300), "n2": at(300), "n4": at(50), "n5": None})
    wanted = {"n1": at(300), "n2": at(400), "n3": at(100), "n6": at(0), "busy1": at(100)}
    idle = ["n1", "n2", "n3", "n4", "n5", "n6"]
    events = forecast_events(wanted, idle, posted, NOW)
    ms = EPOCH * 1000
    assert events == [
        {
            "event_id": f"slurm-plan-n2-{EPOCH + 400}-{ms}",
            "node": "n2",
            "state": "idle",
            "at": "2026-11-28T10:00:00Z",
            "until": "2026-11-28T10:06:40Z",
        },
        {
            "event_id": f"slurm-plan-n3-{EPOCH + 100}-{ms}",
            "node": "n3",
            "state": "idle",
            "at": "2026-11-28T10:00:00Z",
            "until": "2026-11-28T10:01:40Z",
        },
        {
            "event_id": f"slurm-plan-n4-none-{ms}",
            "node": "n4",
            "state": "idle",
            "at": "2026-11-28T10:00:00Z",
            "until": None,
        },
    ]


class FakeService:
    """``call`` of a service whose nodes are ``states`` with forecasts ``untils``; records the
    posted events and answers each applied, keeping its ``until``."""

    def __init__(self, states: dict[str, str], untils: dict[str, str | None] | None = None):
        self.states = states
        self.untils: dict[str, str | None] = dict(untils or {})
        self.posts: list[list[dict[str, Any]]] = []

    def call(self, method: str, path: str, json: Any = None, params: Any = None) -> Any:
        if method == "GET":
            assert path == "/nodes"
            data = [
                {"name": n, "state": s, "until": self.untils.get(n)}
                for n, s in sorted(self.states.items())
            ]
            return {"data": data, "count": len(data), "next_cursor": None}
        assert (method, path) == ("POST", "/nodes/events")
        self.posts.append(json["events"])
        for event in json["events"]:
            self.untils[event["node"]] = event["until"]
        return {"data": [{"applied": True} for _ in json["events"]]}


def test_a_pass_posts_once_then_withdraws_only_its_own_forecasts() -> None:
    service = FakeService({"n1": "idle", "n2": "idle", "n3": "busy", "n9": "idle"})
    outputs = {"squeue": SQUEUE, "scontrol": "", "sinfo": "n[1-9]\n"}
    seen_env: list[dict[str, str]] = []

    def run(arguments: list[str], env: dict[str, str]) -> str:
        seen_env.append(env)
        return outputs[arguments[0]]

    posted = Posted()
    first = forecast_pass(run, service.call, posted, "scavenger", now=lambda: NOW)
    assert (first.planned, first.posted, first.withdrawn) == (4, 2, 0)
    assert service.untils == {"n1": "2026-11-28T10:05:00Z", "n2": "2026-11-28T10:05:00Z"}
    assert all(env["SLURM_TIME_FORMAT"] == PLAN_ENV["SLURM_TIME_FORMAT"] for env in seen_env)
    again = forecast_pass(run, service.call, posted, "scavenger", now=lambda: at(1))
    assert (again.posted, again.withdrawn, len(service.posts)) == (0, 0, 1)
    # job 12 cancelled: n1 and n2 withdrawn, n9 (never forecast by this process) untouched
    outputs["squeue"] = "14_2 N/A (null)\n"
    gone = forecast_pass(run, service.call, posted, "scavenger", now=lambda: at(2))
    assert (gone.posted, gone.withdrawn) == (0, 2)
    assert service.untils == {"n1": None, "n2": None}
    assert [e["node"] for e in service.posts[-1]] == ["n1", "n2"]
    assert forecast_pass(run, service.call, posted, "scavenger", now=lambda: at(3)).withdrawn == 0
    assert len(service.posts) == 2


def fake_slurm(outputs: dict[str, str]) -> Any:
    """``run`` answering each Slurm command with ``outputs[command]``."""

    def run(arguments: list[str], env: dict[str, str]) -> str:
        if arguments[0] == "sinfo":
            assert arguments[1:] == ["-h", "-p", "scavenger", "-o", "%N"]  # every state
        return outputs[arguments[0]]

    return run


def test_a_restarted_process_withdraws_the_forecasts_of_its_partition_the_plan_no_longer_gives():
    """An earlier process posted n1..n3's forecasts and died: n1's still stands, job 14_2
    (n3, n7) is gone, n2's forecast passed (stale); n8 is idle with a forecast but in another
    partition, n4 busy."""
    service = FakeService(
        {"n1": "idle", "n2": "idle", "n3": "idle", "n4": "busy", "n8": "idle"},
        {"n1": "2026-11-28T10:05:00Z", "n2": "2026-11-28T09:00:00Z",
         "n3": "2026-11-28T10:15:00Z", "n8": "2026-11-28T11:00:00Z"},
    )  # fmt: skip
    run = fake_slurm({"squeue": f"12 {EPOCH + 300} n[1-2]\n", "scontrol": "", "sinfo": "n[1-7]\n"})
    posted = Posted()
    first = forecast_pass(run, service.call, posted, "scavenger", now=lambda: NOW)
    assert (first.posted, first.withdrawn) == (1, 1)
    assert service.untils == {
        "n1": "2026-11-28T10:05:00Z",
        "n2": "2026-11-28T10:05:00Z",
        "n3": None,
        "n8": "2026-11-28T11:00:00Z",
    }
    assert [e["node"] for e in service.posts[0]] == ["n2", "n3"]
    # adopted once: a forecast posted by someone else later is not this process's to withdraw
    service.untils["n5"], service.states["n5"] = "2026-11-28T12:00:00Z", "idle"
    again = forecast_pass(run, service.call, posted, "scavenger", now=lambda: at(1))
    assert (again.posted, again.withdrawn, len(service.posts)) == (0, 0, 1)


def test_a_start_after_2100_is_no_forecast_and_withdraws_an_earlier_one() -> None:
    service = FakeService({"n1": "idle", "n2": "idle"}, {"n1": "2026-11-28T10:05:00Z"})
    run = fake_slurm({"squeue": "12 4294967295 n[1-2]\n", "scontrol": "", "sinfo": "n[1-2]\n"})
    seen = forecast_pass(run, service.call, Posted(), "scavenger", now=lambda: NOW)
    assert (seen.planned, seen.posted, seen.withdrawn) == (0, 0, 1)
    assert service.untils == {"n1": None}
    assert len(seen.dropped) == 1 and "is past the service's times" in seen.dropped[0]


def test_event_ids_fit_the_service_whatever_the_node_name() -> None:
    """A 200-character name (the most the service allows) makes an id past 200 characters
    with the whole name in it: a cut name and its hash stand for it, distinct per name."""
    long_a, long_b = "a" * 199 + "1", "a" * 199 + "2"
    ids = [event_id(node, at(300), NOW) for node in (long_a, long_b)]
    ids.append(event_id(long_a, None, NOW))
    assert all(len(i) <= EVENT_ID_MAX_CHARS for i in ids) and len(set(ids)) == 3
    assert ids[0].startswith("slurm-plan-" + "a" * 100 + "~")
    assert event_id("n1", at(300), NOW) == f"slurm-plan-n1-{EPOCH + 300}-{EPOCH * 1000}"
    events = forecast_events({long_a: at(300)}, [long_a], Posted(), NOW)
    assert events[0]["event_id"] == ids[0] and events[0]["node"] == long_a
