"""``interstice demo``: the whole system on this machine in one command (see
:mod:`interstice.demo.session`); this process checks the flags, starts the run in a session
of its own and turns Ctrl-C and SIGTERM into one SIGTERM for it."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from interstice.data import SYNTHETIC_TRACE, TRACE_FILE, demo_trace
from interstice.errors import fail

MAX_AGENTS = 16
MAX_VIRTUAL_NODES = 5000
"""Simulated agents on top of the real ones: Summit's 4,734 nodes, and some more."""


def demo(
    agents: Annotated[
        str, typer.Option(metavar="INT", help="Real local agents (CPU, gloo), 1..16.")
    ] = "4",
    speedup: Annotated[
        str, typer.Option(metavar="FLOAT", help="Trace seconds per real second (time compression).")
    ] = "60",
    duration_s: Annotated[
        str,
        typer.Option(
            metavar="FLOAT", help="Seconds of replay, then everything stops and a summary."
        ),
    ] = "300",
    virtual_nodes: Annotated[
        str,
        typer.Option(
            metavar="INT",
            help="Simulated agents (register, heartbeat, ack; never train), 0..5000.",
        ),
    ] = "0",
    jobs: Annotated[
        str,
        typer.Option(
            help="Jobs to submit, comma-separated: example names (examples/NAME.toml) or job "
            "files (a path ending in .toml or holding a /)."
        ),
    ] = "digits,charlm",
    port: Annotated[
        str, typer.Option(metavar="INT", help="The service's port; 0: a free one.")
    ] = "0",
    seed: Annotated[
        str, typer.Option(metavar="INT", help="Draws the trace window among the best five.")
    ] = "0",
    grace_s: Annotated[
        str, typer.Option(metavar="FLOAT", help="Seconds a job has to release a reclaimed node.")
    ] = "15",
    trace: Annotated[
        Path | None,
        typer.Option(
            help=f"Node-state trace (default: the data folder's {TRACE_FILE}, else the "
            "synthetic trace the package ships)."
        ),
    ] = None,
    keep: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="Keep the jobs' folders (checkpoints, logs, final models) in DIR, new or "
            "empty, rather than delete them at the end.",
        ),
    ] = None,
) -> None:
    """Start the service, real agents, a scheduler replaying the Summit trace (without it, the
    synthetic trace the package ships) and the example jobs on this machine; show them live;
    stop it all after --duration-s or on Ctrl-C.

    The first line says which trace it replays. The last line printed is the summary as JSON. Exit code 0 on a clean run, 1 when a part failed on the way, 2 on bad flags or a missing trace.
    """  # noqa: E501 (one paragraph of --help)
    from interstice.demo.session import DemoOptions

    agents, virtual_nodes, port, seed = (
        whole(text, flag)
        for text, flag in (
            (agents, "--agents"),
            (virtual_nodes, "--virtual-nodes"),
            (port, "--port"),
            (seed, "--seed"),
        )
    )
    speedup, duration_s, grace_s = (
        real(text, flag)
        for text, flag in (
            (speedup, "--speedup"),
            (duration_s, "--duration-s"),
            (grace_s, "--grace-s"),
        )
    )
    if not 1 <= agents <= MAX_AGENTS:
        fail(f"--agents must be in 1..{MAX_AGENTS}, got {agents}")
    if not 0 < speedup <= 3600:
        fail(f"--speedup must be in (0, 3600], got {speedup}")
    if not 0 < duration_s <= 86400:
        fail(f"--duration-s must be in (0, 86400], got {duration_s}")
    if not 0 <= virtual_nodes <= MAX_VIRTUAL_NODES:
        fail(f"--virtual-nodes must be in 0..{MAX_VIRTUAL_NODES}, got {virtual_nodes}")
    if not 0 <= port <= 65535:
        fail(f"--port must be in 0..65535, got {port}")
    if not 0 <= grace_s <= 3600:
        fail(f"--grace-s must be in [0, 3600], got {grace_s}")
    files = job_files(jobs)
    trace = trace or demo_trace()
    if not trace.is_file():
        fail(
            f"the Summit node-state trace {trace} is absent: put {TRACE_FILE} there, set "
            "$INTERSTICE_DATA_DIR to its folder or give --trace"
        )
    options = DemoOptions(
        agents,
        speedup,
        duration_s,
        virtual_nodes,
        files,
        port,
        seed,
        grace_s,
        str(trace.resolve()),
        trace.resolve() == SYNTHETIC_TRACE.resolve(),
        None if keep is None else str(keep_folder(keep)),
    )
    raise typer.Exit(code=supervise(json.dumps(asdict(options))))


def job_files(spec: str) -> tuple[str, ...]:
    """``--jobs``' items as job files: an example's name (``examples/<name>.toml`` of the
    installed package), or the path of a TOML job file (``interstice job submit``'s format).

    Returns:
        Absolute paths, one per item, in order.

    Raises:
        typer.Exit: (code 2, one line) no item, an unknown example, a missing file, or a
            file that is not a valid job.
    """
    from interstice.client_cli import read_job_file, validate_job
    from interstice.demo.session import EXAMPLES

    files = []
    for item in filter(None, (item.strip() for item in spec.split(","))):
        if item.endswith(".toml") or "/" in item:
            path = Path(item).expanduser()
            if not path.exists():
                fail(f"--jobs: no job file {item}")
            if not path.is_file():
                fail(f"--jobs: {item} is not a file")
            validate_job(read_job_file(path), f"--jobs {item}")
            files.append(str(path.resolve()))
        elif (EXAMPLES / f"{item}.toml").is_file():
            files.append(str(EXAMPLES / f"{item}.toml"))
        else:
            known = ", ".join(sorted(p.stem for p in EXAMPLES.glob("*.toml")))
            fail(f"--jobs: no example job {item!r} (examples: {known}; a job file: a path)")
    if not files:
        fail("--jobs names no job")
    return tuple(files)


def keep_folder(path: Path) -> Path:
    """``--keep``'s folder, created if new; its absolute path.

    Raises:
        typer.Exit: (code 2, one line) not a folder, not empty (the run's job folders, named
            by job id, would mix with what is there), or not creatable or writable.
    """
    path = path.expanduser().absolute()
    try:
        if path.exists() and not path.is_dir():
            fail(f"--keep {path}: not a folder")
        if path.is_dir() and any(path.iterdir()):
            fail(f"--keep {path}: not empty")
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--keep {path}: {exc.strerror or exc}")
    if not os.access(path, os.W_OK | os.X_OK):
        fail(f"--keep {path}: not writable")
    return path


def whole(text: str, flag: str) -> int:
    """``text`` as an integer.

    Raises:
        typer.Exit: (code 2, one line naming ``flag``) it is not one.
    """
    try:
        return int(text)
    except ValueError:
        fail(f"{flag} must be an integer, got {text!r}")


def real(text: str, flag: str) -> float:
    """``text`` as a finite number.

    Raises:
        typer.Exit: (code 2, one line naming ``flag``) it is not one.
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        fail(f"{flag} must be a number, got {text!r}")
    return value


def supervise(options_json: str) -> int:
    """Run the session in a process session of its own and wait for it; its exit code.

    A terminal's Ctrl-C goes to its whole foreground process group: were the service, the
    agents and the workers in it, they would all stop at once and the run could not end in
    order. So only this process gets it, and hands the session one SIGTERM.
    """
    session = subprocess.Popen(
        [sys.executable, "-m", "interstice.demo.session", options_json],
        start_new_session=True,
    )

    def forward(signum: int, frame: object) -> None:
        if session.poll() is None:
            session.send_signal(signal.SIGTERM)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    code = session.wait()
    try:  # anything of the session's process group still there (it stops its own first)
        os.killpg(session.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return code if code >= 0 else 1  # killed by a signal: not a clean run
