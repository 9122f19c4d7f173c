"""``/docs`` and ``/redoc`` work with no internet: every script, stylesheet, icon and spec URL they reference
is served by the gateway itself (FastAPI's defaults load them from a CDN, a blank page offline)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest
from starlette.testclient import TestClient

# Quoted URL-like strings in inline scripts, e.g. SwaggerUIBundle({url: '/openapi.json'}) or Redoc's spec-url.
_QUOTED_URL = re.compile(r"""["']((?:https?:)?//[^"'\s]+|/[^"'\s/][^"'\s]*)["']""")
_CONTENT_TYPES = {
    ".js": ("application/javascript", "text/javascript"),
    ".css": ("text/css",),
    ".png": ("image/png",),
    ".json": ("application/json",),
}


class _References(HTMLParser):
    """Every src= and href= of a page, every spec-url= (ReDoc's element) and URLs quoted in inline scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_script = tag == "script"
        self.urls += [value for name, value in attrs if name in ("src", "href", "spec-url") and value]

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.urls += _QUOTED_URL.findall(data)


def _references(html: str) -> list[str]:
    parser = _References()
    parser.feed(html)
    return parser.urls


@pytest.mark.parametrize(("page", "expected"), [("/docs", 4), ("/redoc", 3)])
def test_every_asset_of_the_docs_pages_is_served_by_the_gateway(client: TestClient, page: str, expected: int) -> None:
    response = client.get(page)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    urls = _references(response.text)
    # /docs: stylesheet, favicon, script, spec url; /redoc: favicon, spec url, script
    assert len(set(urls)) >= expected, urls
    assert not re.search(r"(?:https?:)?//[\w.-]+\.\w", response.text), "an absolute URL to another host"
    for url in urls:
        absolute = urljoin(f"http://testserver{page}", url)
        parts = urlsplit(absolute)
        assert parts.netloc == "testserver", f"{page} loads {url} from another host"
        asset = client.get(parts.path)
        assert asset.status_code == 200, (url, asset.status_code)
        suffix = "." + parts.path.rsplit(".", 1)[-1]
        allowed = _CONTENT_TYPES[suffix]
        assert asset.headers["content-type"].split(";")[0] in allowed, (url, asset.headers["content-type"])
        assert len(asset.content) > 100, url


def test_the_pages_reference_the_bundled_swagger_ui_and_redoc(client: TestClient) -> None:
    docs = _references(client.get("/docs").text)
    redoc = _references(client.get("/redoc").text)
    assert any(url.endswith("swagger-ui-bundle.js") for url in docs)
    assert any(url.endswith("swagger-ui.css") for url in docs)
    assert any(url.endswith("redoc.standalone.js") for url in redoc)
    assert "/openapi.json" in docs
    assert "/openapi.json" in redoc
    bundle = client.get(next(url for url in docs if url.endswith("swagger-ui-bundle.js"))).text
    assert "SwaggerUIBundle" in bundle
