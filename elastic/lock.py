"""One run of a job at a time in its checkpoint folder.

A run's workers may still be stopping (finishing their step, agreeing to stop, saving) after
the process that started them is gone: ``torchrun`` starts each worker in a session of its
own and exits on a second SIGTERM or SIGINT while they go on, and GNU ``timeout``, Slurm and
process managers signal whole process groups, so it gets that second signal. A run started
then would find no checkpoint, or an older one, and train the same samples again.

So every worker holds a shared ``flock`` on ``<checkpoint_dir>/workers.lock`` for as long as
it lives (the kernel drops it when the process ends, however it ends, SIGKILL included), and
rank 0 of a new run first takes it exclusively: it waits, saying what for, until every
worker of the earlier runs has exited; then the run's other ranks, held in a barrier
meanwhile, take their shared locks. A checkpoint folder whose file system refuses locks is
used without one (with a warning).
"""

import errno
import fcntl
import logging
import os
import time
from pathlib import Path

import torch.distributed as dist

logger = logging.getLogger(__name__)

LOCK_FILE = "workers.lock"
UNSUPPORTED_ERRNOS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})

_held: dict[Path, int] = {}  # checkpoint folder -> the descriptor this process locks it with


def hold(folder: Path) -> None:
    """Lock ``folder`` for this run's workers, once every earlier run's worker has exited.

    Call it on every rank (it runs a barrier); a process that holds the folder already
    returns at once. Rank 0 waits as long as a worker of an earlier run lives, logging a
    warning that names the lock file and the pids on this node that hold it; the other ranks
    wait in the barrier, so at most the process group's timeout.

    Args:
        folder: the job's checkpoint folder (created, mode 0700, if missing).

    Raises:
        OSError: the folder or its lock file cannot be created or opened.
        torch.distributed.DistBackendError: the barrier timed out (rank 0 waited longer
            than the process group's timeout).
    """
    key = folder.resolve()
    if key in _held:
        return
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / LOCK_FILE
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    locking = True
    if dist.get_rank() == 0:
        locking = _lock(descriptor, path, fcntl.LOCK_EX, announce=True)
        locking = locking and _lock(descriptor, path, fcntl.LOCK_SH)
    dist.barrier()
    if dist.get_rank() != 0:
        locking = _lock(descriptor, path, fcntl.LOCK_SH)
    if locking:
        _held[key] = descriptor  # open until the process ends: the lock lives as long
    else:
        os.close(descriptor)


def _lock(descriptor: int, path: Path, operation: int, announce: bool = False) -> bool:
    """``flock(descriptor, operation)``, waiting while another process's lock is in the way
    (with ``announce``, after a warning saying what for). False (and a warning) when the
    file system refuses locks."""
    try:
        try:
            fcntl.flock(descriptor, operation | fcntl.LOCK_NB)
        except BlockingIOError:
            started = time.monotonic()
            if announce:
                pids = ", ".join(map(str, holders(descriptor))) or "none on this node"
                logger.warning(
                    "waiting for the workers of an earlier run to exit (pids %s hold %s): "
                    "a run starts only once they saved their checkpoint",
                    pids,
                    path,
                )
            fcntl.flock(descriptor, operation)
            if announce:
                waited_s = time.monotonic() - started
                logger.warning("%s is free after %.1f s: starting", path, waited_s)
    except OSError as error:
        if error.errno not in UNSUPPORTED_ERRNOS:
            raise
        logger.warning("%s: no lock (%s): runs of this job are not kept apart", path, error)
        return False
    return True


def holders(descriptor: int) -> list[int]:
    """The pids on this node that hold a ``flock`` on the file open as ``descriptor``,
    from ``/proc/locks`` (empty where it cannot be read)."""
    inode = os.fstat(descriptor).st_ino
    pids = set()
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        # "1: FLOCK  ADVISORY  READ  1234 08:01:56789 0 EOF"; a waiter has "->" after "1:"
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].endswith(f":{inode}"):
            pids.add(int(fields[4]))
    return sorted(pids - {os.getpid()})
