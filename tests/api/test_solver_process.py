"""The solver process: a reclaim is answered while it solves, a killed one is started anew,
and ``interstice serve`` leaves no process behind when it ends."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from api_helpers import free_port, interstice_executable
from interstice.api.control.loop import optimizer_solver
from polling import wait_until


class HeldSolver:
    """The production solver, held once ``folder/armed`` exists: it writes its process id
    to ``folder/solving`` and solves when ``folder/released`` appears (picklable: it runs in
    the solver process)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, problem, backend):  # type: ignore[no-untyped-def]
        if (self.folder / "armed").exists():
            (self.folder / "solving").write_text(str(os.getpid()))
            wait_until((self.folder / "released").exists, 60, "the test's release")
        return optimizer_solver(problem, backend)


def kinds(commands: list[dict]) -> list[str]:
    return [c["kind"] for c in commands]


def test_a_reclaim_is_answered_while_the_solver_process_is_held(make_api, tmp_path) -> None:
    with make_api(solver=HeldSolver(tmp_path), solver_process=True) as api:
        control = api.app.state.control
        try:
            agents = {n: api.register(n, report_idle=True) for n in ("n1", "n2")}
            api.submit(min_nodes=1, max_nodes=2)
            for agent in agents.values():  # the first solve waits for the process's start
                api.ack_all(agent, wait_until(lambda a=agent: api.poll(a), 120, "a start"))
            (tmp_path / "armed").touch()
            api.submit(min_nodes=1, max_nodes=1)
            solving = tmp_path / "solving"
            wait_until(solving.exists, 60, "the solve held")
            assert int(solving.read_text()) == control.solver_process.pid != os.getpid()
            solves = control.solves
            api.node_events(("e3", "n2", "busy", 30))
            assert kinds(api.poll(agents["n2"], wait=5)) == ["stop"]
            assert kinds(api.poll(agents["n1"], wait=5)) == ["rescale"]
            assert control.solves == solves  # the solve is still held
        finally:
            (tmp_path / "released").touch()
        api.wait_for(lambda: control.solves > solves, 60)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # no database's own
def test_a_killed_solver_process_is_started_anew_and_the_solve_done(make_api, caplog) -> None:
    with make_api(solver_process=True) as api:
        process = api.app.state.control.solver_process
        killed = process.pid
        os.kill(killed, signal.SIGKILL)
        agent = api.register("n1", report_idle=True)
        with caplog.at_level(logging.WARNING, logger="interstice.api"):
            api.submit(min_nodes=1, max_nodes=1)
            assert kinds(wait_until(lambda: api.poll(agent), 120, "a start")) == ["start"]
        assert process.starts == 2 and process.pid != killed
        assert "the solver process ended (exit code -9)" in caplog.text


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_serve_leaves_no_process_behind(tmp_path, signum) -> None:
    log = tmp_path / "serve.log"
    db = f"sqlite:///{tmp_path / 'interstice.db'}"
    with log.open("w") as output:
        server = subprocess.Popen(
            [interstice_executable(), "serve", "--db", db, "--port", str(free_port())],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        service = psutil.Process(server.pid)
        children = wait_until(
            lambda: _with_solver(service.children(recursive=True)),
            120,
            "the solver process started",
            running=lambda: server.poll() is None,
        )
        wait_until(lambda: "Application startup complete" in log.read_text(), 120, "started")
        server.send_signal(signum)
        server.wait(60)
        _, alive = psutil.wait_procs(children, timeout=30)
        assert alive == [], log.read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def _with_solver(processes: list[psutil.Process]) -> list[psutil.Process]:
    """``processes`` once one of them is a ``spawn`` child (the solver process), else []."""

    def spawned(process: psutil.Process) -> bool:
        try:
            return "spawn_main" in " ".join(process.cmdline())
        except psutil.Error:  # ended meanwhile
            return False

    return processes if any(spawned(p) for p in processes) else []
