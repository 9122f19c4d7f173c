"""The documentation site builds with ``mkdocs build --strict``: every page in the nav exists, every page is in the
nav, and every link and anchor between pages resolves (a warning fails the build)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mkdocs_build_strict_passes(tmp_path: Path) -> None:
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's end-of-life notice, not a build warning
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert (site / "index.html").is_file()
    for page in ("methods/rotary", "jobs", "limits", "real-models", "api", "page"):
        assert (site / page / "index.html").is_file(), f"{page} was not built"


def test_every_docs_page_is_in_the_nav() -> None:
    """mkdocs only reports pages left out of the nav at INFO level, so check it here."""
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"))

    def pages(entries: object) -> set[str]:
        if isinstance(entries, str):
            return {entries}
        if isinstance(entries, list):
            return set().union(*(pages(entry) for entry in entries))
        if isinstance(entries, dict):
            return set().union(*(pages(value) for value in entries.values()))
        return set()

    in_nav = pages(config["nav"])
    on_disk = {str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md")}
    assert on_disk - in_nav == set(), "docs pages missing from the nav in mkdocs.yml"
    assert in_nav - on_disk == set(), "nav entries without a page"
