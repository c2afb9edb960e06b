"""A solver process that hangs is killed after its bound and a new one started, which does
the solve and places the job."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import psutil
import pytest
from interstice.api.control.loop import optimizer_solver
from polling import wait_until

HANG_S = 1.0
"""The test service's ``solver_hang_s``, seconds."""


class HangingSolver:
    """The production solver, hung (it sleeps for an hour) while ``folder/hang`` exists; it
    writes its process id to ``folder/hung-<pid>`` first (picklable: it runs in the solver
    process)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, problem, backend):  # type: ignore[no-untyped-def]
        if (self.folder / "hang").exists():
            (self.folder / f"hung-{os.getpid()}").touch()
            time.sleep(3600)
        return optimizer_solver(problem, backend)


def hung_pids(folder: Path) -> list[int]:
    return [int(path.name.removeprefix("hung-")) for path in folder.glob("hung-*")]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # no database's own
def test_a_hung_solver_process_is_killed_and_the_next_one_places_the_job(
    make_api, tmp_path, caplog
) -> None:
    (tmp_path / "hang").touch()
    with (
        caplog.at_level(logging.WARNING, logger="interstice.api"),
        make_api(solver=HangingSolver(tmp_path), solver_process=True, solver_hang_s=HANG_S) as api,
    ):
        process = api.app.state.control.solver_process
        agent = api.register("n1", report_idle=True)
        api.submit(min_nodes=1, max_nodes=1)
        (hung,) = wait_until(lambda: hung_pids(tmp_path), 120, "a hung solver process")
        (tmp_path / "hang").unlink()  # its replacement solves
        commands = wait_until(lambda: api.poll(agent), 120, "a start")
        assert [c["kind"] for c in commands] == ["start"]
        assert process.starts == 2 and process.pid != hung
        assert not psutil.pid_exists(hung)
    limit_s = 0.2 + HANG_S  # the objective's default time limit, and the bound beyond it
    assert f"the solver process answered nothing in {limit_s:.0f} s; killed" in caplog.text
