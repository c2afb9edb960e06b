"""The API's interactive reference pages: ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc).

FastAPI's own page functions build them, pointed at pinned copies of Swagger UI's and
ReDoc's files shipped in the package (``api/ui/vendor``, served with the dashboard's static
files; versions and sources in its README) instead of a public CDN: the pages work on a
service host without internet, and what they run is what was released with the service.
"""

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from interstice.api.routes.ui import STATIC_PATH

VENDOR = f"{STATIC_PATH}/vendor"
SWAGGER_JS = f"{VENDOR}/swagger-ui-bundle.js"
SWAGGER_CSS = f"{VENDOR}/swagger-ui.css"
REDOC_JS = f"{VENDOR}/redoc.standalone.js"
FAVICON = f"{VENDOR}/swagger-ui-favicon-32x32.png"
ASSETS = (SWAGGER_JS, SWAGGER_CSS, REDOC_JS, FAVICON)
"""The files the two pages load, as paths of the service."""

router = APIRouter(tags=["docs"], include_in_schema=False)


def _root(request: Request) -> str:
    """The path prefix the service is mounted under behind a proxy (``--root-path``)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    """The API reference as Swagger UI, with "Try it out" (``Authorize`` takes a token)."""
    root = _root(request)
    return get_swagger_ui_html(
        openapi_url=root + request.app.openapi_url,
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=root + SWAGGER_JS,
        swagger_css_url=root + SWAGGER_CSS,
        swagger_favicon_url=root + FAVICON,
        swagger_ui_parameters=request.app.swagger_ui_parameters,
    )


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    """The API reference as ReDoc (the system's fonts: none is fetched from outside)."""
    root = _root(request)
    return get_redoc_html(
        openapi_url=root + request.app.openapi_url,
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=root + REDOC_JS,
        redoc_favicon_url=root + FAVICON,
        with_google_fonts=False,
    )
