"""A real munged for the tests, with a key and a socket of its own, and Unix accounts to make
credentials as.

:func:`start_munged` starts munged in a folder (its key, socket, pid and seed files there) and
answers a :class:`MungeDaemon` that makes credentials as any account (``runuser``) and stops
it by its pid. :func:`unix_account` creates a throw-away account (``useradd``) and removes it
after. Both skip, saying why, where munge is not installed or the test is not root.

The fixtures ``daemon`` (one munged per module, :func:`daemon_fixture`) and ``alice`` (one
account per module, :func:`alice_fixture`) serve the test modules that import them.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

MUNGE_BINARIES = ("munged", "munge", "unmunge")
STOP_TIMEOUT_S = 10.0


def require_munge() -> None:
    """Skip, saying why, where munge is absent or the test is not root (munged's key must
    be root's, and the tests create accounts)."""
    missing = [name for name in MUNGE_BINARIES if shutil.which(name) is None]
    if missing:
        pytest.skip(f"munge not installed ({', '.join(missing)} absent): apt-get install munge")
    if os.geteuid() != 0:
        pytest.skip("the MUNGE tests run munged and create Unix accounts, which needs root")


@dataclass
class MungeDaemon:
    """A running munged.

    Attributes:
        folder: its files: ``munge.key``, ``munge.socket``, ``munged.pid``, ``munged.seed``.
        log_file: its log.
    """

    folder: Path
    log_file: Path

    @property
    def socket(self) -> Path:
        return self.folder / "munge.socket"

    @property
    def pid_file(self) -> Path:
        return self.folder / "munged.pid"

    def credential(self, user: str | None = None, ttl_s: int | None = None) -> str:
        """A credential of ``user`` (None: this process's, root) from this munged."""
        command = ["munge", "--no-input", f"--socket={self.socket}"]
        if ttl_s is not None:
            command.append(f"--ttl={ttl_s}")
        if user is not None:
            command = ["runuser", "-u", user, "--", *command]
        made = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
        return made.stdout.strip()

    def stop(self) -> None:
        """Stop munged by its pid and wait until it is gone."""
        if not self.pid_file.is_file():
            return
        pid = int(self.pid_file.read_text())
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def start_munged(
    folder: Path, log_file: Path | None = None, key: bytes | None = None
) -> MungeDaemon:
    """Start munged with its files in ``folder`` (created, mode 0755 so that other accounts
    reach the socket; the key stays 0600).

    Args:
        folder: where the key, socket, pid and seed files go.
        log_file: munged's log; None: ``folder/munged.log``.
        key: the key's bytes; None: 1,024 random bytes.

    Raises:
        pytest.skip.Exception: munge is not installed, not root, or munged will not start.
    """
    require_munge()
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    daemon = MungeDaemon(folder, log_file or folder / "munged.log")
    key_file = folder / "munge.key"
    key_file.write_bytes(key if key is not None else os.urandom(1024))
    key_file.chmod(0o600)
    started = subprocess.run(
        [
            "munged",
            "--force",
            f"--socket={daemon.socket}",
            f"--key-file={key_file}",
            f"--pid-file={daemon.pid_file}",
            f"--log-file={daemon.log_file}",
            f"--seed-file={folder / 'munged.seed'}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if started.returncode != 0:
        pytest.skip(f"munged cannot start here: {started.stderr.strip()}")
    return daemon


@contextmanager
def munged(folder: Path, key: bytes | None = None) -> Iterator[MungeDaemon]:
    """:func:`start_munged` until the block ends, then stopped."""
    daemon = start_munged(folder, key=key)
    try:
        yield daemon
    finally:
        daemon.stop()


@contextmanager
def munged_in_tmp(prefix: str) -> Iterator[MungeDaemon]:
    """:func:`munged` in a new folder under /tmp, which test accounts can reach (pytest's own
    temporary folders are root's alone); the folder is removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with munged(folder) as running:
            yield running
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def unix_account(prefix: str, system: bool = False) -> Iterator[pwd.struct_passwd]:
    """A new Unix account ``<prefix>-<6 hex digits>`` until the block ends, then removed.

    Args:
        prefix: the name's start (the suffix keeps concurrent test runs apart).
        system: a system account (a uid below ``UID_MIN``, 1000 on Debian).
    """
    require_munge()
    name = f"{prefix}-{secrets.token_hex(3)}"
    subprocess.run(
        ["useradd", *(["--system"] if system else []), "--no-create-home", name],
        capture_output=True,
        timeout=30,
        check=True,
    )
    try:
        yield pwd.getpwnam(name)
    finally:
        remove_account(name)


def remove_account(name: str) -> None:
    """``userdel`` the account (nothing when it is already gone)."""
    subprocess.run(["userdel", name], capture_output=True, timeout=30, check=False)


@pytest.fixture(scope="module", name="daemon")
def daemon_fixture() -> Iterator[MungeDaemon]:
    """munged in a folder under /tmp for the module's tests (see :func:`munged_in_tmp`)."""
    with munged_in_tmp("interstice-munge-") as running:
        yield running


@pytest.fixture(scope="module", name="alice")
def alice_fixture() -> Iterator[pwd.struct_passwd]:
    """A throw-away account ``alice-<hex>`` for the module's tests."""
    with unix_account("alice") as account:
        yield account
