"""``interstice serve`` for the benchmarks: a fresh SQLite file in a temporary folder, a
scalability table with one model (``benchnet``), a token per role, the server as a
subprocess on a free loopback port, stopped (and its log's path printed) at the end."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from interstice.api.auth.tokens import create_token
from interstice.api.store.db import Database, upgrade

TABLE = "model,nodes,samples_per_s\n" + "".join(
    f"benchnet,{n},{100 * n**0.9:.1f}\n" for n in (1, 2, 4, 8, 16, 32)
)
ROLES = ("scheduler", "agent", "user")


@dataclass(frozen=True)
class Served:
    """A running service: its base URL, a bearer token per role, its temporary folder, the
    server's process id."""

    url: str
    tokens: dict[str, str]
    folder: Path
    pid: int

    def auth(self, role: str) -> dict[str, str]:
        """The Authorization header of ``role``'s token."""
        return {"Authorization": f"Bearer {self.tokens[role]}"}


def free_port() -> int:
    """An unused TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(
    heartbeat_s: float = 10.0, ready_s: float = 60.0, slow_solver: float = 1.0
) -> Iterator[Served]:
    """Run ``interstice serve`` (this Python's console script) until the block ends.

    Args:
        heartbeat_s: the service's heartbeat interval, seconds.
        ready_s: longest wait for ``/readyz``, seconds.
        slow_solver: above 1, every solve takes that many times as long (bench/slow_serve.py).

    Raises:
        RuntimeError: the service was not ready within ``ready_s``.
    """
    folder = Path(tempfile.mkdtemp(prefix="interstice-bench-"))
    db_url = f"sqlite:///{folder / 'bench.db'}"
    (folder / "table.csv").write_text(TABLE)
    database = Database(db_url)
    upgrade(database.engine)
    tokens = {role: create_token(database, role, role) for role in ROLES}
    database.dispose()
    port = free_port()
    env = os.environ | {
        "INTERSTICE_SCALABILITY_CSV": str(folder / "table.csv"),
        "INTERSTICE_HEARTBEAT_INTERVAL_S": str(heartbeat_s),
        "INTERSTICE_CHECKPOINT_ROOT": str(folder / "checkpoints"),
        "INTERSTICE_LOG_LEVEL": "warning",
    }
    interstice = shutil.which("interstice", path=str(Path(sys.executable).parent)) or "interstice"
    command = [interstice]
    if slow_solver > 1:
        command = [sys.executable, str(Path(__file__).with_name("slow_serve.py")), str(slow_solver)]
    server = subprocess.Popen(
        [*command, "serve", "--db", db_url, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "serve.log", "wb"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while not _ready(url):
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"interstice serve not ready; see {folder / 'serve.log'}")
            time.sleep(0.2)
        yield Served(url, tokens, folder, server.pid)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        print(json.dumps({"server_log": str(folder / "serve.log")}), flush=True)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=1).is_success
    except httpx.HTTPError:
        return False
