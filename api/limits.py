"""Limits on what a request may send and on what an error answer quotes back.

- Request bodies: at most :data:`BODY_LIMITS` bytes for the routes listed there, else
  :data:`DEFAULT_BODY_LIMIT` bytes; a larger body answers 413 before it is parsed (by its
  ``Content-Length``, or, when it is sent chunked, as soon as it passes the limit).
- A 422 quotes at most :data:`QUOTE_MAX_CHARS` characters of the offending input and of its
  message (never echoes a 50 MB body), and a 404 as many of the unknown id (:func:`short`).
- A 405 answers an ``Allow`` header listing every method the path accepts (Starlette names
  only those of the first route whose path matches).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MIB = 1 << 20
DEFAULT_BODY_LIMIT = MIB
"""Most bytes of a request body, where :data:`BODY_LIMITS` does not say otherwise."""
BODY_LIMITS: dict[str, int] = {
    "/v1/nodes/events": 8 * MIB,  # 10,000 events of at most ~500 bytes each
    "/v1/scalability": MIB,  # a CSV table
}
"""Most bytes of a request body per path."""
QUOTE_MAX_CHARS = 100
"""Most characters of an input (or a message) a 422 quotes, and of an id a 404 quotes."""
BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def body_limit(path: str) -> int:
    """Most bytes a request body to ``path`` may have."""
    return BODY_LIMITS.get(path.rstrip("/") or "/", DEFAULT_BODY_LIMIT)


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse(
        {"detail": f"request body larger than {limit} bytes, the limit of this route"},
        status_code=413,
        headers={"Connection": "close"},
    )


class BodyLimit:
    """ASGI middleware answering 413 to a request body over :func:`body_limit`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        limit = body_limit(scope["path"])
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > limit:
                await _too_large(limit)(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        # chunked: read it here, up to the limit, then hand it on
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                chunks.append(message)
                break
            size += len(message.get("body", b""))
            if size > limit:
                await _too_large(limit)(scope, receive, send)
                return
            chunks.append(message)
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return chunks.pop(0) if chunks else await receive()

        await self.app(scope, replay, send)


def short(value: Any) -> Any:
    """``value``, or when its JSON is longer than :data:`QUOTE_MAX_CHARS`, a prefix of that
    JSON text ending in ``…``."""
    if isinstance(value, str):
        return value if len(value) <= QUOTE_MAX_CHARS else value[:QUOTE_MAX_CHARS] + "…"
    if isinstance(value, dict | list):
        text = json.dumps(value, default=str)
        return value if len(text) <= QUOTE_MAX_CHARS else text[:QUOTE_MAX_CHARS] + "…"
    return value


def shorten_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validation errors whose ``input``, ``msg`` and ``ctx`` values quote at most a prefix."""
    shortened = []
    for error in errors:
        error = dict(error)
        if "input" in error:
            error["input"] = short(error["input"])
        error["msg"] = short(error.get("msg", ""))
        if isinstance(error.get("ctx"), dict):
            error["ctx"] = {k: short(v) for k, v in error["ctx"].items()}
        shortened.append(error)
    return shortened


def allowed_methods(routes: list[Any], scope: Scope) -> list[str]:
    """Every method that some route of ``routes`` fully matches at the request's path."""
    return [
        method
        for method in ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
        if any(r.matches(scope | {"method": method})[0] == Match.FULL for r in routes)
    ]


def document_too_large(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the 413 answer to every operation of the OpenAPI ``schema`` that takes a body
    (in place; idempotent)."""
    for path, item in schema.get("paths", {}).items():
        for operation in item.values():
            if isinstance(operation, dict) and "requestBody" in operation:
                operation.setdefault("responses", {})["413"] = {
                    "description": f"Request body larger than {body_limit(path)} bytes",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}
                    },
                }
    return schema
