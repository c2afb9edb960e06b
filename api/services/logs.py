"""Reading one rank's log of a job: its files of every generation, oldest first
(:func:`interstice.wire.rank_log_files`), read as one byte stream on the service's view of
the shared filesystem.

A job of a Unix owner (multi-user mode) keeps its logs in a folder its owner controls, who
could plant a symbolic or hard link there to a file only the service may read. Such a job's
logs are read through :class:`Owned`: every folder below ``checkpoint_root`` is opened
without following a link (``O_NOFOLLOW``, relative to the folder above) and must belong to
the owner or root, and every log file must be a regular file of the owner's, checked on the
open file (``fstat``), so nothing can be swapped between the check and the read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from interstice.wire import LOGS_DIRNAME, generation_of, rank_log_files

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class Owned:
    """How to read the logs of a job with a Unix owner.

    Attributes:
        root: ``checkpoint_root`` (the admin's; followed as it is), under which the job's
            folder lies.
        uid: the owner's uid: the only owner (besides root) of a folder below ``root``, and
            the only owner of a log file.
    """

    root: Path
    uid: int


def read_rank_log(
    job_dir: str | Path,
    rank: int,
    *,
    tail: int,
    offset: int | None,
    max_bytes: int,
    owner: Owned | None = None,
) -> tuple[bytes, int] | None:
    """A piece of global ``rank``'s log, all generations concatenated.

    Args:
        job_dir: the job's directory.
        rank: global rank.
        tail: with ``offset`` None, the last ``tail`` lines (within the last ``max_bytes``).
        offset: byte offset in the concatenated log to read from (at most ``max_bytes``);
            an offset beyond the end reads nothing from the end.
        max_bytes: most bytes read.
        owner: the job's owner (multi-user mode): only its own files are read (see the
            module docstring); None: the files are the service's or the agent's.

    Returns:
        The bytes and their offset in the concatenated log, or None when the rank has no
        log file yet (or, with ``owner``, none that passes the checks).
    """
    with ExitStack() as stack:
        if owner is None:
            files = [stack.enter_context(path.open("rb")) for path in rank_log_files(job_dir, rank)]
        else:
            files = stack.enter_context(_owned_logs(Path(job_dir), rank, owner))
        if not files:
            return None
        sizes = [os.fstat(f.fileno()).st_size for f in files]
        total = sum(sizes)
        if offset is None:
            start = max(0, total - max_bytes)
            lines = _read(files, sizes, start, total).splitlines(keepends=True)
            data = b"".join(lines[-tail:]) if tail else b""
            return data, total - len(data)
        start = min(offset, total)
        return _read(files, sizes, start, min(total, start + max_bytes)), start


@contextmanager
def _owned_logs(job_dir: Path, rank: int, owner: Owned) -> Iterator[list[BinaryIO]]:
    """The open log files of ``rank`` that pass :class:`Owned`'s checks, oldest generation
    first (as :func:`interstice.wire.rank_log_files` orders them)."""
    try:
        below = job_dir.relative_to(owner.root)
    except ValueError:  # not under checkpoint_root (the setting changed): read nothing
        yield []
        return
    fds: list[int] = []
    files: list[BinaryIO] = []
    try:
        folder = _open_folder(_openat(str(owner.root), -2, _DIR_FLAGS), fds)
        for name in (*below.parts, LOGS_DIRNAME):
            folder = _open_folder(_openat(name, folder, _DIR_FLAGS), fds, owner.uid)
        found = []
        for name in os.listdir(folder) if folder >= 0 else []:
            generation = _open_folder(_openat(name, folder, _DIR_FLAGS), fds, owner.uid)
            log = _openat(f"rank-{rank}.log", generation, _FILE_FLAGS)
            if log < 0:
                continue
            fds.append(log)
            info = os.fstat(log)
            if stat.S_ISREG(info.st_mode) and info.st_uid == owner.uid:
                found.append(((generation_of(name) or -1, name), log))
        for _, log in sorted(found):
            files.append(os.fdopen(os.dup(log), "rb"))
        yield files
    finally:
        for f in files:
            f.close()
        for fd in fds:
            os.close(fd)


def _openat(name: str, folder: int, flags: int) -> int:
    """``name`` opened in the open folder ``folder`` (-2: an absolute ``name``), or -1
    (absent, a link, not a folder where one is wanted, or ``folder`` itself is -1)."""
    if folder == -1:
        return -1
    try:
        return os.open(name, flags, dir_fd=None if folder == -2 else folder)
    except OSError:
        return -1


def _open_folder(fd: int, fds: list[int], uid: int | None = None) -> int:
    """``fd`` (kept in ``fds`` to close) when it is -1 or a folder of root or ``uid`` (None:
    any owner), else -1."""
    if fd < 0:
        return -1
    fds.append(fd)
    if uid is not None and os.fstat(fd).st_uid not in (0, uid):
        return -1
    return fd


def _read(files: list[BinaryIO], sizes: list[int], start: int, end: int) -> bytes:
    """Bytes [start, end) of the concatenation of ``files`` (of ``sizes`` bytes each)."""
    pieces = []
    at = 0
    for f, size in zip(files, sizes, strict=True):
        lo, hi = max(start, at), min(end, at + size)
        if lo < hi:
            f.seek(lo - at)
            pieces.append(f.read(hi - lo))
        at += size
    return b"".join(pieces)
