"""Forecasts from Slurm's plan (agents/slurm/plan.py): captured ``squeue --start``
and ``scontrol show res -o`` output, N/A and (null) before the backfill pass, the earliest
start per node, and which events a pass posts (new, revised, withdrawn, nothing) against a
stand-in service."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from interstice.agents.slurm.env import NodeListError
from interstice.agents.slurm.plan import (
    PLAN_ENV,
    Posted,
    forecast_events,
    forecast_pass,
    parse_planned_starts,
    parse_reservations,
    slurm_time,
    wanted_back,
)

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
    assert parse_planned_starts(SQUEUE) == {
        "n1": at(300),
        "n2": at(300),
        "n3": at(300),
        "n7": at(900),
    }
    assert parse_planned_starts("13 N/A (null)\n\n") == {}
    assert parse_planned_starts("") == {}


def test_reservations_and_maintenance_windows() -> None:
    assert parse_reservations(SCONTROL) == {"n7": at(600), "n8": at(600)}
    assert parse_reservations("No reservations in the system\n") == {}
    merged = wanted_back(parse_planned_starts(SQUEUE), parse_reservations(SCONTROL))
    assert merged["n7"] == at(600) and merged["n1"] == at(300) and merged["n8"] == at(600)


def test_slurm_times_local_or_epoch() -> None:
    assert slurm_time(str(EPOCH)) == NOW
    assert slurm_time("2026-11-28T11:00:00", timezone(timedelta(hours=1))) == NOW
    assert slurm_time("N/A") is None and slurm_time("Unknown") is None
    with pytest.raises(ValueError, match="Invalid isoformat"):
        slurm_time("soon")


def test_unreadable_lines_raise() -> None:
    with pytest.raises(ValueError, match="expected JOBID STARTTIME SCHEDNODES"):
        parse_planned_starts("12 N/A\n")
    with pytest.raises(NodeListError):
        parse_planned_starts(f"12 {EPOCH} n[1-\n")


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
    """``call`` of a service whose nodes are ``states``; records the posted events and
    answers each applied, keeping its ``until``."""

    def __init__(self, states: dict[str, str]) -> None:
        self.states = states
        self.untils: dict[str, str | None] = {}
        self.posts: list[list[dict[str, Any]]] = []

    def call(self, method: str, path: str, json: Any = None, params: Any = None) -> Any:
        if method == "GET":
            assert path == "/nodes"
            data = [{"name": n, "state": s} for n, s in sorted(self.states.items())]
            return {"data": data, "count": len(data), "next_cursor": None}
        assert (method, path) == ("POST", "/nodes/events")
        self.posts.append(json["events"])
        for event in json["events"]:
            self.untils[event["node"]] = event["until"]
        return {"data": [{"applied": True} for _ in json["events"]]}


def test_a_pass_posts_once_then_withdraws_only_its_own_forecasts() -> None:
    service = FakeService({"n1": "idle", "n2": "idle", "n3": "busy", "n9": "idle"})
    outputs = {"squeue": SQUEUE, "scontrol": ""}
    seen_env: list[dict[str, str]] = []

    def run(arguments: list[str], env: dict[str, str]) -> str:
        seen_env.append(env)
        return outputs[arguments[0]]

    posted = Posted()
    first = forecast_pass(run, service.call, posted, now=lambda: NOW)
    assert (first.planned, first.posted, first.withdrawn) == (4, 2, 0)
    assert service.untils == {"n1": "2026-11-28T10:05:00Z", "n2": "2026-11-28T10:05:00Z"}
    assert all(env["SLURM_TIME_FORMAT"] == PLAN_ENV["SLURM_TIME_FORMAT"] for env in seen_env)
    again = forecast_pass(run, service.call, posted, now=lambda: at(1))
    assert (again.posted, again.withdrawn, len(service.posts)) == (0, 0, 1)
    # job 12 cancelled: n1 and n2 withdrawn, n9 (never forecast by this process) untouched
    outputs["squeue"] = "14_2 N/A (null)\n"
    gone = forecast_pass(run, service.call, posted, now=lambda: at(2))
    assert (gone.posted, gone.withdrawn) == (0, 2)
    assert service.untils == {"n1": None, "n2": None}
    assert [e["node"] for e in service.posts[-1]] == ["n1", "n2"]
    assert forecast_pass(run, service.call, posted, now=lambda: at(3)).withdrawn == 0
    assert len(service.posts) == 2
