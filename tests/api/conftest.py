"""Fixtures of the service tests: a database per test (SQLite file, or a database on a
PostgreSQL server the fixture starts itself), an app with tokens of every role.

An app's database starts as a copy of one migrated once per test run (a SQLite file copied,
PostgreSQL's ``CREATE DATABASE ... TEMPLATE``), its tokens already made: running every
migration costs each test about half a second, the copy a tenth of that. The app still
upgrades it on start (a no-op at head).

PostgreSQL: the Debian ``postgresql`` package's ``initdb``/``pg_ctl`` run as the
``postgres`` user in a temporary folder (PostgreSQL refuses to run as root). Tests on it
skip, saying why, where the binaries or the user are absent.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from api_helpers import ROLES, SCALABILITY_CSV, Api
from fastapi.testclient import TestClient
from interstice.api.auth.tokens import create_token
from interstice.api.main import create_app
from interstice.api.settings import Settings
from interstice.api.store import db as database
from postgres_server import PostgresServer, running_postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server in a temporary folder, run as the ``postgres`` user."""
    with running_postgres() as server:
        yield server


@dataclass(frozen=True)
class Migrated:
    """A database at the newest migration holding the tokens of :func:`make_api`, for
    :func:`db_url` to copy.

    Attributes:
        source: the SQLite file's path, or the PostgreSQL database's name.
        tokens: the secret of each role's token, and of ``other`` (a second user's).
    """

    source: str
    tokens: dict[str, str]


def _migrate(url: str) -> dict[str, str]:
    """Migrate the database at ``url`` and make a token per role in it, as :func:`make_api`'s
    apps use them (one made per app start cost each test tenths of a second); their secrets.
    Disposed after: SQLite's WAL is checkpointed into the file, and no connection stays open
    to a PostgreSQL template (it must have none)."""
    db = database.Database(url)
    try:
        database.upgrade(db.engine)
        tokens = {role: create_token(db, role, f"{role}-1") for role in ROLES}
        tokens["other"] = create_token(db, "user", "user-2")
    finally:
        db.dispose()
    return tokens


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Migrated:
    """A SQLite file at the newest migration, with tokens."""
    path = tmp_path_factory.mktemp("migrated") / "interstice.db"
    return Migrated(str(path), _migrate(f"sqlite:///{path}"))


@pytest.fixture(scope="session")
def migrated_postgres(postgres_server: PostgresServer) -> Migrated:
    """A database on the PostgreSQL fixture server at the newest migration, with tokens."""
    url = postgres_server.new_database()
    return Migrated(url.rsplit("/", 1)[1], _migrate(url))


@pytest.hookimpl(tryfirst=True)  # a parametrize mark added first takes the fixture's place
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``sqlite_only`` checks what the app decides before any database does (input
    validation, limits): :func:`db_url` gives it SQLite alone. Every other test that uses it runs
    on both databases."""
    if "db_url" in metafunc.fixturenames and metafunc.definition.get_closest_marker("sqlite_only"):
        metafunc.definition.add_marker(pytest.mark.parametrize("db_url", ["sqlite"], indirect=True))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database: a SQLite file, or a new database on the PostgreSQL fixture server.

    Empty, except in a test that runs an app (uses :func:`make_api`): there it is already at
    the newest migration, as the app's start would leave it."""
    migrated = "make_api" in request.fixturenames
    if request.param == "sqlite":
        path = tmp_path / "interstice.db"
        if migrated:
            shutil.copyfile(request.getfixturevalue("migrated_sqlite").source, path)
        return f"sqlite:///{path}"
    template = request.getfixturevalue("migrated_postgres").source if migrated else None
    return request.getfixturevalue("postgres_server").new_database(template)


@pytest.fixture
def make_api(
    db_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Any]]:
    """``with make_api(solver=..., **settings) as api:`` runs an app on the test's database
    with the test scalability table loaded and one token per role (the copied template's)."""
    template = "migrated_sqlite" if db_url.startswith("sqlite") else "migrated_postgres"
    made = request.getfixturevalue(template).tokens

    @contextmanager
    def factory(solver: Any = None, **overrides: Any) -> Iterator[Api]:
        csv = tmp_path / "scalability.csv"
        csv.write_text(SCALABILITY_CSV)
        defaults = {
            "debounce_s": 0.02,
            "checkpoint_root": tmp_path / "checkpoints",
            "scalability_csv": csv,
            # the solver in a thread: a solver process per app costs its start-up in every
            # test, and tests inject solvers that do not pickle (test_solver_process.py
            # runs the process)
            "solver_process": False,
        }
        settings = Settings(db_url=db_url, **(defaults | overrides))
        app = create_app(settings, solver=solver)
        with TestClient(app) as client:
            yield Api(client=client, tokens=dict(made), settings=settings)

    yield factory


@pytest.fixture
def api(make_api: Callable[..., Any]) -> Iterator[Api]:
    """An app with the production solver, fast debounce, 10 s heartbeats."""
    with make_api() as running:
        yield running
