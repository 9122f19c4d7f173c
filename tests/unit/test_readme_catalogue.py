"""The docs' generated tables (methods, tasks, settings) are the ones the code generates
(``python -m posenc.catalogue``), each on its page; the limits page quotes every budget and bound the code has."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc import catalogue, pe

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@pytest.mark.parametrize(("markers", "table"), list(catalogue.blocks().items()), ids=["methods", "tasks", "settings"])
def test_docs_table_matches_the_code(markers: tuple[str, str], table: str) -> None:
    page = ROOT / catalogue.PAGES[markers]
    text = page.read_text()
    begin, end = markers
    assert begin in text, f"{page} lost its {begin} marker"
    assert end in text, f"{page} lost its {end} marker"
    shown = text[text.index(begin) + len(begin) : text.index(end)].strip()
    assert shown == table, f"{page} is stale: run `python -m posenc.catalogue --write`"


def test_every_registered_method_is_in_the_methods_page() -> None:
    text = (DOCS / "methods" / "index.md").read_text()
    for spec in pe.list_methods():
        assert f"| `{spec.name}` |" in text


def test_writing_the_tables_puts_each_in_place(tmp_path: Path) -> None:
    """``--write`` replaces only what is between the markers: stale tables become the generated ones and the
    prose around them stays."""
    for markers, relative in catalogue.PAGES.items():
        begin, end = markers
        page = tmp_path / relative
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f"before\n{begin}\n| stale |\n{end}\nafter\n")
    written = catalogue.update_pages(tmp_path)
    assert sorted(written) == sorted(tmp_path / relative for relative in catalogue.PAGES.values())
    for markers, table in catalogue.blocks().items():
        begin, end = markers
        assert (tmp_path / catalogue.PAGES[markers]).read_text() == f"before\n{begin}\n{table}\n{end}\nafter\n"


def test_a_page_without_its_markers_is_an_error(tmp_path: Path) -> None:
    for relative in catalogue.PAGES.values():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("no markers here\n")
    with pytest.raises(ValueError, match="has no"):
        catalogue.update_pages(tmp_path)


def test_the_limits_page_lists_every_budget_and_the_config_bounds() -> None:
    """Every setting that caps a request or a job is in the limits page's table with its default, and the config
    reader's bounds are the numbers the page quotes."""
    from posenc.real_models import config_fields
    from posenc.schemas import jobs, rope
    from posenc.settings import Settings

    section = (DOCS / "limits.md").read_text()
    budgets = [name for name in Settings.model_fields if name.startswith(("max_", "inline_", "compute_"))]
    budgets += ["rate_limit_per_minute", "torch_threads"]
    for name in budgets:
        assert f"`{name}`" in section, f"the limits page does not list {name}"
    defaults = Settings()
    assert f"{defaults.max_request_work:,}" in section
    assert f"{defaults.max_json_elements:,}" in section
    for bound in (config_fields.MAX_LAYERS, config_fields.MAX_HEAD_DIM, config_fields.MAX_HEADS):
        assert str(bound) in section
    for bound in (jobs.MAX_METHODS, jobs.MAX_SEEDS, jobs.MAX_EVAL_SIZES, rope.MAX_DECODE_TOKENS):
        assert str(bound) in section
