"""Engine, sessions and schema migrations, the same code on SQLite and PostgreSQL.

SQLite runs in WAL mode with a busy timeout. All writes of the process go through one lock
(:class:`Database.write`), and on PostgreSQL an advisory lock serializes them across the
replicas of the database: state changes never interleave (a reclaim never interleaves with an
applied allocation) and SQLite stays free of ``database is locked`` upgrades; reads run
concurrently.
"""

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
WRITE_LOCK_KEY = 0x77726974  # "writ"
"""The advisory lock every write transaction takes on PostgreSQL (see :meth:`Database.write`)."""


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, ``synchronous=NORMAL`` and a 30 s busy timeout
    (an in-memory SQLite database, for tests, is one connection shared by all threads)."""
    if url.startswith("sqlite"):
        in_memory = url in ("sqlite://", "sqlite:///:memory:")
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            **({"poolclass": StaticPool} if in_memory else {"pool_size": 20, "max_overflow": 40}),
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=20, max_overflow=40)


def alembic_config(url: str) -> Config:
    """Alembic configuration for this package's migrations (no ``alembic.ini`` needed)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


@contextmanager
def migration_config(engine: Engine) -> Iterator[Config]:
    """Alembic configuration on one connection of ``engine``, inside a transaction.

    On SQLite, foreign keys are off meanwhile: a batch migration recreates a table that
    others reference (``jobs``), which ``PRAGMA foreign_keys=ON`` would refuse on a database
    with rows. The pragma takes effect only outside a transaction, hence before ``begin``.
    """
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as connection:
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        try:
            with connection.begin():
                config.attributes["connection"] = connection
                yield config
        finally:
            if sqlite:
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                connection.commit()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the schema to ``revision``, by default the newest migration (idempotent).

    A database already at the newest migration returns at once: Alembic's no-op upgrade
    loads every migration script again (tenths of a second at each service start, and at
    each start of a test's app)."""
    if revision == "head" and current_revision(engine) == head_revision():
        return
    with migration_config(engine) as config:
        command.upgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    """The migration the database of ``engine`` is at; None for a database without one."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


@cache
def head_revision() -> str | None:
    """The newest migration of this package (its scripts read once per process)."""
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def wait_until_reachable(engine: Engine, timeout_s: float) -> None:
    """Retry ``SELECT 1`` until it answers or ``timeout_s`` passes.

    Raises:
        OperationalError: the database is still unreachable after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            return
        except OperationalError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


class FairLock:
    """A lock granted in the order it was asked for (first come, first served), so a writer
    that releases it and asks again (a batch applied chunk by chunk) cannot take it back
    before a waiting one; an *urgent* request (a reclaim) goes before every waiting
    non-urgent one, first come first served among the urgent. Not reentrant."""

    def __init__(self) -> None:
        self._turns = threading.Condition(threading.Lock())
        self._urgent: deque[object] = deque()
        self._normal: deque[object] = deque()
        self._held = False

    @property
    def waiting(self) -> int:
        """Requests waiting for the lock."""
        return len(self._urgent) + len(self._normal)

    @contextmanager
    def hold(self, urgent: bool = False) -> Iterator[None]:
        """Hold the lock for the block, after the earlier (or, ``urgent``, the earlier
        urgent) requests."""
        ticket, queue = object(), self._urgent if urgent else self._normal
        with self._turns:
            queue.append(ticket)
            while self._held or (self._urgent or self._normal)[0] is not ticket:
                self._turns.wait()
            queue.popleft()
            self._held = True
        try:
            yield
        finally:
            with self._turns:
                self._held = False
                self._turns.notify_all()


class Database:
    """The engine, a session factory and the process-wide write lock (first come, first
    served: :class:`FairLock`)."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._write_lock = FairLock()
        self._postgres = self.engine.dialect.name == "postgresql"

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reading (rolled back at the end)."""
        with self._sessions() as session:
            yield session

    @contextmanager
    def write(self, urgent: bool = False) -> Iterator[Session]:
        """A session holding the write lock; commits at the end, rolls back on an error.
        ``urgent`` (a reclaim) takes the lock before the non-urgent writers waiting for it.

        On PostgreSQL the transaction also takes the advisory lock :data:`WRITE_LOCK_KEY`
        (``pg_advisory_xact_lock``, released at its end): the writes of every replica of the
        database are serialized as those of one process are.
        """
        with self._write_lock.hold(urgent), self._sessions() as session, session.begin():
            if self._postgres:
                session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": WRITE_LOCK_KEY})
            yield session

    def ping(self) -> bool:
        """Whether the database answers ``SELECT 1``."""
        try:
            with self.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            return True
        except Exception:  # noqa: BLE001 - any failure means not ready
            return False

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
