"""A suite's result in the page's result view (headless Chromium): the suite's ranking, then each task with its
findings, its chart (the training size marked, the band said) and its table. The result is a real one: each task a
real tiny benchmark run in this process (``run_job``), put together by the suite's own ``assemble_suite``; a real
suite takes minutes, too long for a browser test. And a passkey job's result (``tests.helpers.passkey_job``): a
chart per probe with the control apart, the band inside [0, 1], the ranking's seeds rated of seeds run and each
run's probes not learned."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from posenc.schemas.jobs import JobSpec
from posenc.training.findings import findings
from posenc.training.hooks import NoHooks
from posenc.training.jobs import assemble_suite, run_job
from tests.helpers.passkey_job import passkey_result

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
        assert [series["id"] for series in option["series"][::3]] == ["nope", "rope"]
        # each line named as the result's plot names it ("nope (0/2 seeds learned)" when a run did not learn)
        (panel,) = task["score_series"]["panels"]
        assert [series["name"] for series in option["series"][::3]] == [line["label"] for line in panel["lines"]]
        assert option["title"][0]["subtext"] == "line: mean over seeds; band: mean ± std over seeds (clipped to [0, 1])"
        marks = option["series"][0]["markLine"]["data"]
        assert [mark["xAxis"] for mark in marks] == [str(task["data"]["train_size"])]
        findings = page.locator(f"#j-result ul[aria-label='Findings of task {index + 1}'] li").all_inner_texts()
        assert findings == task["findings"]
        rows = page.locator(f"#j-result table[aria-label='Summary of task {index + 1}'] tr").count()
        assert rows == 1 + len([row for row in task["summary"] if row["metric"] == task["data"]["metric"]])
    browser.screenshot("results-suite")
    browser.assert_no_errors()


def test_a_passkey_job_shows_each_probe_apart_and_the_seeds_its_ranking_rests_on(
    gateway: str, session: Callable[..., Any]
) -> None:
    browser = session(gateway)
    browser.open("methods")
    page = browser.page
    page.evaluate("document.querySelector('#view-methods').hidden = true;"
                  "document.querySelector('#view-jobs').hidden = false;"
                  "document.querySelector('#j-current').hidden = false")  # fmt: skip
    result = passkey_result()
    result["findings"] = findings(result)
    job = {"id": "passkey-job", "kind": "benchmark", "status": "succeeded", "result": result, "artifacts": []}
    drawn = page.evaluate(
        "(job) => window.posencPage.renderResult(job, document.querySelector('#j-result'), 'pk')", job
    )
    assert drawn[:2] == ["pk-scores-0", "pk-scores-1"]  # passkey, then the control apart
    passkey = page.evaluate("window.posencPage.charts['pk-scores-0'].getOption()")
    control = page.evaluate("window.posencPage.charts['pk-scores-1'].getOption()")
    assert passkey["title"][0]["text"] == "score by size (tokens): passkey"
    assert control["title"][0]["text"] == "score by size (tokens): common_words (control)"
    assert [series["name"] for series in passkey["series"][::3]] == ["alibi", "rope (1/3 seeds learned)"]
    assert [series["name"] for series in control["series"][::3]] == ["alibi", "rope"]
    # rope's passkey line is passkey's alone: seeds 1.0, 0.1, 0.3 at 16 tokens, never averaged with the control
    assert passkey["series"][3]["data"][0] == pytest.approx((1.0 + 0.1 + 0.3) / 3)
    for option in (passkey, control):
        assert option["title"][0]["subtext"].endswith("band: mean ± std over seeds (clipped to [0, 1])")
        for low, width in zip(option["series"][1::3], option["series"][2::3], strict=True):
            assert all(0.0 <= a <= a + b <= 1.0 for a, b in zip(low["data"], width["data"], strict=True))
    ranking = page.locator("#j-result table[aria-label='Effective length ranking'] tr").all_inner_texts()
    assert ranking[2].split("\t")[:4] == ["rope", "2", "2", "1/3 (fewer than ran)"]
    assert "passkey (seeds 1, 2)" in ranking[2]
    runs = page.locator("#j-result table[aria-label='Runs'] tr").all_inner_texts()
    assert [row.split("\t")[2] for row in runs[1:]] == ["none"] * 4 + ["passkey"] * 2
    shown = page.locator("#j-result ul.findings li").all_inner_texts()
    assert any("learned the control common_words (0.83..0.97) but not passkey" in text for text in shown)
    browser.screenshot("results-passkey")
    browser.assert_no_errors()
