"""MUNGE credentials on the service: ``Authorization: MUNGE <credential>`` names a Unix user.

The credential is decoded by munged (the ``unmunge`` command, on the service host, with the
key every host of the cluster shares), which checks its MAC, its TTL and that it was never
decoded before; nothing here checks a credential itself. The uid it names is then refused
when it is 0 or below ``munge_min_uid``, or has no account on this host (deleted); otherwise
it is the caller, with the ``user`` role, as the principal row of its uid
(:func:`interstice.api.auth.tokens.munge_principal`).

A refused credential answers 401 with munged's reason ("Expired credential", "Replayed
credential", "Invalid credential", ...) and is written to the audit log (action
``request.refused``, ``auth: munge``), at most one row per uid and reason per
:data:`~interstice.api.auth.tokens.REFUSAL_AUDIT_EVERY_S` (the row counts the refusals it
covers). munged not answering is the service's trouble, not the caller's: 503.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

from interstice.api.auth import unix
from interstice.api.auth.tokens import REFUSAL_AUDIT_EVERY_S, Principal, munge_principal
from interstice.api.store.db import Database
from interstice.api.store.tables import AuditEntry
from sqlalchemy.exc import IntegrityError

from interstice.munge import MungeUnavailable, credential

TIMEOUT_S = 10.0
"""Longest wait for ``unmunge``, seconds."""
CREDENTIAL_MAX_CHARS = 4096
"""Longest credential accepted (one without payload has about 120 characters)."""
UNAVAILABLE = {1, 5, 6, 7}
"""unmunge's exit statuses that are munged's trouble, not the credential's (``munge_err_t``:
EMUNGE_SNAFU, EMUNGE_NO_MEMORY, EMUNGE_SOCKET, EMUNGE_TIMEOUT)."""
_FIELD = re.compile(r"^([A-Z_]+):\s*(.*?)\s*$")
_UID = re.compile(r"(?:^|\()(\d+)\)?$")


class MungeRefused(Exception):
    """The credential names no acceptable caller.

    Attributes:
        reason: munged's status, or why the uid is refused (one line).
        uid: the uid it names, when munged could tell.
    """

    def __init__(self, reason: str, uid: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.uid = uid


def unmunge(credential: str, socket: Path | None) -> int:
    """The uid a credential names, as munged decodes it (this decodes it: a second call with
    the same credential is refused as replayed).

    Args:
        credential: the credential's text.
        socket: munged's socket; None: munged's default.

    Raises:
        MungeRefused: munged refused it (its status as the reason, and the uid when known).
        MungeUnavailable: ``unmunge`` is missing, munged does not answer, or fails.
    """
    command = ["unmunge", "--keys=STATUS,UID", "--output=/dev/null"]
    if socket is not None:
        command.append(f"--socket={socket}")
    try:
        decoded = subprocess.run(
            command,
            input=credential,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise MungeUnavailable("the unmunge command is not installed") from None
    except subprocess.TimeoutExpired:
        raise MungeUnavailable(f"unmunge did not answer within {TIMEOUT_S:g} s") from None
    fields = dict(m.groups() for m in map(_FIELD.match, decoded.stdout.splitlines()) if m)
    found = _UID.search(fields.get("UID", ""))
    uid = int(found.group(1)) if found else None
    if decoded.returncode == 0 and uid is not None:
        return uid
    reason = re.sub(r"\s*\(\d+\)$", "", fields.get("STATUS", "")) or " ".join(
        decoded.stderr.split()
    ).removeprefix("unmunge: Error: ")
    reason = reason or f"unmunge exited with status {decoded.returncode}"
    if decoded.returncode in UNAVAILABLE:
        raise MungeUnavailable(reason)
    raise MungeRefused(reason, uid)


def check_daemon(socket: Path | None) -> None:
    """Make and decode one credential, as the service's start-up check that munged runs.

    Raises:
        MungeUnavailable: ``munge``/``unmunge`` missing, or munged does not answer (why).
    """
    made = credential(str(socket) if socket else None)
    try:
        unmunge(made, socket)
    except MungeRefused as exc:
        raise MungeUnavailable(f"munged refuses its own credential: {exc.reason}") from None


class MungeGate:
    """The MUNGE check of the running service (see the module docstring).

    Args:
        db: the database (principals, audit log).
        socket: munged's socket; None: munged's default.
        min_uid: lowest uid accepted.
    """

    def __init__(self, db: Database, socket: Path | None, min_uid: int) -> None:
        self.db = db
        self.socket = socket
        self.min_uid = min_uid
        self._principals: dict[tuple[int, str], Principal] = {}
        self._refusals: dict[tuple[int | None, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def principal(self, credential: str, method: str, path: str) -> Principal:
        """The caller a credential names (blocking: run it in a worker thread).

        Raises:
            MungeRefused: forged, expired, replayed or malformed; uid 0, below the minimum
                or with no account here (audited).
            MungeUnavailable: munged does not answer.
        """
        try:
            if len(credential) > CREDENTIAL_MAX_CHARS:
                raise MungeRefused(f"credential longer than {CREDENTIAL_MAX_CHARS} characters")
            uid = unmunge(credential, self.socket)
            why = unix.refusal(uid, self.min_uid)
            if why is not None:
                raise MungeRefused(why, uid)
            account = unix.account_of_uid(uid)
            if account is None:
                raise MungeRefused(f"uid {uid} has no account on the service host", uid)
        except MungeRefused as exc:
            self.refused(exc, method, path)
            raise
        return self._principal(account)

    def _principal(self, account: unix.UnixAccount) -> Principal:
        key = (account.uid, account.name)
        known = self._principals.get(key)
        if known is None:
            try:
                known = munge_principal(self.db, account)
            except IntegrityError:  # another replica created the row meanwhile
                known = munge_principal(self.db, account)
            self._principals[key] = known
        return known

    def refused(self, exc: MungeRefused, method: str, path: str) -> None:
        """Audit a refused credential, throttled per uid and reason (see module)."""
        now = time.monotonic()
        key = (exc.uid, exc.reason)
        with self._lock:
            last, count = self._refusals.get(key, (-REFUSAL_AUDIT_EVERY_S, 0))
            if now - last < REFUSAL_AUDIT_EVERY_S:
                self._refusals[key] = (last, count + 1)
                return
            self._refusals[key] = (now, 0)
        new = {
            "auth": "munge",
            "uid": exc.uid,
            "reason": exc.reason,
            "method": method,
            "path": path[:200],
            "refused_since_last_entry": count + 1,
        }
        actor = "munge" if exc.uid is None else f"munge uid {exc.uid}"
        with self.db.write() as session:
            session.add(AuditEntry(actor=actor, token_id=None, action="request.refused", new=new))
