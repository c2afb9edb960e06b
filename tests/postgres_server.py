"""A real PostgreSQL server for the tests: Debian's ``postgresql`` package's ``initdb`` and
``pg_ctl``, run as the ``postgres`` user (PostgreSQL refuses to run as root) in a temporary
folder, listening on 127.0.0.1 only, trust authentication. Skips, saying why, where the
binaries or the user are absent.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import pytest


@dataclass
class PostgresServer:
    """A running throw-away PostgreSQL server; :meth:`new_database` gives a fresh database URL.

    Attributes:
        port: its TCP port on 127.0.0.1.
        version: its major version (``15`` for Debian bookworm's).
    """

    port: int
    version: str = ""
    _names: Iterator[int] = field(default_factory=count)

    def new_database(self, template: str | None = None) -> str:
        """Create a database, empty or a copy of the database ``template`` names (which no one
        may be connected to); returns its SQLAlchemy URL (user ``postgres``, no password)."""
        import psycopg

        name = f"t{next(self._names)}_{os.getpid()}"
        copy = "" if template is None else f' TEMPLATE "{template}"'
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{copy}')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """Start a server in a temporary folder; stop it and remove the folder afterwards."""
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
    port = _free_port()
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"]
    subprocess.run([*run_as, *initdb, "-E", "UTF8"], check=True, capture_output=True, timeout=120)
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg_ctl = [*run_as, str(bin_dir / "pg_ctl"), "-D", str(data)]
    subprocess.run(
        [*pg_ctl, "-l", str(folder / "log"), "-w", "-t", "60", "-o", options, "start"],
        check=True,
        capture_output=True,
        timeout=90,
    )
    try:
        yield PostgresServer(port=port, version=bin_dir.parent.name)
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)
