"""Which replica leads: a PostgreSQL session-level advisory lock on a dedicated connection.

Any number of ``interstice serve`` processes may share one PostgreSQL database; all answer
the API and the agents' long-polls, and exactly one, the leader, runs the control loop (the
solver) and the lease sweep that marks silent agents lost. The leader is whichever holds the
advisory lock :data:`LEADER_LOCK_KEY` (``pg_try_advisory_lock``, PostgreSQL manual §13.3.5,
"Advisory Locks"). A session-level lock lives as long as the connection that took it: when
the leader's process dies (even by ``kill -9``) the server ends its backend and releases the
lock, and a follower, trying every :data:`RETRY_S`, takes over. The leader checks its
connection every :data:`RETRY_S` as well and steps down when it fails, since the lock may be
gone with it.

On SQLite the service is one process, always the leader (:class:`AlwaysLeader`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import psycopg
from interstice.api.control.notify import psycopg_conninfo

log = logging.getLogger("interstice.api")

LEADER_LOCK_KEY = 0x696E7465  # "inte": one bigint key of the database's advisory locks
"""The advisory lock whose holder leads."""
RETRY_S = 1.0
"""A follower tries the lock, and the leader checks its connection, this often, seconds."""
CONNECT_TIMEOUT_S = 5
"""Longest wait to open the lock's connection, seconds."""

Hook = Callable[[], Awaitable[None]]


class AlwaysLeader:
    """The one process of a SQLite service: leader from the start."""

    def __init__(self, on_elected: Hook) -> None:
        self._on_elected = on_elected
        self.leader = False

    async def start(self) -> None:
        """Become leader."""
        self.leader = True
        await self._on_elected()

    async def stop(self) -> None:
        """Nothing to release."""


class PostgresLeadership:
    """Contends for :data:`LEADER_LOCK_KEY` on a dedicated connection.

    Args:
        db_url: the service's SQLAlchemy URL.
        on_elected: awaited when this process takes the lock.
        on_deposed: awaited when it loses it (its connection failed) and on :meth:`stop`
            while leading.
    """

    def __init__(self, db_url: str, on_elected: Hook, on_deposed: Hook) -> None:
        self._conninfo = psycopg_conninfo(db_url)
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self.leader = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start contending on the running loop; returns after the first try."""
        tried = asyncio.Event()
        self._task = asyncio.create_task(self._contend_forever(tried), name="interstice-leader")
        await tried.wait()

    async def stop(self) -> None:
        """Stop contending; a leader steps down and its connection (and lock) is closed."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._step_down("stopping")

    async def _step_down(self, why: str) -> None:
        if self.leader:
            self.leader = False
            log.warning("no longer leader (%s)", why)
            await self._on_deposed()

    async def _contend_forever(self, tried: asyncio.Event) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                ) as connection:
                    while True:
                        if self.leader:
                            await connection.execute("SELECT 1")
                        else:
                            cursor = await connection.execute(
                                "SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK_KEY,)
                            )
                            row = await cursor.fetchone()
                            tried.set()
                            if row is not None and row[0]:
                                self.leader = True
                                log.warning("leader now (advisory lock %d)", LEADER_LOCK_KEY)
                                await self._on_elected()
                        await asyncio.sleep(RETRY_S)
            except (psycopg.Error, OSError) as error:
                log.warning("leadership connection failed (%s); retrying", error)
                tried.set()
                await self._step_down("lock connection failed")
                await asyncio.sleep(RETRY_S)
