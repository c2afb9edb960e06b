"""The owner's folder in the checkpoint root, ``<checkpoint_root>/<user>``: made by the agent
(root) when it is missing, so that an admin need not make one per user.

In multi-user mode a job's directory is ``<checkpoint_root>/<user>/<job_id>``, and the owner's
launcher makes it as the owner (:func:`interstice.agents.launcher_process.prepare_job_dir`).
The owner cannot create ``<user>`` in a checkpoint root that only root may change, so the
agent makes it first, without ever writing where another account could:

- only in a checkpoint root that belongs to root and that no group or other account may
  write, each folder above it root's and writable by no one else unless sticky (as ``/tmp``,
  the rule of OpenSSH's ``StrictModes``): nobody but root can plant anything there. In any
  other checkpoint root a missing folder is refused as the node's fault;
- ``mkdir`` with mode 0700 relative to the checkpoint root's descriptor, then the folder is
  opened without following a link and given to the owner (uid, primary gid) through that
  descriptor (``fchown``), so no link can redirect the change of owner;
- a folder found there (the admin's) must be a real folder, not a link, and the owner's. One
  of root's that appears while the agent makes it (another node's agent on the same shared
  checkpoint root, between its ``mkdir`` and its ``fchown``) is given to the owner as well.

A job directory whose parent is not named after the owner (a job directory elsewhere) is
left to the owner's launcher: nothing is made.
"""

import errno
import os
import stat
from pathlib import Path

from interstice.agents.owner import Account
from interstice.agents.protocol import BadCommand

SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH


def ensure_user_folder(job_dir: str, account: Account | None, node: str) -> bool:
    """Make ``<checkpoint_root>/<user>`` for a job of ``account`` when it is missing: mode
    0700, owned by the account's uid and primary gid.

    Args:
        job_dir: the command's ``job.job_dir``, ``<checkpoint_root>/<user>/<job_id>``.
        account: the owner's account on this node; None (single-user mode) makes nothing.
        node: this node's name (for the messages).

    Returns:
        Whether the folder was made (or given to the owner) now.

    Raises:
        BadCommand: the node's fault (``job_failed`` False): the checkpoint root cannot be
            opened, or the folder is missing and the checkpoint root (or a folder above it)
            may be changed by another account than root, or it cannot be made (e.g. a
            filesystem that maps root to nobody); or the folder is a link, not a folder,
            or belongs to another account.
    """
    if account is None:
        return False
    folder = Path(job_dir).parent
    if folder.name != account.name:
        return False
    root = folder.parent
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise BadCommand(f"node {node}: checkpoint root {str(root)!r}: {error.strerror}") from None
    try:
        try:
            found = os.stat(folder.name, dir_fd=root_fd, follow_symlinks=False)
        except FileNotFoundError:
            found = None
        making = found is None
        if making:
            _check_only_root_writes(root, root_fd, account, node)
            try:
                os.mkdir(folder.name, 0o700, dir_fd=root_fd)
            except FileExistsError:
                pass  # made meanwhile: checked below like any folder found there
            except OSError as error:
                raise BadCommand(
                    f"node {node}: cannot make {account.name}'s folder {str(folder)!r}: "
                    f"{error.strerror}"
                ) from None
        fd = _open_folder(folder, root_fd, node)
    finally:
        os.close(root_fd)
    try:
        owner = os.fstat(fd).st_uid
        if owner == account.uid:
            return making
        if making and owner == 0:
            os.fchown(fd, account.uid, account.gid)
            os.fchmod(fd, 0o700)
            return True
        raise BadCommand(
            f"node {node}: {str(folder)!r} belongs to uid {owner}, not to {account.name} "
            f"(uid {account.uid}), whose jobs' folders it holds"
        )
    finally:
        os.close(fd)


def _check_only_root_writes(root: Path, root_fd: int, account: Account, node: str) -> None:
    """Raise BadCommand unless the checkpoint root (``root_fd``) belongs to root and is
    writable by root alone, and each folder above it belongs to root and is writable by no
    one else unless sticky."""
    status = os.fstat(root_fd)
    if status.st_uid != 0 or status.st_mode & SHARED_WRITE:
        raise BadCommand(
            f"node {node}: {account.name}'s folder {str(root / account.name)!r} is missing, "
            f"and the agent makes it only in a checkpoint root that belongs to root and is "
            f"writable by root alone ({str(root)!r} is uid {status.st_uid}, mode "
            f"{stat.S_IMODE(status.st_mode):04o})"
        )
    for parent in Path(os.path.realpath(root)).parents:
        above = os.stat(parent)
        shared = above.st_mode & SHARED_WRITE and not above.st_mode & stat.S_ISVTX
        if above.st_uid != 0 or shared:
            raise BadCommand(
                f"node {node}: {account.name}'s folder {str(root / account.name)!r} is "
                f"missing, and the checkpoint root lies in {str(parent)!r} (uid "
                f"{above.st_uid}, mode {stat.S_IMODE(above.st_mode):04o}), which another "
                f"account than root may change"
            )


def _open_folder(folder: Path, root_fd: int, node: str) -> int:
    """A descriptor of ``folder`` (in the checkpoint root ``root_fd``), opened without
    following a link; BadCommand for a link or anything but a folder."""
    try:
        return os.open(
            folder.name,
            os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
            dir_fd=root_fd,
        )
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise BadCommand(f"node {node}: {str(folder)!r}: {error.strerror}") from None
        kind = "a link" if os.path.islink(folder) else "not a folder"
        raise BadCommand(
            f"node {node}: {str(folder)!r} is {kind}: the owner's folder must be a real folder"
        ) from None
