"""The bearer-token check of every authenticated request, one dependency per set of roles.

The dependency refuses a request without a token or with an unknown, expired or revoked one
(401) and one whose token's role the route does not accept (403); refusals of a known token
are audited (:meth:`~interstice.api.auth.tokens.TokenCache.refused`). The routes take it
through the aliases of :mod:`interstice.api.deps` (``AdminToken``, ``UserToken``, ...).
"""

from typing import Annotated, Any

import anyio
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from interstice.api.auth.tokens import Principal, TokenCache, public_id
from interstice.api.schemas.tokens import Role
from interstice.api.store.tables import utcnow

_bearer = HTTPBearer(auto_error=False, description="A token from `interstice token create`.")


def require(*accepted: Role) -> Any:
    """A dependency returning the caller's :class:`Principal` when its role is ``accepted``.

    Tokens are looked up in the running service's cache (``app.state.service.tokens``).

    Raises:
        HTTPException: 401 (no or unknown token), 403 (role not accepted).
    """

    async def principal(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
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
