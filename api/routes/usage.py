"""Route: node-hours and samples harvested per user and day (``interstice usage``)."""

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from interstice.api.deps import ServiceDep, UserToken, roles
from interstice.api.schemas.common import UTCTime
from interstice.api.schemas.usage import UsagesPublic
from interstice.api.services import usage as usage_service

router = APIRouter(prefix="/v1/usage", tags=["usage"])


@router.get("", **roles("user", "admin"))
def usage(
    service: ServiceDep,
    who: UserToken,
    user: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            description="only this user's rows; a user token may name only itself",
        ),
    ] = None,
    since: Annotated[
        UTCTime | None,
        Query(description="start of the window (ISO 8601); default: the first record"),
    ] = None,
    until: Annotated[
        UTCTime | None, Query(description="end of the window (ISO 8601); default: now")
    ] = None,
) -> UsagesPublic:
    """Node-hours held and samples trained per user and UTC day, from ``since`` to
    ``until``, as ``sreport``'s user utilization by day. A user is a job's Unix owner, or
    the name of the token that submitted it (single-user mode). A user token sees its own
    rows only (403 when ``user`` names another); an admin sees every user's, or ``user``'s.
    Roles: user, admin.

    A window whose ``until`` is not after ``since`` has no rows.

    Raises:
        HTTPException: 403 when a user token asks for another user.
    """
    if who.role != "admin":
        own = usage_service.principal_user(who)
        if user is not None and user != own:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN, f"user: a user token sees only its own usage ({own})"
            )
        user = own
    return usage_service.usage(service, user, since, until)
