"""Who a job's processes run as: the owner's Unix account on this node, and the clean
environment a job run as its owner starts from.

A command whose job names an ``owner`` (multi-user mode) runs its launcher and every worker
as that account: its uid, primary gid and supplementary groups (``initgroups``' list,
``os.getgrouplist``), its HOME, umask 077, and an environment of :func:`owner_environment`
plus the job's variables. The switch is Python's own (``subprocess.Popen`` with ``user``,
``group``, ``extra_groups``, ``umask``): the child of a fork drops to the account and execs a
fresh interpreter, so nothing of the agent's memory (its token) reaches the job. Between the
drop and the exec the child still holds the agent's memory, but the kernel makes a process
whose uid changed non-dumpable, so the owner can neither ptrace it nor read its
``/proc/<pid>/mem``; the exec then replaces that memory and makes it the owner's.

Never as root, and never as the agent's own account: an owner of uid 0 is refused, and only
an agent running as root switches accounts (an agent that runs as another account refuses
every owned command, since it could run the job only as itself).

A job without an owner (single-user mode) runs as the agent's account, as it always did.
"""

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass

from interstice.agents.protocol import BadCommand, CommandOwner

from interstice import wire

JOB_UMASK = 0o077
"""The umask of an owner's launcher and workers: their files are 0600, their folders 0700."""

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
"""PATH of an owner's processes where the agent has none."""


@dataclass(frozen=True)
class Account:
    """The Unix account a job runs as on this node (from the node's own user database).

    Attributes:
        name: the user name.
        uid: the user id.
        gid: the primary group id.
        groups: every group id of the account (primary included), as ``initgroups`` sets them.
        home: the home directory (the processes' ``HOME``).
    """

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str


def job_account(owner: CommandOwner | None, node: str) -> Account | None:
    """The account a job of ``owner`` runs as on this node, or None for the agent's own.

    Args:
        owner: the command's ``job.owner``; None in single-user mode.
        node: this node's name (for the messages).

    Returns:
        The owner's account, or None when ``owner`` is None.

    Raises:
        BadCommand: the job cannot run as its owner here. ``job_failed`` only for an owner
            of uid 0, which no node runs; an owner unknown to this node (no passwd entry, or
            another uid than the service's) or an agent that does not run as root is the
            node's fault (``job_failed`` False): the job goes to another node.
    """
    if owner is None:
        return None
    if owner.uid == 0:
        raise BadCommand(f"owner {owner.name!r} is uid 0: no job runs as root", job_failed=True)
    if os.geteuid() != 0:
        raise BadCommand(
            f"node {node}: the agent runs as uid {os.geteuid()}, not root, so it cannot run "
            f"a job as its owner {owner.name!r} (multi-user mode starts the agent as root)"
        )
    try:
        entry = pwd.getpwnam(owner.name)
    except KeyError:
        raise BadCommand(
            f"node {node}: owner {owner.name!r} is unknown here (no passwd entry)"
        ) from None
    if entry.pw_uid != owner.uid:
        raise BadCommand(
            f"node {node}: owner {owner.name!r} is uid {entry.pw_uid} here, "
            f"not uid {owner.uid} as on the service"
        )
    return Account(
        name=entry.pw_name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        groups=tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)),
        home=entry.pw_dir,
    )


def runs_jobs_as_owners() -> bool:
    """Whether this agent runs a job that names an owner as that owner (it runs as root),
    what it says at registration (``runs_as_owner``): in multi-user mode the service
    allocates no job to an agent that does not say so."""
    return os.geteuid() == 0


def owner_environment(account: Account, environ: Mapping[str, str]) -> dict[str, str]:
    """The base environment of a job's processes run as ``account``: PATH (the agent's),
    HOME, USER and LOGNAME of the account, and the Slurm placeholder job's marker (the Epilog
    finds leftover workers by it); nothing else of the agent's environment.

    Args:
        account: the owner's account.
        environ: the agent's environment.

    Returns:
        A new mapping; the launcher adds the job's variables and torch adds its own.
    """
    base = {
        "PATH": environ.get("PATH") or DEFAULT_PATH,
        "HOME": account.home,
        "USER": account.name,
        "LOGNAME": account.name,
    }
    if wire.ENV_SLURM_JOB_MARKER in environ:
        base[wire.ENV_SLURM_JOB_MARKER] = environ[wire.ENV_SLURM_JOB_MARKER]
    return base


def popen_identity(account: Account | None) -> dict[str, object]:
    """The ``subprocess.Popen`` arguments that run a child as ``account`` (none for the
    agent's own): uid, primary gid, every group, umask :data:`JOB_UMASK`, cwd ``/`` (the
    child changes to the job's folder itself, as the owner: ``Popen`` changes its cwd before
    it drops root)."""
    if account is None:
        return {}
    return {
        "user": account.uid,
        "group": account.gid,
        "extra_groups": list(account.groups),
        "umask": JOB_UMASK,
        "cwd": "/",
    }


def file_uid(account: Account | None) -> int:
    """The uid that owns the files a job run as ``account`` writes (the agent's for None)."""
    return os.geteuid() if account is None else account.uid


def file_gid(account: Account | None) -> int:
    """The primary group of the account a job runs as (the agent's for None)."""
    return os.getegid() if account is None else account.gid
