"""Schemathesis over the whole OpenAPI schema against a real uvicorn server, each operation
called with a valid token of every role it accepts, with valid and invalid inputs, under
every check schemathesis has (``--checks all``): no 5xx, responses match the schema (body,
status code, content type, headers), invalid data refused, valid data accepted, ``Allow``
headers right, auth not ignored."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
import uvicorn
from api_helpers import ROLES, SCALABILITY_CSV, free_port
from hypothesis import HealthCheck, settings
from interstice.api.db import Database
from interstice.api.main import create_app
from interstice.api.settings import Settings
from interstice.api.tokens import create_token_record, list_tokens
from schemathesis.checks import CHECKS as REGISTERED_CHECKS
from schemathesis.checks import load_all_checks
from schemathesis.specs.openapi.checks import positive_data_acceptance

schemathesis.serializer.alias("text/csv", "text/plain")
SCHEMA = schemathesis.openapi.from_dict(create_app(Settings(db_url="sqlite://")).openapi())
SCHEMA.config.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
)
load_all_checks()
CHECKS = REGISTERED_CHECKS.get_all()
RULES_BEYOND_THE_SCHEMA = {("POST", "/v1/jobs"), ("PUT", "/v1/scalability")}
"""Operations whose schema-valid requests may still be refused (422), by rules JSON Schema
cannot state: ``min_nodes`` ≤ ``max_nodes`` and the argv's UTF-8 byte total of a job, the
rows of a CSV table (both documented in the operation). ``positive_data_acceptance`` is
not run on them; every other check is."""


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


@SCHEMA.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors_and_no_schema_violations(case, server: Running) -> None:  # type: ignore[no-untyped-def]
    for role in case.operation.definition.raw.get("x-roles") or [None]:
        headers = {"Authorization": f"Bearer {server.token(role)}"} if role else {}
        excluded = (
            [positive_data_acceptance]
            if (case.method.upper(), case.path) in RULES_BEYOND_THE_SCHEMA
            else []
        )
        case.call_and_validate(
            base_url=server.url, headers=headers, checks=CHECKS, excluded_checks=excluded
        )
