"""The OpenAPI document is a contract: any change to it must be made on purpose.

When this fails after an intended change, regenerate the snapshot and the SDK models together:
    .venv/bin/python clients/python/scripts/regenerate_models.py --snapshot
and commit tests/contract/openapi.json and clients/python/posenc_client/_models.py.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from posenc.settings import Settings
from service.main import create_app

SNAPSHOT = Path(__file__).with_name("openapi.json")
REGENERATE = ".venv/bin/python clients/python/scripts/regenerate_models.py --snapshot"


def render(document: object) -> str:
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def test_openapi_matches_the_snapshot(tmp_path: Path) -> None:
    current = render(create_app(Settings(state_dir=tmp_path, redis_url=None)).openapi())
    committed = SNAPSHOT.read_text()
    if current != committed:
        diff = "".join(
            list(
                difflib.unified_diff(
                    committed.splitlines(keepends=True),
                    current.splitlines(keepends=True),
                    "tests/contract/openapi.json",
                    "app.openapi()",
                )
            )[:80]
        )
        raise AssertionError(f"the API changed; if on purpose, run `{REGENERATE}`\n{diff}")
