"""Bearer tokens: creation, listing, revocation, and the lookup every request makes.

A token is 32 random bytes (``secrets.token_urlsafe``); the database keeps only its sha256
and the row's id shows as ``t-<id>``. A token may expire (``expires_at``) and may be
revoked (``revoked_at``, final): either answers 401 at once.

Lookups are cached per process for :data:`CACHE_TTL_S`: a revocation made by this process
drops its entries at once; one made elsewhere (``interstice token revoke``, another
replica) is seen within :data:`CACHE_TTL_S`. Expiry is checked on every request against the
clock. Refused requests of a known token are written to the audit log by token id, at most
one row per token per :data:`REFUSAL_AUDIT_EVERY_S` (the row counts the refusals it covers).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import anyio
from interstice.api.auth.unix import UnixAccount
from interstice.api.store.db import Database
from interstice.api.store.tables import AuditEntry, Token, utcnow
from sqlalchemy import select

CACHE_TTL_S = 1.0
"""Longest a cached token lookup is trusted, seconds: a revocation made by another process
takes effect here within this time."""
REFUSAL_AUDIT_EVERY_S = 10.0
"""Refused requests of one token are audited at most once per this many seconds."""
DURATION = re.compile(r"^([1-9][0-9]{0,8})([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def hash_token(token: str) -> str:
    """sha256 hex digest of a bearer token (tokens are 32 random bytes, so no salt is needed)."""
    return hashlib.sha256(token.encode()).hexdigest()


def public_id(token_id: int) -> str:
    """``t-<id>``, the id users see."""
    return f"t-{token_id}"


def parse_duration_s(text: str) -> int:
    """Seconds of a duration such as ``30d``, ``12h``, ``90m``, ``3600s`` or ``2w``.

    Raises:
        ValueError: not a positive integer followed by one of s, m, h, d, w.
    """
    match = DURATION.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 30d, 12h, 90m, 3600s or 2w")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's (or MUNGE principal's) id, name and role, and the Unix
    account it acts as (None: an unbound token, single-user mode)."""

    token_id: int
    name: str
    role: str
    unix_name: str | None = None
    unix_uid: int | None = None


def audit_entry(
    who: Principal | None, action: str, old: dict[str, Any] | None, new: dict[str, Any]
) -> AuditEntry:
    """The audit log's record of ``action`` by ``who`` (None: the command line), with the
    value before (``old``, None when there was none) and after."""
    return AuditEntry(
        actor="command line" if who is None else who.name,
        token_id=None if who is None else who.token_id,
        action=action,
        old=old,
        new=new,
    )


@dataclass(frozen=True)
class TokenRecord:
    """A token row as the lookups see it."""

    principal: Principal
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    def refusal(self, now: datetime) -> str | None:
        """``"revoked"``, ``"expired"`` or None (the token is valid at ``now``)."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return None


MUNGE_HASH_PREFIX = "munge:"
"""``token_sha256`` of a MUNGE principal: ``munge:<uid>`` (see :class:`Token`)."""


def _record(row: Token) -> TokenRecord:
    who = Principal(row.id, row.name, row.role, row.unix_name, row.unix_uid)
    return TokenRecord(who, row.created_at, row.expires_at, row.revoked_at)


def create_token(
    db: Database,
    role: str,
    name: str,
    expires_in_s: int | None = None,
    actor: Principal | None = None,
    unix: UnixAccount | None = None,
) -> str:
    """Store a new token of ``role`` and return its secret (only its hash is kept); audited.

    Args:
        db: the database.
        role: scheduler, agent, user or admin.
        name: who holds it.
        expires_in_s: lifetime in seconds from now; None: it never expires.
        actor: the admin creating it over the API; None: the command line (or a test).
        unix: the Unix account the token acts as (its jobs run as it); None: unbound.
    """
    return create_token_record(db, role, name, expires_in_s, actor, unix)[0]


def create_token_record(
    db: Database,
    role: str,
    name: str,
    expires_in_s: int | None = None,
    actor: Principal | None = None,
    unix: UnixAccount | None = None,
) -> tuple[str, TokenRecord]:
    """:func:`create_token`, also answering the stored row."""
    secret = secrets.token_urlsafe(32)
    now = utcnow()
    expires = None if expires_in_s is None else now + timedelta(seconds=expires_in_s)
    with db.write() as session:
        row = Token(
            name=name,
            role=role,
            token_sha256=hash_token(secret),
            created_at=now,
            expires_at=expires,
            unix_name=None if unix is None else unix.name,
            unix_uid=None if unix is None else unix.uid,
        )
        session.add(row)
        session.flush()
        record = _record(row)
        new = {
            "token_id": public_id(row.id),
            "name": name,
            "role": role,
            "expires_at": None if expires is None else expires.isoformat(),
        }
        if unix is not None:
            new |= {"unix_user": unix.name, "unix_uid": unix.uid}
        session.add(audit_entry(actor, "token.create", None, new))
    return secret, record


def list_tokens(db: Database) -> list[TokenRecord]:
    """Every token, oldest first (never a secret: only hashes are stored); MUNGE principals
    are not tokens and are left out."""
    query = select(Token).where(~Token.token_sha256.startswith(MUNGE_HASH_PREFIX))
    with db.read() as session:
        return [_record(t) for t in session.scalars(query.order_by(Token.id))]


def munge_principal(db: Database, account: UnixAccount) -> Principal:
    """The principal of a MUNGE caller: the row of its uid, created at its first call (its
    name follows the account's current name).

    Raises:
        sqlalchemy.exc.IntegrityError: another process created the row meanwhile (a second
            call finds it).
    """
    marker = f"{MUNGE_HASH_PREFIX}{account.uid}"
    with db.write() as session:
        row = session.scalar(select(Token).where(Token.token_sha256 == marker))
        if row is None:
            row = Token(name=account.name, role="user", token_sha256=marker)
            session.add(row)
        row.name = row.unix_name = account.name
        row.unix_uid = account.uid
        session.flush()
        return _record(row).principal


def revoke_token(db: Database, token_id: str, actor: Principal | None = None) -> TokenRecord:
    """Revoke token ``t-<id>`` (idempotent: a revoked token keeps its first ``revoked_at``);
    audited when it changes anything.

    Raises:
        LookupError: no such token (the message names it).
    """
    head, _, number = token_id.partition("-")
    with db.write() as session:
        row = (
            session.get(Token, int(number))
            if head == "t" and number.isdigit() and len(number) <= 15
            else None
        )
        if row is None or row.token_sha256.startswith(MUNGE_HASH_PREFIX):
            raise LookupError(f"token {token_id} not found")
        if row.revoked_at is None:
            row.revoked_at = utcnow()
            old = {"token_id": token_id, "revoked_at": None}
            new = {"token_id": token_id, "revoked_at": row.revoked_at.isoformat()}
            session.add(audit_entry(actor, "token.revoke", old, new))
        return _record(row)


class TokenCache:
    """The per-process lookups of bearer tokens (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._entries: dict[str, tuple[TokenRecord, float]] = {}
        self._refusals: dict[int, tuple[float, int]] = {}
        self._lock = threading.Lock()
        self._loading: dict[str, asyncio.Future[TokenRecord | None]] = {}

    def cached(self, token: str) -> TokenRecord | None:
        """The record of a token looked up less than :data:`CACHE_TTL_S` ago (a revoked one:
        whenever; revocation is final), else None. No database access."""
        entry = self._entries.get(hash_token(token))
        if entry is None:
            return None
        record, loaded = entry
        if record.revoked_at is None and time.monotonic() - loaded > CACHE_TTL_S:
            return None
        return record

    async def lookup(self, token: str) -> TokenRecord | None:
        """The token's record, or None for an unknown token: cached, else read once for all
        the requests that carry the token meanwhile (at 5,000 agents sharing one token,
        every request of the moment the entry expired read it)."""
        record = self.cached(token)
        if record is not None:
            return record
        digest = hash_token(token)
        loading = self._loading.get(digest)
        if loading is None:
            loading = asyncio.ensure_future(anyio.to_thread.run_sync(self.load, token))
            self._loading[digest] = loading
            loading.add_done_callback(lambda _: self._loading.pop(digest, None))
        return await asyncio.shield(loading)

    def load(self, token: str) -> TokenRecord | None:
        """The token's record from the database (cached), or None for an unknown token."""
        digest = hash_token(token)
        with self.db.read() as session:
            row = session.scalar(select(Token).where(Token.token_sha256 == digest))
            record = None if row is None else _record(row)
        if record is not None:
            self._entries[digest] = (record, time.monotonic())
        return record

    def forget(self, token_id: int) -> None:
        """Drop the cached lookups of one token (after this process revoked it)."""
        for digest, (record, _) in list(self._entries.items()):
            if record.principal.token_id == token_id:
                self._entries.pop(digest, None)

    def refused(self, who: Principal, reason: str, method: str, path: str) -> None:
        """Audit a refused request of a known token, throttled per token (see module)."""
        now = time.monotonic()
        with self._lock:
            last, count = self._refusals.get(who.token_id, (-REFUSAL_AUDIT_EVERY_S, 0))
            if now - last < REFUSAL_AUDIT_EVERY_S:
                self._refusals[who.token_id] = (last, count + 1)
                return
            self._refusals[who.token_id] = (now, 0)
        with self.db.write() as session:
            new = {
                "token_id": public_id(who.token_id),
                "reason": reason,
                "method": method,
                "path": path[:200],
                "refused_since_last_entry": count + 1,
            }
            session.add(audit_entry(who, "request.refused", None, new))
