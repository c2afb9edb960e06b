"""Schemathesis over the whole OpenAPI schema against a real uvicorn server, each operation
called with a valid token of every role it accepts, with valid and invalid inputs, under
every check schemathesis has (``--checks all``): no 5xx, responses match the schema (body,
status code, content type, headers), invalid data refused, valid data accepted, ``Allow``
headers right, auth not ignored. Then sequences of calls linked by their ids (the stateful
phase), once per role over the operations it may call: a resource available after its
creation and gone after its deletion (``use_after_free``)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import schemathesis
import uvicorn
from api_helpers import ROLES, SCALABILITY_CSV, free_port
from hypothesis import HealthCheck, settings
from hypothesis.errors import Flaky
from interstice.api.auth.tokens import create_token_record, list_tokens
from interstice.api.main import create_app
from interstice.api.schemas.common import NO_NUL_PATTERN
from interstice.api.schemas.jobs import ARGV_MAX_BYTES, ENV_MAX_BYTES, RESERVED_ENV
from interstice.api.settings import Settings
from interstice.api.store.db import Database
from schemathesis.checks import CHECKS as REGISTERED_CHECKS
from schemathesis.checks import load_all_checks
from schemathesis.core.errors import NoLinksFound
from schemathesis.core.failures import FailureGroup
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import positive_data_acceptance, use_after_free

from interstice.wire import EARLIEST_TIME, LATEST_TIME

schemathesis.serializer.alias("text/csv", "text/plain")
SCHEMA = schemathesis.openapi.from_dict(create_app(Settings(db_url="sqlite://")).openapi())
SCHEMA.config.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
)
# the server runs in this process, on a shared machine: a slow answer under load (a list of
# 100 generated jobs of 1,000 arguments each) is no error of the API (default: 10 s)
SCHEMA.config.update(request_timeout=60)
POSITIVE = schemathesis.GenerationMode.POSITIVE
load_all_checks()
CHECKS = REGISTERED_CHECKS.get_all()
RULES_BEYOND_THE_SCHEMA = {("PUT", "/v1/scalability")}
"""Operations whose schema-valid requests may still be refused (422), by rules JSON Schema
cannot state: the rows of a CSV table (documented in the operation; an empty body is not
schema-valid). ``positive_data_acceptance`` is not run on them; every other check is. The
rules of a job that JSON Schema cannot state are kept by :func:`map_case` instead."""
KEPT_AFTER_DELETE = ("/v1/jobs/{job_id}", "/v1/agents/{agent_id}")
"""Resources a ``DELETE`` ends but keeps, as their operations say: ``DELETE /v1/jobs/{job_id}``
cancels (the job stays, ``cancelled``, with its metrics and logs), ``DELETE
/v1/agents/{agent_id}`` is the agent leaving (it stays known, ``left``, and its poll still
answers). So ``use_after_free`` is not run on reads below these paths (schemathesis flags
any 2xx read after a 2xx ``DELETE``, whatever the operations document);
:func:`test_a_cancelled_job_stays_readable` checks what the job's operations document."""


def _job_rules_kept(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` changed to keep the rules of :class:`~interstice.api.schemas.jobs.JobCreate` that
    its description lists beyond the fields' own and JSON Schema cannot state (``min_nodes`` ≤
    ``max_nodes``, no launcher name in ``env``, the byte totals); the schema states the
    others (not both ``entrypoint`` and ``command``)."""
    low, high = body.get("min_nodes"), body.get("max_nodes")
    if isinstance(low, int | float) and isinstance(high, int | float) and low > high:
        body["min_nodes"], body["max_nodes"] = high, low
    command = body.get("command")
    if isinstance(command, list):
        while sum(len(str(argument).encode()) for argument in command) > ARGV_MAX_BYTES:
            command.pop()
    env = body.get("env")
    if isinstance(env, dict):
        for name in [n for n in env if RESERVED_ENV.match(n)]:
            del env[name]
        while sum(len(n.encode()) + len(str(v).encode()) for n, v in env.items()) > ENV_MAX_BYTES:
            env.popitem()
    return body


def _in_utc_years(text: Any) -> bool:
    """Whether a time the schema's pattern allows (years 2000..2100 as written) also lies in
    those years in UTC, as the service reads it: an offset on the first or last day may move
    it out (``2000-01-01T01:00+02:00``), which a pattern on the text cannot state."""
    try:
        return EARLIEST_TIME <= _utc(text) < LATEST_TIME
    except (TypeError, ValueError):
        return True  # not a time: the schema's own checks decide


def _event_rules_kept(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` changed to keep the rules of node events that JSON Schema cannot state: times
    in the years 2000..2100 in UTC (:func:`_in_utc_years`: an ``at`` outside becomes one
    inside, such an ``until`` is dropped) and ``until`` after ``at`` (else dropped). The
    schema states the other (none on a ``busy`` event)."""
    events = body.get("events")
    for event in events if isinstance(events, list) else []:
        if not isinstance(event, dict):
            continue
        if "at" in event and not _in_utc_years(event["at"]):
            event["at"] = "2050-01-01T00:00:00Z"
        if event.get("until") is not None and not _in_utc_years(event["until"]):
            del event["until"]
        if event.get("until") is not None:
            try:
                after = _utc(event["until"]) > _utc(event["at"])
            except (KeyError, TypeError, ValueError):
                continue
            if not after:
                del event["until"]
    return body


@SCHEMA.hook.apply_to(method="POST", path=["/v1/jobs", "/v1/nodes/events", "/v1/tokens"])
def map_case(ctx: Any, case: Any) -> Any:
    """Schema-valid jobs that also keep the rules JSON Schema cannot state, so that
    ``positive_data_acceptance`` runs on ``POST /v1/jobs`` (it found ``command: [""]``,
    allowed by the schema then), node events that keep ``until``'s rules, and tokens
    without a Unix account (whether one binds depends on the service host's accounts and
    the role); an ``Idempotency-Key`` is a new one (a key used before
    with another body is a 422, as the header's description says)."""
    if case.meta is not None and case.meta.generation.mode != POSITIVE:
        return case
    if case.path == "/v1/tokens" and isinstance(case.body, dict):
        case.body.pop("unix_user", None)
        case.body.pop("unix_uid", None)
        return case
    if isinstance(case.body, dict):
        kept = _event_rules_kept if case.path == "/v1/nodes/events" else _job_rules_kept
        case.body = kept(case.body)
    if case.headers and "Idempotency-Key" in case.headers:
        case.headers["Idempotency-Key"] = str(uuid.uuid4())
    return case


def _valid(schema: dict[str, Any], instance: dict[str, Any]) -> bool:
    """Whether ``instance`` is valid under a component ``schema`` of :data:`SCHEMA`."""
    resolver = {"components": SCHEMA.raw_schema["components"], **schema}
    return jsonschema.Draft202012Validator(resolver).is_valid(instance)


def _utc(text: str) -> datetime:
    """An ISO 8601 time as the API reads it: without an offset, UTC."""
    at = datetime.fromisoformat(text)
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


class Running:
    def __init__(self, url: str, db: Database) -> None:
        self.url, self.db = url, db
        self._tokens: dict[str, tuple[str, int]] = {}

    def token(self, role: str) -> str:
        """A valid token of ``role`` (a new one when schemathesis revoked the last)."""
        revoked = {t.principal.token_id for t in list_tokens(self.db) if t.revoked_at}
        if role not in self._tokens or self._tokens[role][1] in revoked:
            secret, record = create_token_record(self.db, role, role)
            self._tokens[role] = (secret, record.principal.token_id)
        return self._tokens[role][0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    folder: Path = tmp_path_factory.mktemp("schemathesis")
    (folder / "table.csv").write_text(SCALABILITY_CSV)
    app = create_app(
        Settings(
            db_url=f"sqlite:///{folder / 'st.db'}",
            scalability_csv=folder / "table.csv",
            checkpoint_root=folder / "checkpoints",
            max_poll_wait_s=0.2,
            debounce_s=0.01,
        )
    )
    port = free_port()
    uv = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="error", timeout_graceful_shutdown=1
        )
    )
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not uv.started:
        time.sleep(0.05)
    running = Running(url, app.state.service.db)
    # a little state, so that some generated ids hit real rows
    auth = {r: {"Authorization": f"Bearer {running.token(r)}"} for r in ROLES}
    httpx.post(
        f"{url}/v1/agents",
        headers=auth["agent"],
        json={"node": "n1", "host": "h", "ports": [1], "report_idle": True},
    )
    httpx.post(
        f"{url}/v1/jobs",
        headers=auth["user"],
        json={"model": "tinycnn", "min_nodes": 1, "max_nodes": 1, "total_samples": 9},
    )
    try:
        yield running
    finally:
        uv.should_exit = True
        thread.join(timeout=10)


def _excluded(case: Any) -> list[Any]:
    """The checks not run on ``case`` (see :data:`RULES_BEYOND_THE_SCHEMA` and
    :data:`KEPT_AFTER_DELETE`)."""
    excluded = []
    if (case.method.upper(), case.path) in RULES_BEYOND_THE_SCHEMA:
        excluded.append(positive_data_acceptance)
    if case.path.startswith(KEPT_AFTER_DELETE):
        excluded.append(use_after_free)
    return excluded


def _auth(case: Any, server: Running, role: str | None) -> dict[str, str]:
    """A valid token of ``role``, except on a case whose headers schemathesis made invalid
    (the ``Authorization`` header dropped, say): that case is sent as generated, since a
    token added to it would make the request valid, and the server would rightly accept it
    (seen with a query's extra parameter that serialised to nothing)."""
    headers = case.meta.components.get(ParameterLocation.HEADER) if case.meta else None
    if role is None or (headers is not None and headers.mode != POSITIVE):
        return {}
    return {"Authorization": f"Bearer {server.token(role)}"}


@SCHEMA.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors_and_no_schema_violations(case, server: Running) -> None:  # type: ignore[no-untyped-def]
    for role in case.operation.definition.raw.get("x-roles") or [None]:
        headers = _auth(case, server, role)
        case.call_and_validate(
            base_url=server.url, headers=headers, checks=CHECKS, excluded_checks=_excluded(case)
        )


@pytest.mark.parametrize("role", ROLES)
def test_sequences_of_linked_calls_pass_every_check(server: Running, role: str) -> None:
    """The stateful phase once per role, over the operations the role may call, each with a
    valid token of it. A role none of whose operations link to another (the scheduler's
    name nodes, not resources they create) has no sequence to run."""
    found: list[FailureGroup] = []
    schema = SCHEMA.include(lambda ctx: role in (ctx.operation.definition.raw.get("x-roles") or []))

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            headers = {"Authorization": f"Bearer {server.token(role)}"}
            return {"base_url": server.url, "headers": headers}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            try:
                case.validate_response(
                    response,
                    checks=CHECKS,
                    excluded_checks=_excluded(case),
                    transport_kwargs=kwargs,
                    recorder=self.recorder,
                )
            except FailureGroup as failures:
                found.append(failures)
                raise

    try:
        Workflow.run(
            settings=settings(
                max_examples=15,  # per role: 45 sequences in all
                stateful_step_count=8,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
        )
    except NoLinksFound:
        pytest.skip(f"no operation of the {role} role links to another")
    except Flaky:
        # a replay of a scenario met a server whose state had moved on (other ids, other
        # answers): as schemathesis's own runner does, only the failures seen count
        if found:
            raise found[0] from None


def test_a_cancelled_job_stays_readable(server: Running) -> None:
    """What ``DELETE /v1/jobs/{job_id}`` and the reads below it document: cancel, the job
    stays, ``cancelled``, and so do its metrics."""
    paths = SCHEMA.raw_schema["paths"]
    assert paths["/v1/jobs/{job_id}"]["delete"]["summary"] == "Cancel a job (it stays, cancelled)"
    for read in ("metrics", "logs"):
        assert "a cancelled job's (``DELETE``) stay" in paths[f"/v1/jobs/{{job_id}}/{read}"]["get"][
            "description"
        ].replace("\n", " ")
    headers = {"Authorization": f"Bearer {server.token('user')}"}
    body = {"min_nodes": 1, "max_nodes": 1, "total_samples": 9}
    job = httpx.post(f"{server.url}/v1/jobs", headers=headers, json=body).json()["job_id"]
    cancelled = httpx.delete(f"{server.url}/v1/jobs/{job}", headers=headers)
    assert (cancelled.status_code, cancelled.json()["state"]) == (200, "cancelled")
    read = httpx.get(f"{server.url}/v1/jobs/{job}", headers=headers)
    assert (read.status_code, read.json()["state"]) == (200, "cancelled")
    metrics = httpx.get(f"{server.url}/v1/jobs/{job}/metrics", headers=headers)
    assert (metrics.status_code, metrics.json()["count"]) == (200, 0)


def test_what_the_server_refuses_the_schema_says() -> None:
    parts = SCHEMA.raw_schema["components"]["schemas"]
    (argv,) = [b for b in parts["JobCreate"]["properties"]["command"]["anyOf"] if "items" in b]
    assert argv["prefixItems"] == [{"type": "string", "minLength": 1, "pattern": NO_NUL_PATTERN}]
    env = parts["JobCreate"]["properties"]["env"]
    assert env["propertyNames"] == {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}
    event_id = parts["NodeEventCreate"]["properties"]["event_id"]
    assert event_id["pattern"] == NO_NUL_PATTERN == "^[^\\u0000]*$"
    assert argv["items"]["pattern"] == NO_NUL_PATTERN
    # the rules of a model that JSON Schema can state: not both entrypoint and command (either
    # may be null), no until on a busy event (null is none)
    both = {"min_nodes": 1, "max_nodes": 1, "total_samples": 1, "entrypoint": "m"}
    assert not _valid(parts["JobCreate"], both | {"command": ["x"]})
    assert _valid(parts["JobCreate"], both | {"command": None})
    busy = {"event_id": "e", "node": "n", "state": "busy", "at": "2026-01-01T00:00:00Z"}
    assert not _valid(parts["NodeEventCreate"], busy | {"until": "2026-01-02T00:00:00Z"})
    assert _valid(parts["NodeEventCreate"], busy | {"until": None})
    assert _valid(parts["NodeEventCreate"], busy | {"state": "idle", "until": "2026-01-02"})
    table = SCHEMA.raw_schema["paths"]["/v1/scalability"]["put"]["requestBody"]
    assert table["required"] and table["content"]["text/csv"]["schema"]["minLength"] == 1
