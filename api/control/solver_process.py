"""The solver process: each problem is built and solved in a child process of its own.

The build reads the database and the solve is Python and NumPy; at 10,000 nodes together they
hold a Python interpreter's GIL for about 150 ms a solve. In a thread of the service they
would share the GIL with the event loop that answers reclaims, heartbeats and long-polls,
and every answer would queue behind them. In the child they share nothing with it: the
child builds (:func:`interstice.api.control.loop.build_problem`, on its own database
connections) and solves, and sends back the :class:`~interstice.api.control.loop.Plan`; the
service writes it (:func:`~interstice.api.control.loop.apply_allocation`), as every other
write, in its own process.

The child runs at a lower CPU priority (:data:`NICE`): where the cores are busy, the
service's answers come before the solve's work. It is a ``spawn`` child (a fork of a
threaded service could copy a held lock) in a process group of its own, so stopping it also
stops a CBC subprocess of its solve. A child that dies is started anew and the solve asked
once more, and so is a hung one: it tells the service the solve's time limit once the problem
is built, and a child that has not started within :data:`START_S`, not built within
``solver_hang_s``, or not answered within the time limit and ``solver_hang_s`` more, is
killed. A child whose service dies ends when it reads the closed pipe, after at most the
solve it is running.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import traceback
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from interstice.api.control.loop import Plan, Solver, plan
from interstice.api.settings import Settings
from interstice.api.store.db import Database
from interstice.optimizer import Problem

log = logging.getLogger("interstice.api")

NICE = 5
"""How much lower the child's CPU priority is than the service's (``os.nice``): on busy
cores the scheduler gives the service about three times the child's share."""
START_S = 300.0
"""How long a new child may take to start (a ``spawn``: its imports, on a busy machine) and
say it is ready, seconds, before it is taken as hung."""
STOP_S = 5.0
"""How long a stopped child has to end on SIGTERM before it is killed, seconds."""


class SolverDied(RuntimeError):
    """The solver process ended before it answered (its exit code in the message)."""


class SolverHung(SolverDied):
    """The solver process answered nothing within its bound (:data:`START_S` to start,
    ``solver_hang_s`` to build and beyond the solve's time limit) and was killed."""


class SolveFailed(RuntimeError):
    """The build or the solve raised in the solver process (its traceback in the message)."""


def serve(conn: Connection, settings: dict[str, Any], solver: Solver) -> None:
    """The child's loop: send ``("ready", None)``, then for each request read from ``conn``,
    build and solve (:func:`plan`), sending ``("built", time_limit_s)`` between the two, then
    ``("plan", Plan | None)`` or ``("error", traceback text)``; return once the service's end
    of ``conn`` is closed.

    Args:
        conn: the child's end of the pipe to the service.
        settings: the service's settings (``Settings.model_dump()``: a settings class built
            from a TOML file does not pickle).
        solver: ``solver(problem, backend) -> Allocation``, picklable.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C: the service stops it
    os.setpgid(0, 0)
    os.nice(NICE)
    reader = Reader(Settings.model_construct(**settings))

    def built(problem: Problem) -> None:
        conn.send(("built", problem.time_limit_s))

    try:
        conn.send(("ready", None))
        while True:
            try:
                conn.recv()
            except EOFError:
                return
            try:
                reply: tuple[str, object] = ("plan", plan(reader, solver, built))
            except Exception:
                reply = ("error", traceback.format_exc())
            conn.send(reply)
    except (BrokenPipeError, ConnectionResetError):  # the service ended during the solve
        return
    finally:
        reader.db.dispose()


class Reader:
    """What the child builds a problem from: the service's settings and a database of its
    own (:class:`interstice.api.control.loop.Source`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db = Database(settings.db_url)


class SolverProcess:
    """The service's handle on its solver process: started by :meth:`start` (or the first
    :meth:`plan`), ended by :meth:`stop`.

    Args:
        settings: the service's settings; the child opens ``db_url`` itself.
        solver: ``solver(problem, backend) -> Allocation``; it crosses to the child by
            pickle, so a module-level function or an instance of a module-level class.
    """

    def __init__(self, settings: Settings, solver: Solver) -> None:
        self.settings = settings
        self.solver = solver
        self.starts = 0
        """Children started so far (a restart after a death counts)."""
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._ready = False

    @property
    def pid(self) -> int | None:
        """The running child's process id; None before it starts and after it stops."""
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the child unless it runs (it imports and connects while the service goes on)."""
        if self._process is not None:
            return
        spawn = multiprocessing.get_context("spawn")
        here, there = spawn.Pipe()
        process = spawn.Process(
            target=serve,
            args=(there, self.settings.model_dump(), self.solver),
            name="interstice-solver",
            daemon=True,  # ended by multiprocessing at the service's exit, whatever the path
        )
        process.start()
        there.close()
        self._process, self._conn, self._ready = process, here, False
        self.starts += 1

    async def plan(self) -> Plan | None:
        """Build and solve in the child: the :class:`Plan`, or None when there is nothing to
        decide. A child that died is started anew and asked once more (logged).

        Raises:
            SolverDied: the child died (or hung: :class:`SolverHung`) twice in a row.
            SolveFailed: the build or the solve raised.
        """
        try:
            return await self._ask()
        except SolverDied as exc:
            log.warning("%s; starting a new one and solving again", exc)
            return await self._ask()

    async def _ask(self) -> Plan | None:
        self.start()
        conn = self._conn
        assert conn is not None
        hang_s = self.settings.solver_hang_s
        try:
            if not self._ready:
                await self._receive(conn, START_S)
                self._ready = True
            conn.send(True)
            kind, value = await self._receive(conn, hang_s)
            if kind == "built":
                kind, value = await self._receive(conn, value + hang_s)
        except asyncio.CancelledError:
            self.stop()  # an answer still coming would be read as the next request's
            raise
        except (EOFError, OSError) as exc:
            code = self._end()
            raise SolverDied(f"the solver process ended (exit code {code})") from exc
        if kind == "error":
            raise SolveFailed(f"in the solver process:\n{value}")
        return value  # type: ignore[no-any-return]

    async def _receive(self, conn: Connection, timeout_s: float) -> tuple[str, Any]:
        """The child's next message, waited for at most ``timeout_s`` seconds.

        Raises:
            SolverHung: none came in time; the child is killed.
            EOFError, OSError: the child ended.
        """
        if not await asyncio.to_thread(conn.poll, timeout_s):
            await asyncio.to_thread(self._end)  # its join off the event loop
            raise SolverHung(f"the solver process answered nothing in {timeout_s:.0f} s; killed")
        return await asyncio.to_thread(conn.recv)  # type: ignore[no-any-return]

    def stop(self) -> None:
        """End the child now, mid-solve too, with its process group (a CBC it runs)."""
        self._end()

    def _end(self) -> int | None:
        """Stop the child and reap it; its exit code (None if it never ran)."""
        process, self._process, self._conn = self._process, None, None
        if process is None:
            return None
        if process.is_alive():
            _signal(process, signal.SIGTERM)
            process.join(STOP_S)
        _signal(process, signal.SIGKILL)  # the child still alive, or a CBC its group left
        process.join()
        return process.exitcode


def _signal(process: BaseProcess, signum: int) -> None:
    """``signum`` to the child's process group (Linux reuses no process id while a group of
    that id lives), else to the child alone while it runs (before it made its group)."""
    assert process.pid is not None
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        if process.is_alive():
            try:
                os.kill(process.pid, signum)
            except ProcessLookupError:
                pass
