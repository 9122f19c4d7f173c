"""``/docs`` (Swagger UI) and ``/redoc`` with every asset served by the gateway itself, none from a CDN.

FastAPI's built-in pages load their JavaScript, CSS, favicon (and ReDoc's Google fonts) from jsDelivr and
fastapi.tiangolo.com, so on a machine without internet they are blank pages. The assets come from the
``fastapi-offline`` package (a pinned copy of swagger-ui and ReDoc, updated with FastAPI); we only take its
``static`` directory and render the pages with FastAPI's own HTML helpers pointed at it.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_ASSETS = Path(fastapi_offline.__file__).resolve().parent / "static"
ASSETS_URL = "/static/docs"
DOCS_URL = "/docs"
REDOC_URL = "/redoc"


def _asset(request: Request, name: str) -> str:
    """An asset's URL under the app's root path (behind a proxy that mounts the gateway under a prefix)."""
    return f"{request.scope.get('root_path', '')}{ASSETS_URL}/{name}"


def install_offline_docs(app: FastAPI) -> None:
    """Mount the assets and add ``/docs`` and ``/redoc``; the app must be built with ``docs_url=None`` and
    ``redoc_url=None`` so FastAPI's CDN pages are not registered first."""
    app.mount(ASSETS_URL, StaticFiles(directory=DOCS_ASSETS), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=f"{request.scope.get('root_path', '')}{openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=_asset(request, "swagger-ui-bundle.js"),
            swagger_css_url=_asset(request, "swagger-ui.css"),
            swagger_favicon_url=_asset(request, "favicon.png"),
            swagger_ui_parameters=app.swagger_ui_parameters,
        )

    @app.get(REDOC_URL, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        return get_redoc_html(
            openapi_url=f"{request.scope.get('root_path', '')}{openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=_asset(request, "redoc.standalone.js"),
            redoc_favicon_url=_asset(request, "favicon.png"),
            with_google_fonts=False,
        )
