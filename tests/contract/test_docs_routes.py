"""docs/api.md cannot miss a route, and the SDK has what the docs and the README promise: every operation of the
app's OpenAPI document is a row of docs/api.md's endpoint table, and every ``client.<resource>.<method>`` that
docs/api.md or the README names exists on the SDK's Client (and its AsyncClient)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from posenc_client import AsyncClient, Client

from posenc.settings import Settings
from service.main import create_app

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| (.*?) \|", re.M)
ENDPOINT = re.compile(r"`(GET|POST|PUT|DELETE|PATCH) (/[^`?\s]*)")
SDK_CALL = re.compile(r"\bclient\.(\w+)\.(\w+)\(")


def normalised(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def documented_endpoints() -> set[tuple[str, str]]:
    table = (ROOT / "docs" / "api.md").read_text()
    found = set()
    for cell in ROW.findall(table):
        for method, path in ENDPOINT.findall(cell):
            found.add((method, normalised(path)))
    return found


def test_every_route_of_the_app_is_a_row_of_docs_api_md(tmp_path: Path) -> None:
    document = create_app(Settings(state_dir=tmp_path, redis_url=None)).openapi()
    routes = {(method.upper(), normalised(path)) for path, item in document["paths"].items() for method in item}
    missing = sorted(routes - documented_endpoints())
    assert missing == [], f"docs/api.md lacks {missing}"
    stale = sorted(documented_endpoints() - routes)
    assert stale == [], f"docs/api.md lists routes the app does not have: {stale}"


def test_every_sdk_call_the_docs_and_the_readme_name_exists() -> None:
    named = set()
    for document in (ROOT / "docs" / "api.md", ROOT / "README.md"):
        named |= set(SDK_CALL.findall(document.read_text()))
    assert ("rope", "temperature") in named
    missing = []
    with Client(base_url="http://127.0.0.1:9") as client:
        missing += [f"client.{r}.{m}" for r, m in sorted(named) if not callable(getattr(getattr(client, r), m, None))]

    async def check_async() -> list[str]:
        async with AsyncClient(base_url="http://127.0.0.1:9") as client:
            return [
                f"async client.{r}.{m}" for r, m in sorted(named) if not callable(getattr(getattr(client, r), m, None))
            ]

    missing += asyncio.run(check_async())
    assert missing == []
