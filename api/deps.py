"""Dependencies of the routes: the service and bearer-token authentication per role.

Every authenticated route declares its roles twice, and :func:`roles` keeps both in step:
the dependency refuses other roles (401 without or with an unknown token, 403 with a role
the route does not accept), and the OpenAPI operation carries them as ``x-roles``.
"""

from typing import Annotated, Any

import anyio
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from interstice.api.schemas import ErrorDetail, Role
from interstice.api.service import Principal, Service

_bearer = HTTPBearer(auto_error=False, description="A token from `interstice token create`.")


def get_service(request: Request) -> Service:
    """The running service of this app."""
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(get_service)]


def require(*accepted: Role) -> Any:
    """A dependency returning the caller's :class:`Principal` when its role is ``accepted``.

    Raises:
        HTTPException: 401 (no or unknown token), 403 (role not accepted).
    """

    async def principal(
        service: ServiceDep,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        if credentials is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "missing bearer token",
                headers={"WWW-Authenticate": "Bearer"},
            )
        token = credentials.credentials
        who = service.cached_principal(token) or await anyio.to_thread.run_sync(
            service.authenticate, token
        )
        if who is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "invalid bearer token",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if who.role not in accepted:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"role {who.role} may not call this endpoint (accepted: {', '.join(accepted)})",
            )
        return who

    return Depends(principal)


SchedulerToken = Annotated[Principal, require("scheduler")]
NodeReader = Annotated[Principal, require("scheduler", "admin")]
UserToken = Annotated[Principal, require("user", "admin")]
AgentToken = Annotated[Principal, require("agent")]
AdminToken = Annotated[Principal, require("admin")]


def roles(
    *accepted: Role,
    errors: tuple[int, ...] = (),
    openapi: dict[str, Any] | None = None,
    answers: dict[int, Any] | None = None,
) -> dict[str, Any]:
    """Route keyword arguments: ``x-roles`` (plus ``openapi``) in the OpenAPI operation and
    the declared answers: 401, 403 and ``errors`` with the :class:`ErrorDetail` body, plus
    ``answers`` (more successful ones)."""
    described = {
        400: "Malformed request body (not JSON or not UTF-8)",
        401: "Missing or unknown bearer token",
        403: "The token's role is not accepted here",
        404: "Unknown id",
        409: "Conflicts with the current state",
    }
    return {
        "openapi_extra": {"x-roles": list(accepted), **(openapi or {})},
        "responses": {
            code: {"model": ErrorDetail, "description": described[code]}
            for code in (401, 403, *errors)
        }
        | (answers or {}),
    }
