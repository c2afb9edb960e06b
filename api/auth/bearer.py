"""The authentication of every request, one dependency per set of roles.

The dependency refuses a request without a token or with an unknown, expired or revoked one
(401) and one whose token's role the route does not accept (403); refusals of a known token
are audited (:meth:`~interstice.api.auth.tokens.TokenCache.refused`). A route that accepts
the ``user`` role also takes ``Authorization: MUNGE <credential>`` when the service runs
with ``auth_munge`` (:mod:`interstice.api.auth.munge`: 401 with munged's reason, 503 when
munged does not answer). The routes take it through the aliases of
:mod:`interstice.api.deps` (``AdminToken``, ``UserToken``, ...).
"""

from typing import Annotated, Any

import anyio
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.http import HTTPBase
from interstice.api.auth.munge import MungeGate, MungeRefused, MungeUnavailable
from interstice.api.auth.tokens import Principal, TokenCache, public_id
from interstice.api.schemas.tokens import MUNGE_SCHEME, Role
from interstice.api.store.tables import utcnow

_bearer = HTTPBearer(auto_error=False, description="A token from `interstice token create`.")
_munge = HTTPBase(
    scheme=MUNGE_SCHEME,
    scheme_name="MUNGE",
    auto_error=False,
    description="`Authorization: MUNGE <credential>`: a fresh credential of the caller's "
    "uid from the `munge` command (one per request; munged refuses a replayed one), on a "
    "service run with `INTERSTICE_AUTH_MUNGE=true`. The `user` role only.",
)


async def _no_munge() -> None:
    """Routes that do not accept the ``user`` role take no MUNGE credential."""
    return None


async def munge_caller(request: Request, credential: str) -> Principal:
    """The caller a MUNGE credential names (see :mod:`interstice.api.auth.munge`).

    Raises:
        HTTPException: 401 (MUNGE not enabled, or the credential refused: munged's reason),
            503 (munged does not answer).
    """
    gate: MungeGate | None = request.app.state.service.munge
    if gate is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "MUNGE credentials are not accepted by this service (INTERSTICE_AUTH_MUNGE is off)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    try:
        return await anyio.to_thread.run_sync(
            gate.principal, credential, request.method, request.url.path
        )
    except MungeRefused as exc:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            f"MUNGE credential refused: {exc.reason}",
            headers={"WWW-Authenticate": MUNGE_SCHEME},
        ) from None
    except MungeUnavailable as exc:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"MUNGE credentials cannot be checked now (munged on the service host: {exc})",
        ) from None


def require(*accepted: Role) -> Any:
    """A dependency returning the caller's :class:`Principal` when its role is ``accepted``.

    Tokens are looked up in the running service's cache (``app.state.service.tokens``).

    Raises:
        HTTPException: 401 (no or unknown token), 403 (role not accepted).
    """

    async def principal(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        munge: Annotated[
            HTTPAuthorizationCredentials | None,
            Depends(_munge if "user" in accepted else _no_munge),
        ],
    ) -> Principal:
        if credentials is None and munge is not None and munge.scheme.upper() == MUNGE_SCHEME:
            return await munge_caller(request, munge.credentials)
        if credentials is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "missing bearer token",
                headers={"WWW-Authenticate": "Bearer"},
            )
        tokens: TokenCache = request.app.state.service.tokens
        record = await tokens.lookup(credentials.credentials)
        if record is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "invalid bearer token",
                headers={"WWW-Authenticate": "Bearer"},
            )
        who = record.principal
        refusal = record.refusal(utcnow())
        if refusal is None and who.role not in accepted:
            refusal = "role"
        if refusal is not None:
            await anyio.to_thread.run_sync(
                tokens.refused, who, refusal, request.method, request.url.path
            )
        if refusal == "role":
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"role {who.role} may not call this endpoint (accepted: {', '.join(accepted)})",
            )
        if refusal is not None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                f"bearer token {public_id(who.token_id)} is {refusal}",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return who

    return Depends(principal)
