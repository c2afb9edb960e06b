"""Response headers that tell browsers what the service's pages may do.

Every response says ``X-Content-Type-Options: nosniff`` (a browser takes each body as the
type it is served with, never as a script or a page it guesses). The dashboard (``/ui`` and
its static files) also says ``X-Frame-Options: DENY`` (no other site frames it to trick a
click) and a Content-Security-Policy: its scripts, styles, images and API calls come from
the service itself, and no inline script or style runs (a value that slipped past the
dashboard's escaping still could not execute).
"""

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DASHBOARD_CSP = (
    "default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
"""The dashboard's Content-Security-Policy: everything from the service's own origin, no
inline script or style, no plugins, no ``<base>``, no framing."""


def is_dashboard(path: str) -> bool:
    """Whether ``path`` is the dashboard's page or one of its static files."""
    return path == "/ui" or path.startswith("/ui/")


class SecurityHeaders:
    """ASGI middleware adding the headers of the module docstring to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        dashboard = is_dashboard(scope["path"])

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Content-Type-Options"] = "nosniff"
                if dashboard:
                    headers["Content-Security-Policy"] = DASHBOARD_CSP
                    headers["X-Frame-Options"] = "DENY"
            await send(message)

        await self.app(scope, receive, send_with_headers)
