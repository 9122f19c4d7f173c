"""A suite's result in the page's result view (headless Chromium): the suite's ranking, then each task with its
findings, its chart (the training size marked) and its table. The result is a real one: each task a real tiny
benchmark run in this process (``run_job``), put together by the suite's own ``assemble_suite``; a real suite
takes minutes, too long for a browser test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from posenc.schemas.jobs import JobSpec
from posenc.training.hooks import NoHooks
from posenc.training.jobs import assemble_suite, run_job

pytestmark = pytest.mark.browser

TINY = {"model": {"layers": 1, "dim": 16, "heads": 2}, "train": {"steps": 20, "batch_size": 8, "warmup_steps": 2},
        "methods": [{"method": "rope"}, {"method": "nope"}], "seeds": [0, 1]}  # fmt: skip
TASKS = [
    {"data": {"task": "copy_single", "size": 3}, "eval": {"sizes": [2, 3, 5], "samples": 8}},
    {"data": {"task": "copy", "size": 2}, "eval": {"sizes": [1, 2, 4], "samples": 8}},
]


@pytest.fixture(scope="module")
def suite_job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A job record as GET /v1/jobs/{id} gives it, with a suite's result made of two real tiny benchmarks."""
    root = tmp_path_factory.mktemp("suite")
    tasks = []
    for position, task in enumerate(TASKS):
        spec = JobSpec.model_validate({**TINY, **task})
        tasks.append(run_job("benchmark", spec, job_dir=root / f"task-{position}", artifact_root=root, hooks=NoHooks()))
    suite_spec = JobSpec.model_validate({"suite": "quick", "methods": TINY["methods"], "seeds": TINY["seeds"]})
    result = assemble_suite(suite_spec, tasks, root / "suite")
    return {"id": "suite-job", "kind": "benchmark", "status": "succeeded", "result": result, "artifacts": []}


def test_a_suite_shows_each_task_with_its_chart(
    gateway: str, session: Callable[..., Any], suite_job: dict[str, Any], tmp_path: Path
) -> None:
    browser = session(gateway)
    browser.open("methods")
    page = browser.page
    page.evaluate("document.querySelector('#view-methods').hidden = true;"
                  "document.querySelector('#view-jobs').hidden = false;"
                  "document.querySelector('#j-current').hidden = false")  # fmt: skip
    drawn = page.evaluate(
        "(job) => window.posencPage.renderResult(job, document.querySelector('#j-result'), 'suite')", suite_job
    )
    assert drawn == ["suite-task-0", "suite-task-1"]
    result = suite_job["result"]
    first = page.locator("#j-result > *").first
    assert first.evaluate("node => node.className") == "findings"  # the ranking first
    for entry in result["mrr"]:
        assert entry["method"] in first.inner_text()
    headings = page.locator("#j-result h4").all_inner_texts()
    assert headings[:2] == ["Task 1: copy_single", "Task 2: copy"]
    for index, task in enumerate(result["tasks"]):
        option = page.evaluate(f"window.posencPage.charts['suite-task-{index}'].getOption()")
        assert option["xAxis"][0]["data"] == [str(size) for size in task["data"]["sizes"]]
        assert [series["name"] for series in option["series"][::3]] == ["nope", "rope"]
        marks = option["series"][0]["markLine"]["data"]
        assert [mark["xAxis"] for mark in marks] == [str(task["data"]["train_size"])]
        findings = page.locator(f"#j-result ul[aria-label='Findings of task {index + 1}'] li").all_inner_texts()
        assert findings == task["findings"]
        rows = page.locator(f"#j-result table[aria-label='Summary of task {index + 1}'] tr").count()
        assert rows == 1 + len([row for row in task["summary"] if row["metric"] == task["data"]["metric"]])
    browser.screenshot("results-suite")
    browser.assert_no_errors()
