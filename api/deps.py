"""Dependencies of the routes: the service and authentication per role (bearer tokens, and
MUNGE credentials on the routes of the ``user`` role, :mod:`interstice.api.auth.munge`).

Every authenticated route declares its roles twice, and :func:`roles` keeps both in step:
the dependency (:func:`interstice.api.auth.bearer.require`) refuses other roles (401 without
a token or with an unknown, expired or revoked one, 403 with a role the route does not
accept; refusals of a known token are audited, see :mod:`interstice.api.auth.tokens`), and
the OpenAPI operation carries them as ``x-roles``.
"""

from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from interstice.api.auth.bearer import require
from interstice.api.auth.tokens import Principal
from interstice.api.schemas.common import ErrorDetail
from interstice.api.schemas.tokens import Role
from interstice.api.service import Service


async def get_service(request: Request) -> Service:
    """The running service of this app (async: FastAPI would run a plain function in its
    thread pool, a thread hop per request)."""
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(get_service)]


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
        401: "Missing, unknown, expired or revoked bearer token, or a refused MUNGE credential",
        403: "The token's role is not accepted here",
        404: "Unknown id",
        409: "Conflicts with the current state",
        503: "MUNGE credentials cannot be checked now (munged down on the service host)",
    }
    munge = (503,) if "user" in accepted else ()
    return {
        "openapi_extra": {"x-roles": list(accepted), **(openapi or {})},
        "responses": {
            code: {"model": ErrorDetail, "description": described[code]}
            for code in (401, 403, *errors, *munge)
        }
        | (answers or {}),
    }
