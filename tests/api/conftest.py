"""Fixtures of the service tests: a database per test (SQLite file, or a database on a
PostgreSQL server the fixture starts itself), an app with tokens of every role.

PostgreSQL: the Debian ``postgresql`` package's ``initdb``/``pg_ctl`` run as the
``postgres`` user in a temporary folder (PostgreSQL refuses to run as root). Tests on it
skip, saying why, where the binaries or the user are absent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from api_helpers import ROLES, SCALABILITY_CSV, Api
from fastapi.testclient import TestClient
from interstice.api.auth.tokens import create_token
from interstice.api.main import create_app
from interstice.api.settings import Settings
from postgres_server import PostgresServer, running_postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server in a temporary folder, run as the ``postgres`` user."""
    with running_postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database: a SQLite file, or a new database on the PostgreSQL fixture server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'interstice.db'}"
    return request.getfixturevalue("postgres_server").new_database()


@pytest.fixture
def make_api(db_url: str, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``with make_api(solver=..., **settings) as api:`` runs an app on the test's database
    with the test scalability table loaded and one token per role."""

    @contextmanager
    def factory(solver: Any = None, **overrides: Any) -> Iterator[Api]:
        csv = tmp_path / "scalability.csv"
        csv.write_text(SCALABILITY_CSV)
        defaults = {
            "debounce_s": 0.02,
            "checkpoint_root": tmp_path / "checkpoints",
            "scalability_csv": csv,
        }
        settings = Settings(db_url=db_url, **(defaults | overrides))
        app = create_app(settings, solver=solver)
        with TestClient(app) as client:
            db = app.state.service.db
            tokens = {role: create_token(db, role, f"{role}-1") for role in ROLES}
            tokens["other"] = create_token(db, "user", "user-2")
            yield Api(client=client, tokens=tokens, settings=settings)

    yield factory


@pytest.fixture
def api(make_api: Callable[..., Any]) -> Iterator[Api]:
    """An app with the production solver, fast debounce, 10 s heartbeats."""
    with make_api() as running:
        yield running
