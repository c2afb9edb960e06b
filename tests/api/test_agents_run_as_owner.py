"""An agent says at registration whether it runs jobs as their owners (``runs_as_owner``): the
service keeps it and shows it in ``/v1/agents``; in multi-user mode a node whose agent does not
say so (an older agent, which would run an owned job as its own account) is not allocatable,
with a warning and a metric; single-user mode allocates to every agent as before."""

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from api_helpers import Api, gauge

OWNER, OWNER_UID = "itest-owner", 5001  # an account no host here has


def register(api: Api, node: str, **flag: bool) -> str:
    """Register an agent on ``node``, with ``runs_as_owner`` when given; returns its id."""
    body = {"node": node, "host": f"h-{node}", "ports": [29500, 29501], **flag}
    r = api.call("POST", "/v1/agents", "agent", json=body)
    assert r.status_code in (200, 201), r.text
    return r.json()["agent_id"]


def agents(api: Api) -> dict[str, dict[str, Any]]:
    r = api.call("GET", "/v1/agents", "admin")
    assert r.status_code == 200, r.text
    return {a["node"]: a for a in r.json()["data"]}


def idle(api: Api, *nodes: str) -> None:
    r = api.node_events(*((f"e-{n}", n, "idle", 0) for n in nodes))
    assert r.status_code == 200, r.text


@pytest.fixture
def multi_user(make_api: Callable[..., Any]) -> Iterator[Api]:
    """An app in multi-user mode, with a user token bound to :data:`OWNER` (``tokens["owner"]``)."""
    with make_api(multi_user=True) as api:
        r = api.call(
            "POST",
            "/v1/tokens",
            "admin",
            json={"name": "owner-1", "role": "user", "unix_user": OWNER, "unix_uid": OWNER_UID},
        )
        assert r.status_code == 201, r.text
        api.tokens["owner"] = r.json()["token"]
        yield api


def test_registration_keeps_whether_the_agent_runs_jobs_as_owners(api: Api) -> None:
    register(api, "n1", runs_as_owner=True)
    register(api, "n2")
    assert {n: a["runs_as_owner"] for n, a in agents(api).items()} == {"n1": True, "n2": False}
    register(api, "n1")  # an older agent started on the node again: it says nothing
    assert agents(api)["n1"]["runs_as_owner"] is False


@pytest.mark.sqlite_only
def test_a_flag_that_is_not_a_boolean_is_refused_naming_the_field(api: Api) -> None:
    body = {"node": "n1", "host": "h", "runs_as_owner": "yes"}
    r = api.call("POST", "/v1/agents", "agent", json=body)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "runs_as_owner"]


def test_multi_user_mode_allocates_only_to_agents_that_run_jobs_as_owners(
    multi_user: Api, caplog: pytest.LogCaptureFixture
) -> None:
    api = multi_user
    with caplog.at_level(logging.WARNING, logger="interstice.api"):
        owners = register(api, "n1", runs_as_owner=True)
        older = register(api, "n2")
    assert [r.getMessage() for r in caplog.records if "n1" in r.getMessage()] == []
    (warning,) = [r.getMessage() for r in caplog.records if "n2" in r.getMessage()]
    assert "does not run jobs as their owners" in warning
    idle(api, "n1", "n2")
    job = api.submit("owner", max_nodes=2)
    api.wait_for(lambda: api.job(job["job_id"], "owner")["nodes"] == ["n1"])
    (start,) = api.poll(owners, wait=0)
    assert start["job"]["owner"] == {"name": OWNER, "uid": OWNER_UID}
    assert api.poll(older, wait=0) == []
    metrics = api.client.get("/metrics").text
    assert gauge(metrics, "interstice_allocatable_nodes") == 1
    assert gauge(metrics, "interstice_agents_not_running_as_owner") == 1
    # the node's agent is upgraded: it registers again, saying so, and the job grows onto it
    register(api, "n2", runs_as_owner=True)
    api.wait_for(lambda: api.job(job["job_id"], "owner")["nodes"] == ["n1", "n2"])
    assert gauge(api.client.get("/metrics").text, "interstice_agents_not_running_as_owner") == 0


def test_single_user_mode_allocates_to_every_agent(api: Api) -> None:
    register(api, "n1", runs_as_owner=True)
    register(api, "n2")
    idle(api, "n1", "n2")
    job = api.submit(max_nodes=2)
    api.wait_for(lambda: api.job(job["job_id"])["nodes"] == ["n1", "n2"])
