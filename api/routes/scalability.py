"""The scalability table: read by users and admins, replaced by admins (CSV body)."""

import anyio
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from interstice.api.deps import AdminToken, ServiceDep, UserToken, roles
from interstice.api.schemas.common import refuse_nul
from interstice.api.schemas.objective import ScalabilityPublic
from interstice.api.services import scalability
from interstice.api.services.scalability import TABLE_MAX_MODELS

router = APIRouter(prefix="/v1/scalability", tags=["scalability"])

_CSV_BODY = {
    "requestBody": {
        "required": True,
        "content": {"text/csv": {"schema": {"type": "string", "minLength": 1}}},
        "description": "A non-empty CSV table: a header naming the columns "
        "model,nodes,samples_per_s[,spb_depth,progress_per_sample,derived], then at least one "
        f"row; at most {TABLE_MAX_MODELS} models",
    },
    "responses": {
        "422": {
            "description": "Malformed CSV (the message names the line), a NUL character, "
            f"or more than {TABLE_MAX_MODELS} models",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}
            },
        }
    },
}


@router.get("", **roles("user", "admin", errors=(404,)))
def get_scalability(service: ServiceDep, _: UserToken) -> ScalabilityPublic:
    """The loaded table's models and row count; 404 when none is loaded. Roles: user, admin."""
    return scalability.summary(service)


@router.put("", **roles("admin", errors=(409,), openapi=_CSV_BODY))
async def put_scalability(
    request: Request, service: ServiceDep, who: AdminToken
) -> ScalabilityPublic:
    """Replace the table with a CSV body in the shared data's format (``model, nodes,
    samples_per_s``, optional ``spb_depth``, ``progress_per_sample``, ``derived``). 422
    names the bad line (an empty body, a table of no rows or of more than
    :data:`~interstice.api.services.scalability.TABLE_MAX_MODELS` models, a NUL character included);
    409 when an active job's model would be missing. Audited. Roles: admin."""
    try:
        text = (await request.body()).decode("utf-8")
        refuse_nul(text)
        return await anyio.to_thread.run_sync(scalability.replace, service, who, text)
    except ValueError as exc:  # UnicodeDecodeError included
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RequestValidationError(
            [{"loc": ("body",), "msg": message, "type": "value_error"}]
        ) from None
