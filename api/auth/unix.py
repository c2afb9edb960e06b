"""Unix accounts as the service host knows them (its passwd database, NSS included): the
owner a token is bound to or a MUNGE credential names, and the lowest uid that may own jobs.
"""

from __future__ import annotations

import pwd
from dataclasses import dataclass


@dataclass(frozen=True)
class UnixAccount:
    """A Unix account: its name and uid."""

    name: str
    uid: int


def refusal(uid: int, min_uid: int) -> str | None:
    """Why ``uid`` may not own jobs (root, or below ``min_uid``, the first uid of people's
    accounts: system accounts such as the service's own or slurm sit below it), or None."""
    if uid == 0:
        return "uid 0 (root) may not own jobs"
    if uid < min_uid:
        return f"uid {uid} is below the minimum uid {min_uid} (INTERSTICE_MUNGE_MIN_UID)"
    return None


def account_of_uid(uid: int) -> UnixAccount | None:
    """The account of ``uid`` on this host, or None when it has none (deleted)."""
    try:
        return UnixAccount(pwd.getpwuid(uid).pw_name, uid)
    except KeyError:
        return None


def resolve(name: str | None, uid: int | None, min_uid: int) -> UnixAccount:
    """The account a token is bound to, from its name, its uid or both.

    A name alone is looked up here; a uid alone likewise. Both given are taken as they are
    when this host has no account of that name (the account lives on the nodes only), and
    must agree when it has.

    Raises:
        ValueError: neither given, unknown here when only one is given, the two disagree,
            or the uid may not own jobs (:func:`refusal`); the message names the field.
    """
    if name is None and uid is None:
        raise ValueError("unix_user: give a Unix user name or uid")
    known = None
    if name is not None:
        try:
            known = pwd.getpwnam(name)
        except KeyError:
            if uid is None:
                raise ValueError(
                    f"unix_user: no account {name!r} on the service host; give its uid too"
                ) from None
    elif uid is not None:
        account = account_of_uid(uid)
        if account is None:
            raise ValueError(f"unix_uid: no account of uid {uid} on the service host")
        name = account.name
    if known is not None:
        if uid is not None and uid != known.pw_uid:
            raise ValueError(f"unix_uid: {name} has uid {known.pw_uid} here, not {uid}")
        uid = known.pw_uid
    assert name is not None and uid is not None
    why = refusal(uid, min_uid)
    if why is not None:
        raise ValueError(f"unix_user: {why}")
    return UnixAccount(name, uid)


def token_account(
    role: str, name: str | None, uid: int | None, min_uid: int, multi_user: bool
) -> UnixAccount | None:
    """The Unix account a new token is bound to (:func:`resolve`), or None (unbound).

    Raises:
        ValueError: the account cannot be resolved; a role other than user or admin given
            one; or, in multi-user mode, a user token given none (the message names the
            field).
    """
    if name is None and uid is None:
        if multi_user and role == "user":
            raise ValueError(
                "unix_user: a user token must be bound to a Unix account in multi-user mode"
            )
        return None
    if role not in ("user", "admin"):
        raise ValueError(f"unix_user: only user and admin tokens act as a Unix account, not {role}")
    return resolve(name, uid, min_uid)
