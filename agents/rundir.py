"""The files one job's workers and their node agent share on the node: the run directory.

The agent and its workers talk through a few small files in ``<workdir>/<job_id>/``
(``interstice.wire`` names them) rather than a socket, so either side may restart without the
other noticing:

- ``stop``: created by the agent to ask the workers to checkpoint and exit (a rescale, a
  stop command, a preemption; SIGTERM says the same); removed before a new generation.
- ``progress-<local_rank>.json``: written atomically by ``interstice.elastic.report`` at its
  report rate: what the agent heartbeats to the service. A script that never reports has
  none; the agent judges joining and ending from torch elastic itself, never from these.
- ``steps-<node>-<local_rank>.jsonl``: the built-in worker's step log, one line per optimizer
  step and one per exit (the end-to-end test reads it).
- ``launcher-<n>.result.json``: how the launcher's generation ended
  (:mod:`interstice.agents.outcome`).

The run directory belongs to the account the job runs as (its owner in multi-user mode), so
the agent, which may run as root, treats its content as the job's: it creates the folder in
its own workdir (:func:`prepare`), creates the stop file without following or opening
anything that exists (:func:`request_stop`), and reads the job's files only through
:func:`read_job_file`, which follows no link and reads only regular files of the job's uid.
"""

import json
import os
import stat
from pathlib import Path
from typing import Any

from interstice.agents.protocol import BadCommand

from interstice import wire

MAX_READ_BYTES = 1 << 20
"""The most the agent reads of one file a job wrote (a progress or result file)."""


def read_job_file(path: Path, uid: int, tail_bytes: int | None = None) -> bytes | None:
    """The content of a file a job wrote, read so that the job cannot make the agent read
    anything else.

    The last path component is opened with ``O_NOFOLLOW`` (a link is refused) and
    ``O_NONBLOCK`` (a FIFO never blocks the agent); the file must be a regular file owned by
    ``uid``: a link anywhere in the path, or a hard link, to a file of another account (root's,
    another user's) is refused, so the job reads through the agent only what it could read
    itself.

    Args:
        path: the file.
        uid: the account the job runs as (:func:`interstice.agents.owner.file_uid`).
        tail_bytes: read only the file's last this many bytes; None: its first
            :data:`MAX_READ_BYTES`.

    Returns:
        The bytes, or None when the file is absent, not a regular file of ``uid``, or
        unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_uid != uid:
            return None
        limit = MAX_READ_BYTES
        if tail_bytes is not None:
            limit = tail_bytes
            os.lseek(fd, max(0, status.st_size - tail_bytes), os.SEEK_SET)
        chunks = []
        while limit > 0 and (chunk := os.read(fd, min(limit, 65536))):
            chunks.append(chunk)
            limit -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_json(path: Path, uid: int) -> dict[str, Any] | None:
    """The JSON mapping in ``path`` (a file of the job run as ``uid``, see
    :func:`read_job_file`), or None when it is absent, unreadable or not a mapping."""
    content = read_job_file(path, uid)
    try:
        payload = json.loads(content) if content is not None else None
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def read_progress(run_dir: Path, uid: int) -> list[dict[str, Any]]:
    """Every readable progress file in ``run_dir`` (of the job run as ``uid``), in
    local-rank order."""
    found = (read_json(path, uid) for path in sorted(run_dir.glob(wire.PROGRESS_GLOB)))
    return [progress for progress in found if progress is not None]


def prepare(run_dir: Path, uid: int, gid: int) -> None:
    """Make ``run_dir`` (``<workdir>/<job_id>``) a folder of the job's account, mode 0700.

    For a job of another account, the agent's workdir must belong to the agent and be
    writable by it alone, so that no job can replace the run directory by a link: every later
    access of the agent through ``run_dir`` then reaches this folder. The folder is made (or
    opened) without following a link and given to the job's account through its descriptor.

    Args:
        run_dir: the job's run directory, directly inside the agent's workdir.
        uid: the account the job runs as.
        gid: its primary group.

    Raises:
        BadCommand: the node's fault (``job_failed`` False): the workdir is writable by others
            or not the agent's, or the run directory is not a folder of the job's account or
            the agent's.
    """
    workdir = run_dir.parent
    workdir.mkdir(parents=True, exist_ok=True)
    workdir_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        status = os.fstat(workdir_fd)
        shared = status.st_uid != os.geteuid() or status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if uid != os.geteuid() and shared:  # (a job of the agent's own account could anyway)
            raise BadCommand(
                f"the agent's workdir {str(workdir)!r} must belong to uid {os.geteuid()} and "
                f"be writable by it alone (it is uid {status.st_uid}, mode "
                f"{stat.S_IMODE(status.st_mode):04o})"
            )
        try:
            os.mkdir(run_dir.name, 0o700, dir_fd=workdir_fd)
        except FileExistsError:
            pass
        try:
            fd = os.open(
                run_dir.name,
                os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=workdir_fd,
            )
        except OSError as error:
            raise BadCommand(f"run directory {str(run_dir)!r}: {error.strerror}") from error
    finally:
        os.close(workdir_fd)
    try:
        owner = os.fstat(fd).st_uid
        if owner not in (uid, os.geteuid()):
            raise BadCommand(f"run directory {str(run_dir)!r} belongs to uid {owner}")
        if owner != uid:
            os.fchown(fd, uid, gid)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def request_stop(run_dir: Path, uid: int, gid: int) -> None:
    """Create the stop file in ``run_dir`` (prepared by :func:`prepare`), owned by the job's
    account.

    The file is created new (``O_CREAT | O_EXCL | O_NOFOLLOW``: whatever already has the name,
    a link included, is neither followed nor opened, and counts as there) and given to the
    job's account through its descriptor, so an agent running as root writes nothing a job
    could have pointed elsewhere.

    Args:
        run_dir: the job's run directory.
        uid: the account the job runs as.
        gid: its primary group.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(wire.stop_path(run_dir), flags, 0o600)
    except FileExistsError:
        return
    try:
        if os.fstat(fd).st_uid != uid:
            os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def clear(run_dir: Path) -> None:
    """Remove the stop file and the last generation's progress before a new generation
    (``unlink`` follows no link)."""
    for path in [wire.stop_path(run_dir), *run_dir.glob(wire.PROGRESS_GLOB)]:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass  # e.g. a folder of that name: the job's own doing, and its own loss


def steps_path(run_dir: Path, node: str, local_rank: int) -> Path:
    """Where the built-in worker of ``local_rank`` on ``node`` appends its step log."""
    return run_dir / f"steps-{node}-{local_rank}.jsonl"


def json_line(payload: dict[str, Any]) -> str:
    """``payload`` as one JSON line (for append-only logs)."""
    return json.dumps(payload) + "\n"
