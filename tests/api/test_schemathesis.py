"""Schemathesis over the whole OpenAPI schema against a real uvicorn server, each operation
called with a valid token of a role it accepts, with valid and invalid inputs: no 5xx,
responses match the schema (body, status code, content type)."""

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
from interstice.api.main import create_app
from interstice.api.service import create_token
from interstice.api.settings import Settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

schemathesis.serializer.alias("text/csv", "text/plain")
SCHEMA = schemathesis.openapi.from_dict(create_app(Settings(db_url="sqlite://")).openapi())
SCHEMA.config.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
)
CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
]


class Running:
    def __init__(self, url: str, tokens: dict[str, str]) -> None:
        self.url, self.tokens = url, tokens


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
    tokens = {role: create_token(app.state.service.db, role, role) for role in ROLES}
    # a little state, so that some generated ids hit real rows
    auth = {r: {"Authorization": f"Bearer {t}"} for r, t in tokens.items()}
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
        yield Running(url, tokens)
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
    roles = case.operation.definition.raw.get("x-roles")
    headers = {"Authorization": f"Bearer {server.tokens[roles[0]]}"} if roles else {}
    case.call_and_validate(base_url=server.url, headers=headers, checks=CHECKS)
