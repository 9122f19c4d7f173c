"""The README's methods and settings tables are the ones the code generates (``python -m posenc.catalogue``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc import catalogue

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize(("markers", "table"), list(catalogue.blocks().items()), ids=["methods", "settings"])
def test_readme_table_matches_the_code(markers: tuple[str, str], table: str) -> None:
    text = README.read_text()
    begin, end = markers
    assert begin in text, f"README.md lost its {begin} marker"
    assert end in text, f"README.md lost its {end} marker"
    shown = text[text.index(begin) + len(begin) : text.index(end)].strip()
    assert shown == table, "README.md is stale: run `python -m posenc.catalogue --write README.md`"


def test_every_registered_method_is_in_the_readme() -> None:
    text = README.read_text()
    for spec in catalogue.pe.list_methods():
        assert f"| `{spec.name}` |" in text
