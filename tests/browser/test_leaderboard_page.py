"""A finished leaderboard suite in the page's result view (headless Chromium): its table sorts by the column whose
header is clicked, and reverses on a second click. The result is made of real tiny benchmarks run in this process
(``run_job``, with ``train.until``) put together by ``assemble_suite``, and the leaderboard table computed from
them by ``posenc.training.leaderboard``; a real leaderboard suite takes more than an hour."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from posenc.schemas.jobs import JobSpec
from posenc.training.hooks import NoHooks
from posenc.training.jobs import assemble_suite, run_job
from posenc.training.leaderboard import leaderboard_table

pytestmark = pytest.mark.browser

TINY = {
    "model": {"layers": 1, "dim": 16, "heads": 2},
    "methods": [{"method": "rope"}, {"method": "nope"}, {"method": "alibi"}],
    "seeds": [0, 1],
}
TRAIN = {"steps": 30, "batch_size": 8, "warmup_steps": 2}
# The first task's threshold (0) is reached at the first check, so every run there learned and has a score; the
# second's (an exact match of 1 after 30 steps) is as good as never reached: its cells say "cap".
TASKS = [
    {"data": {"task": "copy_single", "size": 2}, "eval": {"sizes": [1, 2, 4], "samples": 8},
     "train": {**TRAIN, "until": {"score": 0.0, "every": 10, "samples": 8}}},
    {"data": {"task": "copy", "size": 2}, "eval": {"sizes": [1, 2, 4], "samples": 8},
     "train": {**TRAIN, "until": {"score": 1.0, "every": 10, "samples": 8}}},
]  # fmt: skip


@pytest.fixture(scope="module")
def leaderboard_job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A job record as GET /v1/jobs/{id} gives it: a suite's result with its leaderboard table."""
    root = tmp_path_factory.mktemp("leaderboard")
    tasks = []
    for position, task in enumerate(TASKS):
        spec = JobSpec.model_validate({**TINY, **task})
        tasks.append(run_job("benchmark", spec, job_dir=root / f"task-{position}", artifact_root=root, hooks=NoHooks()))
    suite_spec = JobSpec.model_validate({"suite": "quick", "methods": TINY["methods"], "seeds": TINY["seeds"]})
    result = assemble_suite(suite_spec, tasks, root / "suite")
    result["leaderboard"] = leaderboard_table(tasks, [30, 30])
    return {"id": "leaderboard-job", "kind": "benchmark", "status": "succeeded", "result": result, "artifacts": []}


def _column(page: Any, index: int) -> list[str]:
    texts: list[str] = page.locator(
        f"table[aria-label='Leaderboard'] tbody tr td:nth-child({index + 1})"
    ).all_inner_texts()
    return texts


def _score(text: str) -> float:
    """A score cell's mean (before "±" and a "†"); a cell without one sorts last."""
    return math.inf if text == "–" else float(text.split("±")[0].strip().rstrip("†"))


def test_the_leaderboard_table_sorts_by_the_clicked_column(
    gateway: str, session: Callable[..., Any], leaderboard_job: dict[str, Any]
) -> None:
    browser = session(gateway)
    browser.open("methods")
    page = browser.page
    page.evaluate("document.querySelector('#view-methods').hidden = true;"
                  "document.querySelector('#view-jobs').hidden = false;"
                  "document.querySelector('#j-current').hidden = false")  # fmt: skip
    page.evaluate("(job) => window.posencPage.renderResult(job, document.querySelector('#j-result'), 'lb')",
                  leaderboard_job)  # fmt: skip
    table = page.locator("table[aria-label='Leaderboard']")
    board = leaderboard_job["result"]["leaderboard"]
    headers = table.locator("thead th").all_inner_texts()
    assert headers[:3] == ["rank", "method", "MRR"]
    assert headers[3:6] == ["copy_single exact_match ↑", "copy_single learned", "copy_single steps"]
    assert table.locator("tbody tr").count() == len(board["rows"]) == 3

    # by method: A to Z, then Z to A on a second click
    method = page.get_by_role("button", name="method", exact=True)
    method.click()
    assert _column(page, 1) == sorted(row["method"] for row in board["rows"])
    assert table.locator("thead th").nth(1).get_attribute("aria-sort") == "ascending"
    method.click()
    assert _column(page, 1) == sorted((row["method"] for row in board["rows"]), reverse=True)
    assert table.locator("thead th").nth(1).get_attribute("aria-sort") == "descending"

    # by a task's score: low to high, then high to low; each row's cells are its own method's
    score = page.get_by_role("button", name="copy_single exact_match ↑", exact=True)
    cells = {row["method"]: row["cells"]["copy_single"] for row in board["rows"]}
    assert all(cell["score"] is not None and cell["seeds_learned"] == 2 for cell in cells.values())
    expected = sorted(cells, key=lambda name: (cells[name]["score"], name))
    score.click()
    assert [_score(text) for text in _column(page, 3)] == pytest.approx([cells[name]["score"] for name in expected],
                                                                        abs=0.006)  # fmt: skip
    assert set(_column(page, 1)) == set(cells)
    for name, shown in zip(_column(page, 1), _column(page, 3), strict=True):
        assert _score(shown) == pytest.approx(cells[name]["score"], abs=0.006)  # the row moved whole
        assert ("†" in shown) == bool(cells[name]["seed_dependent"])  # a value that flips with the seed is marked
    score.click()
    assert [_score(text) for text in _column(page, 3)] == sorted((_score(t) for t in _column(page, 3)), reverse=True)
    # the never-learned task: no score, "cap" for the steps with each seed's verdict
    by_method = {row["method"]: row["cells"]["copy"] for row in board["rows"]}
    for name, steps in zip(_column(page, 1), _column(page, 8), strict=True):
        cell = by_method[name]
        assert steps.startswith("cap" if cell["steps_needed"] is None else f"{cell['steps_needed']:g}")
        for entry in cell["diagnosis"]:
            assert entry["verdict"] in steps
    assert table.locator("thead th").nth(0).get_attribute("aria-sort") == "none"
    table.scroll_into_view_if_needed()
    browser.screenshot("results-leaderboard")
    browser.assert_no_errors()
