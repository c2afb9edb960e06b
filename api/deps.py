"""Dependencies of the routes: the service and bearer-token authentication per role.

Every authenticated route declares its roles twice, and :func:`roles` keeps both in step:
the dependency refuses other roles (401 without a token or with an unknown, expired or
revoked one, 403 with a role the route does not accept; refusals of a known token are
audited, see :mod:`interstice.api.tokens`), and the OpenAPI operation carries them as
``x-roles``.
"""

from typing import Annotated, Any

import anyio
from fastapi import Depends, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from interstice.api.schemas import ErrorDetail, Role
from interstice.api.service import Service
from interstice.api.tables import utcnow
from interstice.api.tokens import Principal, public_id

_bearer = HTTPBearer(auto_error=False, description="A token from `interstice token create`.")


async def get_service(request: Request) -> Service:
    """The running service of this app (async: FastAPI would run a plain function in its
    thread pool, a thread hop per request)."""
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(get_service)]


def require(*accepted: Role) -> Any:
    """A dependency returning the caller's :class:`Principal` when its role is ``accepted``.

    Raises:
        HTTPException: 401 (no or unknown token), 403 (role not accepted).
    """

    async def principal(
        request: Request,
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
        record = await service.tokens.lookup(token)
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
                service.tokens.refused, who, refusal, request.method, request.url.path
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


def _query_names(dependant: Any) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def known_query(request: Request) -> None:
    """Refuse a query parameter that the ``/v1`` route does not declare (a typo such as
    ``?limt=5`` would otherwise be ignored silently).

    Raises:
        RequestValidationError: 422 naming the first unknown parameter.
    """
    route = request.scope.get("route")
    if (
        route is None
        or not request.scope["query_string"]
        or not request.url.path.startswith("/v1/")
    ):
        return
    unknown = sorted(set(request.query_params) - _query_names(route.dependant))
    if unknown:
        raise RequestValidationError(
            [
                {
                    "loc": ("query", unknown[0][:100]),
                    "msg": "unknown query parameter",
                    "type": "extra_forbidden",
                }
            ]
        )


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
        401: "Missing, unknown, expired or revoked bearer token",
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
