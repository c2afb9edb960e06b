"""What a worker forked from the launcher's fork server runs: the built-in worker, or a user's
Python script or module as ``python`` would run it.

The fork server imported torch and the rest ahead (:mod:`interstice.agents.launcher_process`),
so a worker pays no imports. It predates the job, so each function first applies the job's
environment and cwd, and sends stderr into the rank log (torch redirected stdout there
already, see :mod:`interstice.agents.rank_logs`).
"""

import atexit
import os
import runpy
import signal
import sys
import traceback
from typing import Any


def run_builtin_worker(env: dict[str, str], cwd: str | None, argv: list[str]) -> Any:
    """The built-in worker: the job's env and cwd, stderr into the rank log, then its
    ``main``."""
    os.dup2(1, 2)  # torch redirected stdout to the rank log already
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    from interstice.agents import worker

    return worker.main(argv)


def run_python_main(env: dict[str, str], cwd: str | None, argv: list[str]) -> None:
    """A user's Python script or module, as ``python SCRIPT args...`` (or ``python -m MODULE
    args...``) would run it.

    The job's env and cwd are applied (the fork server predates the job), stderr joins
    stdout in the rank log, ``sys.argv`` and ``sys.path[0]`` are the script's (its folder;
    the cwd for a module), and it runs as ``__main__`` (``runpy``). Its end maps to the exit
    code torch elastic sees, as for a process: ``SystemExit(code)`` that code (torch's
    ``record`` makes 0 a normal return), an exception its traceback on stderr and 1 (with
    torch's error file), ``KeyboardInterrupt`` death by SIGINT. ``atexit`` handlers run
    before the exit.

    Args:
        env: the job's variables (torch's were set by torch).
        cwd: the working directory, or None to keep the fork server's.
        argv: ``[python, SCRIPT, args...]`` or ``[python, -m, MODULE, args...]`` (see
            :func:`interstice.agents.launch_config.python_main`).
    """
    os.dup2(1, 2)  # torch redirected stdout to the rank log already
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    try:
        if argv[1] == "-m":
            sys.argv = [argv[2], *argv[3:]]  # run_module sets argv[0] to the module's file
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(argv[1])
            sys.argv = [script, *argv[2:]]
            sys.path[0] = os.path.dirname(os.path.realpath(script))
            runpy.run_path(script, run_name="__main__")
    except KeyboardInterrupt:
        traceback.print_exc()
        atexit._run_exitfuncs()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except SystemExit:
        atexit._run_exitfuncs()
        raise
    except BaseException:
        traceback.print_exc()
        atexit._run_exitfuncs()
        raise
    atexit._run_exitfuncs()
