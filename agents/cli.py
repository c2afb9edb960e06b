"""``interstice agent``: run the node agent of this node (see interstice.agents.agent)."""

import ctypes
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from interstice import wire
from interstice.errors import fail, token_from_file

PR_SET_DUMPABLE = 4  # linux/prctl.h


def _parse_ports(text: str) -> list[int]:
    try:
        ports = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        fail(f"--ports {text!r}: expected comma-separated port numbers, e.g. 29500,29501")
    if not ports or not all(0 < port < 65536 for port in ports):
        fail(f"--ports {text!r}: expected at least one port in 1..65535")
    return ports


def _parse_signal(text: str) -> signal.Signals:
    name = text.upper()
    if name.isdigit():
        try:
            return signal.Signals(int(name))
        except ValueError:
            fail(f"--preempt-signal {text!r}: no such signal number")
    name = name if name.startswith("SIG") else f"SIG{name}"
    try:
        return signal.Signals[name]
    except KeyError:
        fail(f"--preempt-signal {text!r}: no such signal (e.g. TERM, INT, USR2)")


def _read_token(token: str | None, token_file: Path | None) -> str:
    """The agent's token from --token/INTERSTICE_AGENT_TOKEN or --token-file; then it leaves
    this process's environment, so nothing the agent starts inherits it, and the process
    becomes non-dumpable, so the environment it was started with (``/proc/<pid>/environ``,
    which ``os.environ`` no longer changes) and its memory are root's alone: user code runs
    as the agent's Unix account and could read them otherwise."""
    os.environ.pop(wire.ENV_AGENT_TOKEN, None)
    hide_from_same_user()
    if token_file is not None:
        token = token_from_file(token_file)
    if not token:
        fail(f"--token: give the agent's token ({wire.ENV_AGENT_TOKEN} or --token-file)")
    return token


def hide_from_same_user() -> None:
    """Make this process non-dumpable (Linux ``prctl(PR_SET_DUMPABLE, 0)``): its ``/proc``
    files (environ, mem, cmdline's ptrace access) become root's and other processes of the
    same user cannot ptrace it. Children that exec a program are dumpable again, so the
    workers are unaffected. A no-op where prctl is missing (not Linux).

    Raises:
        OSError: prctl refused (it does not for this option).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return
    if prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def agent(
    server: Annotated[
        list[str],
        typer.Option(
            help="Base URL of the service, e.g. http://head:8000; replicas of one database as "
            "URL1,URL2 or --server repeated (the agent fails over between them).",
        ),
    ],
    token: Annotated[
        str | None,
        typer.Option(
            envvar=wire.ENV_AGENT_TOKEN,
            help="Bearer token of role agent (interstice token create --role agent). "
            "A --token on the command line is visible in ps to every user of the node: "
            f"prefer ${wire.ENV_AGENT_TOKEN} or --token-file.",
            show_default=False,
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(help="File holding the agent's token (mode 0600), instead of --token."),
    ] = None,
    node: Annotated[
        str | None,
        typer.Option(help="This node's name, as the scheduler names it.", show_default="hostname"),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(
            help="Address other nodes reach this one at (rendezvous and workers bind it).",
            show_default="this host's address",
        ),
    ] = None,
    ports: Annotated[
        str,
        typer.Option(
            help="Comma-separated rendezvous ports this agent may host (one per "
            "generation, in turn)."
        ),
    ] = "29500,29501",
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="Folder for the jobs' run directories (stop and progress files) and "
            "launcher logs.",
            show_default="/tmp/interstice-agent-NODE",
        ),
    ] = None,
    report_idle: Annotated[
        bool,
        typer.Option(
            help="Report the node idle on registration (the Slurm prolog path: a "
            "placeholder job landed on an idle node)."
        ),
    ] = False,
    nproc_per_node: Annotated[
        int,
        typer.Option(
            min=1,
            help="Worker processes on this node for jobs that do not say (a job's "
            "nproc_per_node, e.g. auto = one per visible GPU, wins).",
        ),
    ] = 1,
    devices: Annotated[
        str, typer.Option(help="Comma-separated devices reported to the service, e.g. cuda:0.")
    ] = "",
    preempt_signal: Annotated[
        str,
        typer.Option(
            help="Signal that means preemption: stop the workers, release the node "
            "and exit within --grace-s. Not USR1: NCCL may use it."
        ),
    ] = "TERM",
    grace_s: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="Seconds from the preemption signal to the forced end "
            "(Slurm's GraceTime or KillWait); workers still alive 1 s before are killed.",
        ),
    ] = 30.0,
    heartbeat_s: Annotated[
        float | None,
        typer.Option(min=0.1, help="Seconds between heartbeats.", show_default="the service's"),
    ] = None,
    poll_wait_s: Annotated[
        float, typer.Option(min=0.0, max=60.0, help="Long-poll wait for commands, seconds.")
    ] = 20.0,
    join_timeout_s: Annotated[
        float, typer.Option(min=1.0, help="A rendezvous not complete after this long fails.")
    ] = 60.0,
    checkpoint_every: Annotated[
        int, typer.Option(min=1, help="Workers checkpoint every this many steps (and on stop).")
    ] = 50,
    warm_before_register_s: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Longest wait, seconds, for the spare launcher to import torch before the "
            "agent registers (so a first start pays no import); 0 registers at once.",
        ),
    ] = 60.0,
    log_level: Annotated[str, typer.Option(help="Logging level of the agent.")] = "INFO",
) -> None:
    """Run this node's agent: register, heartbeat, and run the service's commands.

    Start and rescale commands launch this node's workers with PyTorch elastic; stop
    commands and the preemption signal make them checkpoint and exit. The agent leaves
    the service (the node is released) when it exits.
    """
    from interstice.agents.agent import Agent, AgentConfig

    token = _read_token(token, token_file)
    node_name = node or socket.gethostname()
    if host is None:
        try:
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            fail("--host: this host's name does not resolve; pass its address")
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s agent[{node_name}] %(levelname)s %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per long-poll otherwise
    servers = tuple(url.strip() for given in server for url in given.split(",") if url.strip())
    for url in servers:
        if not url.startswith(("http://", "https://")):
            fail(f"--server {url!r}: give an http:// or https:// URL")
    if not servers:
        fail("--server: give the service's URL")
    config = AgentConfig(
        server=servers,
        token=token,
        node=node_name,
        host=host,
        ports=_parse_ports(ports),
        workdir=workdir or Path(f"/tmp/interstice-agent-{node_name}"),
        report_idle=report_idle,
        nproc_per_node=nproc_per_node,
        devices=tuple(device for device in devices.split(",") if device),
        preempt_signal=_parse_signal(preempt_signal),
        grace_s=grace_s,
        heartbeat_s=heartbeat_s,
        poll_wait_s=poll_wait_s,
        join_timeout_s=join_timeout_s,
        checkpoint_every=checkpoint_every,
        warm_before_register_s=warm_before_register_s,
    )
    raise typer.Exit(Agent(config).run())
