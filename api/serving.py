"""How ``interstice serve`` listens and stops: its port taken before anything else is done,
and a shutdown that never answers a request it cut short.

uvicorn alone, on SIGINT or SIGTERM, stops accepting, lets the requests in flight finish
for ``timeout_graceful_shutdown`` seconds, then cancels their tasks and answers 500 (with a
traceback) to those that had not answered yet; a second SIGINT skips that wait and the
app's own shutdown, and the event loop's end then cancels both, with more tracebacks. But a
cancelled request may have committed already, or will: a batch of node events is written
in a worker thread, which no cancellation stops. A 500 would tell the scheduler that a
committed batch failed.

Here a request still unanswered when :data:`GRACE_S` has passed, or at once on a repeated
signal, is dropped: its connection closes without an answer (nothing more is sent on it)
and its task is cancelled quietly. A client sees the connection end and retries; event
ids and idempotency keys make the retry change nothing twice. The app's shutdown always
runs, and the signals are not raised again once the server stopped: the process exits 0,
without a traceback.
"""

import asyncio
import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import uvicorn

GRACE_S = 2.0
"""Seconds the requests in flight get to answer after the first stop signal."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` (IPv6 when ``host`` holds a colon).

    Raises:
        OSError: it cannot listen there: ``errno.EADDRINUSE`` when the port is in use,
            ``errno.EADDRNOTAVAIL`` for an address of another machine, ``socket.gaierror``
            for a host name that does not resolve.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=2048)


class Quiet:
    """ASGI wrapper: a request task cancelled by :meth:`Server.drop_unanswered` ends
    quietly (uvicorn would log it with a traceback and try to answer 500)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.dropping = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            if not self.dropping:
                raise


class Server(uvicorn.Server):
    """uvicorn's server with the shutdown of the module docstring.

    Args:
        config: uvicorn's configuration; its ``app`` must be a :class:`Quiet`.
        on_shutdown: called first when the shutdown starts (the service answers its
            long-polls, so that none is left to drop).
    """

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        assert isinstance(config.app, Quiet)
        config.timeout_graceful_shutdown = None  # bounded by GRACE_S here instead
        super().__init__(config)
        self.quiet = config.app
        self.on_shutdown = on_shutdown
        self.signalled_again = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """A first SIGINT/SIGTERM stops the server; a repeated one drops the requests still
        unanswered at once (never uvicorn's forced exit, which skips the app's shutdown)."""
        self.signalled_again = self.should_exit
        self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Stop on SIGINT/SIGTERM while serving. Unlike uvicorn's, the signals are not
        raised again afterwards (a KeyboardInterrupt traceback), and once the server has
        stopped a further one ends the process at once, quietly (exit code 128 + the
        signal's number): what is left then is threads finishing their work (a solve, the
        write of a dropped request), which the interpreter would wait for."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        for sig in STOP_SIGNALS:
            signal.signal(sig, self.handle_exit)
        try:
            yield
        finally:
            for sig in STOP_SIGNALS:
                signal.signal(sig, _exit_at_once)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown, the requests still unanswered dropped after :data:`GRACE_S`
        or at a repeated signal."""
        self.on_shutdown()
        loop = asyncio.get_running_loop()
        drop_at = loop.time() + GRACE_S

        async def drop_when_due() -> None:
            while not self.signalled_again and loop.time() < drop_at:
                await asyncio.sleep(0.05)
            self.drop_unanswered()

        dropper = asyncio.create_task(drop_when_due())
        try:
            await super().shutdown(sockets)
        finally:
            dropper.cancel()

    def drop_unanswered(self) -> None:
        """Close every connection whose answer is not complete, sending nothing more on it
        (a 500 included), and cancel the tasks of the requests in flight."""
        self.quiet.dropping = True
        for connection in list(self.server_state.connections):
            cycle = getattr(connection, "cycle", None)
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True  # uvicorn's cycle then sends nothing
                connection.transport.abort()  # at once, even to a client that reads nothing
        for task in list(self.server_state.tasks):
            task.cancel()


def _exit_at_once(sig: int, frame: FrameType | None) -> None:
    os._exit(128 + sig)
