"""Fixtures of the service tests: a database per test (SQLite file, or a database on a
PostgreSQL server the fixture starts itself), an app with tokens of every role.

PostgreSQL: the Debian ``postgresql`` package's ``initdb``/``pg_ctl`` run as the
``postgres`` user in a temporary folder (PostgreSQL refuses to run as root). Tests on it
skip, saying why, where the binaries or the user are absent.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from api_helpers import ROLES, SCALABILITY_CSV, Api, PostgresServer, free_port
from fastapi.testclient import TestClient
from interstice.api.main import create_app
from interstice.api.service import create_token
from interstice.api.settings import Settings


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server in a temporary folder, run as the ``postgres`` user."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL absent: no /usr/lib/postgresql/*/bin/pg_ctl (apt-get install postgresql)"
        )
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("PostgreSQL absent: no 'postgres' user to run the server as")
    run_as: list[str] = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
    folder = Path(tempfile.mkdtemp(prefix="interstice-pg-"))
    if run_as:
        shutil.chown(folder, "postgres")
    data = folder / "data"
    port = free_port()
    subprocess.run(
        [
            *run_as,
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    subprocess.run(
        [
            *run_as,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(folder / "log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        ],
        check=True,
        capture_output=True,
        timeout=90,
    )
    try:
        yield PostgresServer(port=port, _names=count())
    finally:
        subprocess.run(
            [*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(folder, ignore_errors=True)


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
