"""The browser page at ``/``: three views (Methods, Configs, Jobs) over the public API.

The page is static files (HTML, plain JavaScript modules, CSS and the vendored Apache ECharts under
``static/vendor/``), served by the gateway itself so it works offline. It holds no secret and reaches no route
of its own: every request it makes goes to ``/v1`` with the user's ``X-API-Key``, through the same key check and
rate limit as any other client. Neither ``/`` nor the assets are in the OpenAPI document.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

PAGE_DIR = Path(__file__).resolve().parent / "static"
ASSETS_URL = "/static/page"


def install_page(app: FastAPI) -> None:
    """Serve ``static/index.html`` at ``/`` and the files beside it under ``/static/page``."""
    app.mount(ASSETS_URL, StaticFiles(directory=PAGE_DIR), name="page-assets")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        # no-cache: a browser revalidates (ETag) so a new release's page is never mixed with an old script
        return FileResponse(PAGE_DIR / "index.html", headers={"Cache-Control": "no-cache"})
