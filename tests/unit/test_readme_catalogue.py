"""The README's methods and settings tables are the ones the code generates (``python -m posenc.catalogue``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc import catalogue

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize(("markers", "table"), list(catalogue.blocks().items()), ids=["methods", "tasks", "settings"])
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


def test_the_limits_section_lists_every_budget_and_the_config_bounds() -> None:
    """Every setting that caps a request or a job is in the README's limits table with its default, and the
    config reader's bounds are the numbers the section quotes."""
    from posenc.real_models import config_fields
    from posenc.schemas import jobs, rope
    from posenc.settings import Settings

    text = README.read_text()
    section = text[text.index("## Limits: every request bounded") : text.index("## Configuration")]
    budgets = [name for name in Settings.model_fields if name.startswith(("max_", "inline_", "compute_"))]
    budgets += ["rate_limit_per_minute", "torch_threads"]
    for name in budgets:
        assert f"`{name}`" in section, f"the README's limits section does not list {name}"
    defaults = Settings()
    assert f"{defaults.max_request_work:,}" in section
    assert f"{defaults.max_json_elements:,}" in section
    for bound in (config_fields.MAX_LAYERS, config_fields.MAX_HEAD_DIM, config_fields.MAX_HEADS):
        assert str(bound) in section
    for bound in (jobs.MAX_METHODS, jobs.MAX_SEEDS, jobs.MAX_EVAL_SIZES, rope.MAX_DECODE_TOKENS):
        assert str(bound) in section
