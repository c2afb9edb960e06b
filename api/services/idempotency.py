"""``Idempotency-Key`` of ``POST /v1/jobs``, as payment APIs have it (Stripe, the IETF
draft ``draft-ietf-httpapi-idempotency-key-header``).

A client that retries a submission (after a timeout or a crash) with the same key gets the
job its first request created, with the same status code (201) and the header
``Idempotent-Replayed: true``, instead of a second job. Keys are scoped per token, stored in
the database (so a restart or another replica honours them) and kept for
:data:`KEY_KEPT_S`; a key reused by the same token with a different body is a 422.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from interstice.api.schemas.jobs import JobCreate
from interstice.api.store.tables import IdempotencyKey, Job, utcnow
from sqlalchemy.orm import Session

KEY_KEPT_S = 24 * 3600
"""A key older than this is forgotten: its next use creates a new job."""
KEY_PATTERN = r"^[\x21-\x7e]{1,200}$"
"""1 to 200 printable ASCII characters, no spaces (a UUID fits)."""


class KeyReused(ValueError):
    """The key was used by this token for a request with a different body."""


def _digest(body: JobCreate) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


def earlier_job(session: Session, token_id: int, key: str, body: JobCreate) -> Job | None:
    """The job an earlier request of ``token_id`` with ``key`` created, or None (a key older
    than :data:`KEY_KEPT_S` is deleted and counts as new).

    Raises:
        KeyReused: the earlier request had a different body.
    """
    row = session.get(IdempotencyKey, (token_id, key))
    if row is None:
        return None
    if utcnow() - row.created_at > timedelta(seconds=KEY_KEPT_S):
        session.delete(row)
        session.flush()
        return None
    if row.request_sha256 != _digest(body):
        raise KeyReused(
            "Idempotency-Key was already used with a different request body; use a new key"
        )
    return session.get(Job, row.job_id)


def remember(session: Session, token_id: int, key: str, body: JobCreate, job_id: int) -> None:
    """Store ``key`` of ``token_id`` as the one that created ``job_id``."""
    session.add(
        IdempotencyKey(token_id=token_id, key=key, request_sha256=_digest(body), job_id=job_id)
    )
