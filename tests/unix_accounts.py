"""Unix accounts for the tests of jobs that run as their owners (root only): alice, with a
supplementary group, and bob; and a shared folder laid out as a cluster's."""

import functools
import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

USERS = ("alice", "bob")
EXTRA_GROUP = "interstice-test"  # a supplementary group of alice's
NAME_IN_USE = 9  # the exit code of useradd and groupadd for a name that exists


@contextmanager
def owner_accounts() -> Iterator[dict[str, pwd.struct_passwd]]:
    """alice and bob, created with useradd and removed afterwards (accounts that exist
    already are used and kept). Skips the test where this is not root, where useradd or
    runuser is missing, or where the accounts cannot run this interpreter with torch (it
    must lie in folders other accounts may read, not under root's 0700 home)."""
    if os.geteuid() != 0:
        pytest.skip("runs jobs as other accounts: needs root")
    if shutil.which("useradd") is None or shutil.which("runuser") is None:
        pytest.skip("useradd and runuser are needed to create and use test accounts")
    created_users: list[str] = []
    granted: list[tuple[Path, list[str]]] = []
    created_group = False
    try:
        try:
            grp.getgrnam(EXTRA_GROUP)
        except KeyError:
            added = subprocess.run(["groupadd", EXTRA_GROUP], capture_output=True, text=True)
            assert added.returncode in (0, NAME_IN_USE), added.stderr
            created_group = added.returncode == 0
        for name in USERS:
            try:
                pwd.getpwnam(name)
            except KeyError:
                groups = ["--groups", EXTRA_GROUP] if name == "alice" else []
                added = subprocess.run(
                    ["useradd", "--create-home", "--user-group", *groups, name],
                    capture_output=True,
                    text=True,
                )
                if added.returncode != NAME_IN_USE:  # (another test made it meanwhile)
                    assert added.returncode == 0, added.stderr
                    created_users.append(name)
        granted = grant_traversal(USERS)
        error = probe_error()
        if error is not None:
            pytest.skip(
                f"alice cannot run {sys.executable} with torch and interstice "
                f"(its folders must be readable by other accounts): {error}"
            )
        yield {name: pwd.getpwnam(name) for name in USERS}
    finally:
        for folder, names in granted:
            entries = ",".join(f"u:{name}" for name in names)
            subprocess.run(["setfacl", "-x", entries, str(folder)], capture_output=True)
        for name in created_users:
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        if created_group:
            subprocess.run(["groupdel", EXTRA_GROUP], capture_output=True)


@functools.cache
def probe_error() -> str | None:
    """Why alice cannot import torch and interstice with this interpreter (the end of its
    stderr), or None where she can. Asked once per test session (the import took up to 25 s
    on a loaded 2-core VM): :func:`grant_traversal` opens the same folders each time."""
    probe = subprocess.run(
        ["runuser", "-u", "alice", "--", sys.executable, "-c", "import torch, interstice"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    return None if probe.returncode == 0 else probe.stderr[-300:]


def grant_traversal(names: tuple[str, ...]) -> list[tuple[Path, list[str]]]:
    """Let the accounts ``names`` pass through the folders above this interpreter and the
    installed packages (a checkout or interpreter under a 0700 folder such as root's home or
    a ``mktemp -d``), with an ACL entry ``u:NAME:x`` on each folder that others may not pass
    and that has no entry for that account yet.

    Returns:
        ``(folder, names given an entry there)`` pairs, for the caller to remove; none where
        ``setfacl`` is missing.
    """
    if shutil.which("setfacl") is None:
        return []
    import torch

    import interstice

    paths = {Path(sys.executable).resolve(), Path(sys.prefix).resolve()}
    paths |= {Path(module.__file__).resolve() for module in (interstice, torch)}
    folders = sorted({parent for path in paths for parent in path.parents})
    granted = []
    for folder in folders:
        if folder.stat().st_mode & stat.S_IXOTH:
            continue
        acl = subprocess.run(["getfacl", "-c", str(folder)], capture_output=True, text=True)
        names_missing = [name for name in names if f"user:{name}:" not in acl.stdout]
        if names_missing:
            entries = ",".join(f"u:{name}:x" for name in names_missing)
            subprocess.run(["setfacl", "-m", entries, str(folder)], check=True)
            granted.append((folder, names_missing))
    return granted


@contextmanager
def shared_folder(
    accounts: dict[str, pwd.struct_passwd], user_folders: bool = True
) -> Iterator[Path]:
    """A folder like a cluster's shared filesystem, removed afterwards: ``code/`` (readable
    by all), ``checkpoints/`` (the checkpoint root, root's 0755) with one 0700 folder per
    user that the admin made (none without ``user_folders``: the agents make them)."""
    root = Path(tempfile.mkdtemp(prefix="interstice-owners-", dir="/tmp"))
    root.chmod(0o755)
    try:
        (root / "code").mkdir(mode=0o755)
        (root / "checkpoints").mkdir(mode=0o755)
        for name, entry in accounts.items() if user_folders else ():
            folder = root / "checkpoints" / name
            folder.mkdir(mode=0o700)
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
