"""Admin routes: create, list and revoke bearer tokens (as ``interstice token ...`` does)."""

from typing import Annotated

import anyio
from fastapi import APIRouter, Path, status
from fastapi.exceptions import RequestValidationError
from interstice.api.auth import tokens, unix
from interstice.api.deps import AdminToken, ServiceDep, roles
from interstice.api.schemas.tokens import (
    TOKEN_ID,
    TokenCreate,
    TokenCreated,
    TokenPublic,
    TokensPublic,
)
from interstice.api.services.state import NotFound

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


def _public(record: tokens.TokenRecord) -> TokenPublic:
    return TokenPublic(
        token_id=tokens.public_id(record.principal.token_id),
        name=record.principal.name,
        role=record.principal.role,  # type: ignore[arg-type]
        created_at=record.created_at,
        expires_at=record.expires_at,
        revoked_at=record.revoked_at,
        unix_user=record.principal.unix_name,
        unix_uid=record.principal.unix_uid,
    )


@router.post("", status_code=status.HTTP_201_CREATED, **roles("admin", errors=(400,)))
async def create_token(body: TokenCreate, service: ServiceDep, who: AdminToken) -> TokenCreated:
    """Create a token; its secret is in this answer only (the database keeps its hash).

    A ``user`` or ``admin`` token may be bound to a Unix account (``unix_user`` and/or
    ``unix_uid``, resolved on the service host); a user token must be in multi-user mode.
    422 names the field (unknown account, uid 0 or below ``munge_min_uid``, a binding on
    another role, none in multi-user mode). Audited. Roles: admin."""
    settings = service.settings
    try:
        account = unix.token_account(
            body.role, body.unix_user, body.unix_uid, settings.munge_min_uid, settings.multi_user
        )
    except ValueError as exc:
        field, _, message = str(exc).partition(": ")
        raise RequestValidationError(
            [{"loc": ("body", field), "msg": message, "type": "value_error"}]
        ) from None
    secret, record = await anyio.to_thread.run_sync(
        tokens.create_token_record,
        service.db,
        body.role,
        body.name,
        body.expires_in_s,
        who,
        account,
    )
    return TokenCreated(**_public(record).model_dump(), token=secret)


@router.get("", **roles("admin"))
async def list_tokens(service: ServiceDep, _: AdminToken) -> TokensPublic:
    """Every token, oldest first, without secrets. Roles: admin."""
    data = [_public(r) for r in await anyio.to_thread.run_sync(tokens.list_tokens, service.db)]
    return TokensPublic(data=data, count=len(data))


@router.delete("/{token_id}", **roles("admin", errors=(404,)))
async def revoke_token(
    token_id: Annotated[str, Path(pattern=TOKEN_ID, description="``t-<id>``")],
    service: ServiceDep,
    who: AdminToken,
) -> TokenPublic:
    """Revoke a token: it answers 401 from now on in this process, and within
    :data:`interstice.api.auth.tokens.CACHE_TTL_S` (1 s) in any other serving the same database.
    Idempotent (a revoked token keeps its first ``revoked_at``). Audited. Roles: admin."""
    try:
        record = await anyio.to_thread.run_sync(tokens.revoke_token, service.db, token_id, who)
    except LookupError as exc:
        raise NotFound(str(exc)) from None
    service.tokens.forget(record.principal.token_id)
    return _public(record)
