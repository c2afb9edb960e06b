"""Every endpoint refuses a missing or unknown token (401) and other roles (403), and lets
its roles through; the roles come from each operation's ``x-roles`` in the OpenAPI schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from api_helpers import ROLES, Api
from fastapi.testclient import TestClient
from interstice.api.auth.tokens import create_token
from interstice.api.main import create_app
from interstice.api.settings import Settings

OPEN = {("/healthz", "get"), ("/readyz", "get"), ("/metrics", "get")}
SCHEMA = create_app(Settings(db_url="sqlite://")).openapi()
OPERATIONS = [
    (path, method, op.get("x-roles"))
    for path, item in SCHEMA["paths"].items()
    for method, op in item.items()
]


@pytest.fixture(scope="module")
def module_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    folder: Path = tmp_path_factory.mktemp("auth")
    settings = Settings(db_url=f"sqlite:///{folder / 'auth.db'}", scalability_csv=None)
    app = create_app(settings)
    with TestClient(app) as client:
        tokens = {r: create_token(app.state.service.db, r, r) for r in ROLES}
        yield Api(client=client, tokens=tokens, settings=settings)


def _url(path: str) -> str:
    return (
        path.replace("{job_id}", "j-999")
        .replace("{agent_id}", "a-999")
        .replace("{command_id}", "999")
    )


def test_every_operation_declares_its_roles_or_is_an_open_probe() -> None:
    for path, method, roles in OPERATIONS:
        assert (path, method) in OPEN or roles, f"{method} {path} has no x-roles"
        assert (path, method) not in OPEN or roles is None


@pytest.mark.parametrize(
    ("path", "method", "roles"),
    [op for op in OPERATIONS if (op[0], op[1]) not in OPEN],
    ids=[f"{m} {p}" for p, m, _ in OPERATIONS if (p, m) not in OPEN],
)
def test_roles_are_enforced(module_api: Api, path: str, method: str, roles: list[str]) -> None:
    client, url = module_api.client, _url(path)
    missing = client.request(method, url)
    assert (missing.status_code, missing.json()) == (401, {"detail": "missing bearer token"})
    assert missing.headers["www-authenticate"] == "Bearer"
    unknown = client.request(method, url, headers={"Authorization": "Bearer nope"})
    assert (unknown.status_code, unknown.json()) == (401, {"detail": "invalid bearer token"})
    for role in ROLES:
        answer = client.request(method, url, headers=module_api.auth(role))
        if role in roles:
            assert answer.status_code not in (401, 403), (role, answer.text)
        else:
            assert answer.status_code == 403, role
            assert answer.json() == {
                "detail": f"role {role} may not call this endpoint (accepted: {', '.join(roles)})"
            }


def test_open_probes_answer_without_a_token(module_api: Api) -> None:
    client = module_api.client
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok", "leader": True}
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    for name in (
        "interstice_idle_nodes",
        "interstice_jobs",
        "interstice_solve_seconds",
        "interstice_pending_commands",
        "interstice_agents_alive",
        "interstice_request_seconds",
    ):
        assert name in metrics.text
