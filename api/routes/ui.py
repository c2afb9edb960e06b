"""The dashboard: ``GET /ui`` answers its page; its scripts, styles and the vendored chart
library are static files under ``/ui/static`` (shipped in the package, no build step).

The page reads the same public API as any client, with the bearer token the user types.
Its responses carry a Content-Security-Policy that refuses inline scripts and styles
(:mod:`interstice.api.security_headers`): the page and its scripts have none.
"""

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from interstice.api.deps import ServiceDep
from starlette.staticfiles import StaticFiles

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
"""The dashboard's static files (``interstice/api/ui`` once installed)."""
STATIC_PATH = "/ui/static"

router = APIRouter(tags=["ui"], include_in_schema=False)


@router.get("/ui")
def dashboard() -> FileResponse:
    """The dashboard's page (no token needed to load it: every view asks the API with the
    token typed into the page)."""
    return FileResponse(UI_DIR / "index.html", media_type="text/html")


@router.get("/ui/settings")
def dashboard_settings(service: ServiceDep) -> dict[str, str]:
    """The service's settings the page draws with (no token: they say nothing about nodes
    or jobs): ``node_group_pattern``, the regular expression whose first group is a node's
    cabinet on the node map."""
    return {"node_group_pattern": service.settings.node_group_pattern}


def static_files() -> StaticFiles:
    """The app to mount at :data:`STATIC_PATH`."""
    return StaticFiles(directory=UI_DIR)
