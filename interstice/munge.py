"""MUNGE credentials for the client: who the caller is, vouched for by the centre's munged.

On a host of the cluster (a login node, a compute node) munged runs with the key every host
shares; the ``munge`` command asks it for a credential that names the calling process's uid
and gid, valid for munged's TTL (300 s by default) and decodable once. The client sends a
fresh one with every request as ``Authorization: MUNGE <credential>``, and the service
decodes it with ``unmunge`` (:mod:`interstice.api.auth.munge`). No cryptography happens
here: munged makes and checks the credentials.

The socket is munged's default unless ``INTERSTICE_MUNGE_SOCKET`` names another.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Generator

import httpx

from interstice.wire import ENV_MUNGE_SOCKET, MUNGE_SCHEME

TIMEOUT_S = 10.0
"""Longest wait for munged, seconds."""


class MungeUnavailable(RuntimeError):
    """No credential can be made: the ``munge`` command is missing or munged does not answer
    (the message is munge's own, on one line)."""


def available() -> bool:
    """Whether the ``munge`` command is installed on this host."""
    return shutil.which("munge") is not None


def socket_from_env() -> str | None:
    """munged's socket from ``INTERSTICE_MUNGE_SOCKET``, or None (munged's default)."""
    return os.environ.get(ENV_MUNGE_SOCKET) or None


def credential(socket: str | None = None) -> str:
    """A fresh credential of the calling process's uid and gid, with no payload.

    Args:
        socket: munged's socket; None: munged's default.

    Returns:
        The credential's text (``MUNGE:...:``), to send once.

    Raises:
        MungeUnavailable: ``munge`` is missing, or munged failed or did not answer.
    """
    command = ["munge", "--no-input", *(["--socket", socket] if socket else [])]
    try:
        made = subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise MungeUnavailable("the munge command is not installed") from None
    except subprocess.TimeoutExpired:
        raise MungeUnavailable(f"munge did not answer within {TIMEOUT_S:g} s") from None
    if made.returncode != 0:
        reason = " ".join(made.stderr.split()).removeprefix("munge: Error: ")
        raise MungeUnavailable(reason or f"munge exited with status {made.returncode}")
    return made.stdout.strip()


class MungeAuth(httpx.Auth):
    """httpx authentication that puts a fresh MUNGE credential on every request (munged
    refuses a credential decoded twice, so none is reused).

    Args:
        socket: munged's socket; None: munged's default.
    """

    def __init__(self, socket: str | None = None) -> None:
        self.socket = socket

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Sign ``request`` (raises :class:`MungeUnavailable` when munged cannot)."""
        request.headers["Authorization"] = f"{MUNGE_SCHEME} {credential(self.socket)}"
        yield request
