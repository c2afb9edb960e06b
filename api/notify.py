"""Wake-ups of waiting long-polls, one :class:`asyncio.Event` per agent.

A long-poll subscribes *before* it reads the database, so a command committed between the
read and the wait still wakes it. :meth:`Notifier.wake` may be called from any thread.
"""

import asyncio
from collections.abc import Iterable


class Notifier:
    """Per-agent events living on the service's event loop."""

    def __init__(self) -> None:
        self._events: dict[int, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the running event loop (at start-up)."""
        self._loop = loop

    def subscribe(self, agent_id: int) -> asyncio.Event:
        """The event the next command for ``agent_id`` sets (call on the event loop)."""
        event = self._events.get(agent_id)
        if event is None or event.is_set():
            event = self._events[agent_id] = asyncio.Event()
        return event

    def wake(self, agent_ids: Iterable[int]) -> None:
        """Set the events of ``agent_ids``; thread-safe, a no-op before :meth:`bind`."""
        ids = list(agent_ids)
        if ids and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, ids)

    def _wake(self, ids: list[int]) -> None:
        for agent_id in ids:
            event = self._events.pop(agent_id, None)
            if event is not None:
                event.set()
