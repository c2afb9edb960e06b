"""Free TCP ports on this machine, for tests, local clusters and rendezvous stores."""

import socket
from contextlib import ExitStack


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports that were free on ``host`` a moment ago.

    The sockets are all open at once while the ports are picked, so the ports differ; they
    are closed on return, so another process may take one before the caller binds it.

    Args:
        count: how many ports (≥ 0).
        host: the address to bind.

    Returns:
        The port numbers.
    """
    with ExitStack() as stack:
        sockets = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]


def free_port(host: str = "127.0.0.1") -> int:
    """One TCP port that was free on ``host`` a moment ago (see :func:`free_ports`)."""
    return free_ports(1, host)[0]
