"""The SDK's generated models are exactly what the generator makes from the committed OpenAPI snapshot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "clients" / "python" / "scripts" / "regenerate_models.py"
COMMITTED = REPO_ROOT / "clients" / "python" / "posenc_client" / "_models.py"


def test_generated_models_are_up_to_date(tmp_path: Path) -> None:
    fresh = tmp_path / "_models.py"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--output", str(fresh)], cwd=REPO_ROOT, check=True, capture_output=True
    )
    assert fresh.read_text() == COMMITTED.read_text(), (
        "clients/python/posenc_client/_models.py is stale: run "
        "`.venv/bin/python clients/python/scripts/regenerate_models.py --snapshot`"
    )


def test_generated_models_are_not_hand_edited() -> None:
    header = COMMITTED.read_text().splitlines()[0]
    assert "GENERATED from tests/contract/openapi.json" in header
