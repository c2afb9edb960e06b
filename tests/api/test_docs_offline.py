"""The API reference pages and the dashboard load nothing from outside the service, and the
dashboard's responses tell the browser to run only the service's own files.

``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) name no http(s) URL: their scripts, styles and
icon are the package's pinned copies, each answered 200 by the service. ``/ui`` and its
static files carry a Content-Security-Policy of the service's own origin with no inline
script or style, ``X-Frame-Options: DENY`` and ``nosniff``; every other response ``nosniff``.
(tests/ui/test_dashboard.py shows the dashboard working under that policy in Chromium.)
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from api_helpers import Api
from interstice.api.routes import docs, ui
from interstice.api.security_headers import DASHBOARD_CSP

pytestmark = pytest.mark.sqlite_only  # nothing here reads the database


class _Links(HTMLParser):
    """The ``src``/``href`` of a page's elements, its inline ``<style>``/``<script>`` bodies
    and its inline style and event-handler attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []
        self._tag: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]
        self.inline += [f"{tag} {k}" for k, _ in attrs if k == "style" or k.startswith("on")]
        if tag == "style" or (tag == "script" and "src" not in named):
            self._tag = tag

    def handle_data(self, data: str) -> None:
        if self._tag is not None and data.strip():
            self.inline.append(f"<{self._tag}>")
        self._tag = None


def _parsed(html: str) -> _Links:
    links = _Links()
    links.feed(html)
    return links


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_reference_pages_load_only_the_services_own_files(api: Api, page: str) -> None:
    r = api.client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert not re.findall(r"https?://", r.text), "the page names a URL outside the service"
    urls = _parsed(r.text).urls
    assert urls and all(u.startswith(ui.STATIC_PATH + "/vendor/") for u in urls), urls
    for url in [*urls, "/openapi.json"]:
        asset = api.client.get(url)
        assert asset.status_code == 200, url
        assert asset.headers["x-content-type-options"] == "nosniff"
    assert "/openapi.json" in r.text


def test_every_asset_of_the_pages_is_shipped_with_its_licence(api: Api) -> None:
    kinds = {".js": "javascript", ".css": "text/css", ".png": "image/png"}
    for url in docs.ASSETS:
        r = api.client.get(url)
        assert r.status_code == 200, url
        assert kinds[url[url.rindex(".") :]] in r.headers["content-type"], url
    vendor = ui.UI_DIR / "vendor"
    readme = (vendor / "README.md").read_text()
    for licence in ("swagger-ui.LICENSE", "redoc.LICENSE"):
        assert (vendor / licence).stat().st_size > 0
    assert "swagger-ui-dist" in readme and "redoc" in readme


@pytest.mark.parametrize(
    "path",
    ["/ui", "/ui/static/app.js", "/ui/static/style.css", "/ui/static/vendor/uPlot.iife.min.js"],
)
def test_the_dashboard_is_sent_with_its_security_headers(api: Api, path: str) -> None:
    r = api.client.get(path)
    assert r.status_code == 200, path
    assert r.headers["content-security-policy"] == DASHBOARD_CSP
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"


def test_the_dashboards_policy_allows_only_its_own_origin() -> None:
    directives = dict(d.strip().split(" ", 1) for d in DASHBOARD_CSP.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'"
    assert "unsafe" not in DASHBOARD_CSP and "http" not in DASHBOARD_CSP


def test_the_dashboard_page_has_nothing_inline(api: Api) -> None:
    """The policy refuses inline scripts, styles and handlers: the page has none."""
    page = _parsed(api.client.get("/ui").text)
    assert page.inline == []
    files = [u for u in page.urls if not u.startswith("#")]  # the tabs' in-page links
    assert files and all(u.startswith(ui.STATIC_PATH + "/") for u in files), files


@pytest.mark.parametrize("path", ["/healthz", "/v1/nodes", "/openapi.json", "/no/such/path"])
def test_every_response_says_nosniff(api: Api, path: str) -> None:
    r = api.client.get(path)
    assert r.headers["x-content-type-options"] == "nosniff", (path, r.status_code)
    assert "content-security-policy" not in r.headers  # the reference pages run inline code
