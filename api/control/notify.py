"""Wake-ups of waiting long-polls, one :class:`asyncio.Event` per agent, and their relay
between replicas.

A long-poll subscribes *before* it reads the database, so a command committed between the
read and the wait still wakes it. :meth:`Notifier.wake` may be called from any thread.

With several ``interstice serve`` processes on one PostgreSQL database, an agent may
long-poll one replica while another writes its command, and an event posted to a follower
must reach the leader's control loop: :class:`PostgresRelay` sends both over PostgreSQL's
``LISTEN``/``NOTIFY`` (channel :data:`CHANNEL`). On SQLite the service is one process and the
wake-ups stay in it.

In one process no wake-up can be lost, so the notifier also knows which agents have no
pending command: their last read found none, or every command it found has been
acknowledged since, and nothing woke them since. Their long-polls skip the database read
(:meth:`Notifier.known_clear`), the read that cost a fifth of the service's time at 5,000
agents. With a relay every poll reads, as a lost ``NOTIFY`` must not hide a command.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Sequence

import psycopg
from sqlalchemy import make_url

log = logging.getLogger("interstice.api")

CHANNEL = "interstice"
"""The ``LISTEN``/``NOTIFY`` channel of the replicas of one database."""
PAYLOAD_MAX_BYTES = 7000
"""Longest payload sent (PostgreSQL refuses 8,000 bytes and more): agent ids are split."""
RECONNECT_S = 1.0
"""Wait before a lost relay connection is opened again, seconds."""


class Notifier:
    """Per-agent events living on the service's event loop."""

    def __init__(self) -> None:
        self._events: dict[int, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._woken: dict[int, int] = {}  # wake-ups per agent so far
        self._clear: set[int] = set()  # agents known to have no pending command
        # per agent, what its last read found: (that read's mark, command ids not yet acked)
        self._delivered: dict[int, tuple[int, set[int]]] = {}
        self.relay: Callable[[list[int]], None] = lambda ids: None
        """Sends the ids :meth:`wake` sets to the other replicas (set by the relay)."""
        self.wakes_complete = True
        """Whether every command written for an agent wakes it here (one process; a relay
        that may lose wake-ups sets it False)."""

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the running event loop (at start-up)."""
        self._loop = loop

    def subscribe(self, agent_id: int) -> asyncio.Event:
        """The event the next command for ``agent_id`` sets (call on the event loop)."""
        event = self._events.get(agent_id)
        if event is None or event.is_set():
            event = self._events[agent_id] = asyncio.Event()
        if self._closed:
            event.set()
        return event

    def wakes_so_far(self, agent_id: int) -> int:
        """A mark to pass to :meth:`found` for a read that starts now (on the event loop)."""
        return self._woken.get(agent_id, 0)

    def found(self, agent_id: int, mark: int, command_ids: Sequence[int]) -> None:
        """Record what a read begun at ``mark`` found: the ids of the agent's pending
        commands (event loop)."""
        if command_ids:
            self._clear.discard(agent_id)
            self._delivered[agent_id] = (mark, set(command_ids))
        else:
            self._delivered.pop(agent_id, None)
            self._clear_if_unwoken(agent_id, mark)

    def acked(self, agent_id: int, command_id: int) -> None:
        """Record a committed acknowledgement (event loop): once every command of the
        agent's last read is acknowledged and nothing woke the agent since that read began,
        it has no pending command."""
        found = self._delivered.get(agent_id)
        if found is None:
            return
        mark, pending = found
        pending.discard(command_id)
        if not pending:
            del self._delivered[agent_id]
            self._clear_if_unwoken(agent_id, mark)

    def _clear_if_unwoken(self, agent_id: int, mark: int) -> None:
        if self.wakes_complete and self._woken.get(agent_id, 0) == mark:
            self._clear.add(agent_id)  # no command was written since the read began

    def known_clear(self, agent_id: int) -> bool:
        """Whether the agent surely has no pending command (no read needed; event loop)."""
        return agent_id in self._clear

    @property
    def closed(self) -> bool:
        """Whether the server is shutting down (:meth:`close`)."""
        return self._closed

    def close(self) -> None:
        """Set every event, now and from now on (call on the event loop when the server
        begins to shut down): waiting long-polls answer at once instead of being cancelled."""
        self._closed = True
        self._wake(list(self._events))

    def wake(self, agent_ids: Iterable[int]) -> None:
        """Set the events of ``agent_ids`` here and on the other replicas; thread-safe, a
        no-op before :meth:`bind`."""
        ids = list(agent_ids)
        if ids:
            self.wake_here(ids)
            self.relay(ids)

    def wake_here(self, agent_ids: list[int]) -> None:
        """Set the events of ``agent_ids`` in this process only (thread-safe)."""
        if agent_ids and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, agent_ids)

    def _wake(self, ids: list[int]) -> None:
        for agent_id in ids:
            self._woken[agent_id] = self._woken.get(agent_id, 0) + 1
            self._clear.discard(agent_id)
            event = self._events.pop(agent_id, None)
            if event is not None:
                event.set()


def psycopg_conninfo(db_url: str) -> str:
    """The libpq connection string of a SQLAlchemy ``postgresql+psycopg://`` URL."""
    return make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)


class PostgresRelay:
    """Wake-ups and staleness between the replicas of one PostgreSQL database.

    Messages on :data:`CHANNEL` are ``"<sender> wake <id>,<id>,..."`` (set these agents'
    long-poll events) and ``"<sender> stale"`` (the problem changed: the leader solves).
    A replica ignores its own messages. Sending is queued from any thread and done by a
    task on the event loop over one connection; receiving, over another that ``LISTEN``\\ s.
    Both reconnect after :data:`RECONNECT_S` when their connection fails; a wake-up sent
    meanwhile is lost, which costs a long-poll at most its ``wait`` (commands are read from
    the database on every poll).

    Args:
        db_url: the service's SQLAlchemy URL.
        notifier: the local events; its :attr:`Notifier.relay` is set to :meth:`send_wake`.
        on_stale: called (on the event loop) when another replica reports staleness.
    """

    def __init__(self, db_url: str, notifier: Notifier, on_stale: Callable[[], None]) -> None:
        self._conninfo = psycopg_conninfo(db_url)
        self._notifier = notifier
        notifier.wakes_complete = False
        self._on_stale = on_stale
        self._sender = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._outbox: asyncio.Queue[str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start listening and sending on the running loop (returns once listening)."""
        self._loop = asyncio.get_running_loop()
        self._outbox = asyncio.Queue()
        listening = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._listen_forever(listening), name="interstice-listen"),
            asyncio.create_task(self._send_forever(), name="interstice-notify"),
        ]
        self._notifier.relay = self.send_wake
        await listening.wait()

    async def stop(self) -> None:
        """Cancel both tasks (their connections close)."""
        self._notifier.relay = lambda ids: None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def send_wake(self, agent_ids: list[int]) -> None:
        """Ask the other replicas to wake ``agent_ids`` (thread-safe)."""
        text = ",".join(map(str, agent_ids))
        while text:
            cut = text.rfind(",", 0, PAYLOAD_MAX_BYTES) if len(text) > PAYLOAD_MAX_BYTES else -1
            head, text = (text, "") if cut < 0 else (text[:cut], text[cut + 1 :])
            self._send(f"wake {head}")

    def send_stale(self) -> None:
        """Tell the leader that the problem changed (thread-safe)."""
        self._send("stale")

    def _send(self, message: str) -> None:
        if self._loop is not None and self._outbox is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._outbox.put_nowait, f"{self._sender} {message}")

    async def _send_forever(self) -> None:
        assert self._outbox is not None
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as connection:
                    while True:
                        message = await self._outbox.get()
                        await connection.execute("SELECT pg_notify(%s, %s)", (CHANNEL, message))
            except psycopg.Error as error:
                log.warning("relay: sending failed (%s); reconnecting", error)
                await asyncio.sleep(RECONNECT_S)

    async def _listen_forever(self, listening: asyncio.Event) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as connection:
                    await connection.execute(f"LISTEN {CHANNEL}")
                    listening.set()
                    async for notice in connection.notifies():
                        self._receive(notice.payload)
            except psycopg.Error as error:
                log.warning("relay: listening failed (%s); reconnecting", error)
                listening.set()  # start-up goes on; wake-ups resume with the connection
                await asyncio.sleep(RECONNECT_S)

    def _receive(self, payload: str) -> None:
        sender, _, message = payload.partition(" ")
        if sender == self._sender:
            return
        kind, _, rest = message.partition(" ")
        if kind == "wake":
            self._notifier.wake_here([int(x) for x in rest.split(",") if x.isdigit()])
        elif kind == "stale":
            self._on_stale()
