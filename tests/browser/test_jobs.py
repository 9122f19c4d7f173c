"""The Jobs view in headless Chromium against ``posenc serve`` (Redis, a worker, the gateway): every template runs
through the worker, learns its training size and ends within its stated time (0.4x to 2.5x); the finished job's
view reads as a result (findings first, 3 significant digits, the training size marked, each run's loss at its own
steps); two finished jobs side by side; errors next to the control that caused them; a job cancelled from the
page. Screenshots of each state are saved (see conftest)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

pytestmark = pytest.mark.browser

# a number as the page writes it: an integer, or at most 3 significant digits
READABLE = re.compile(r"^(-?\d+|-?0\.0*[1-9]\d{0,2}|-?[1-9]\d{0,2}\.\d{0,2}|-?[1-9]\d*(\.\d+)?e[-+]\d+|)$")


def finished(page: Any, stack: Any, previous: str | None) -> dict[str, Any]:
    """Wait for the page's current job (a new one: not ``previous``) to succeed; its record from the API."""
    if previous is not None:
        page.wait_for_function(f"document.querySelector('#j-id').textContent !== {json.dumps(previous)}")
    page.locator("#j-status", has_text="succeeded").wait_for(timeout=120_000)
    page.locator("#j-result ul.findings").wait_for()
    with stack.client() as client:
        job: dict[str, Any] = client.get(f"/v1/jobs/{page.locator('#j-id').inner_text()}").json()
    return job


def seconds(job: dict[str, Any]) -> float:
    """What a user waits: from the submission to the end (the queue, the worker's set-up and the run)."""
    return (datetime.fromisoformat(job["finished_at"]) - datetime.fromisoformat(job["created_at"])).total_seconds()


def run_template(page: Any, name: str) -> None:
    page.get_by_label("Template").select_option(name)
    page.get_by_role("button", name="Submit job").click()


def assert_result_view(page: Any, job: dict[str, Any]) -> None:
    """Findings are the view's first element, and every number in its tables has at most 3 significant digits."""
    first = page.evaluate("document.querySelector('#j-result').firstElementChild.className")
    assert first == "findings"
    cells = page.evaluate("[...document.querySelectorAll('#j-result td')].map(td => td.textContent)")
    assert cells
    numeric = [cell for cell in cells if re.fullmatch(r"-?[\d.e+-]+", cell)]
    assert numeric
    assert [cell for cell in numeric if not READABLE.match(cell)] == []
    assert "0000000" not in page.locator("#j-result").inner_text()


def assert_training_size_marked(page: Any, chart: str, train_size: int) -> None:
    option = page.evaluate(f"window.posencPage.charts['{chart}'].getOption()")
    marks = [point["xAxis"] for series in option["series"] for point in (series.get("markLine") or {}).get("data", [])]
    assert marks == [str(train_size)]
    assert str(train_size) in option["xAxis"][0]["data"]


def assert_losses_at_run_steps(page: Any, chart: str, steps: int, runs: list[str]) -> None:
    """Each run's loss is a line of its own, drawn at steps 1 … steps of that run (not the job's running count)."""
    series = page.evaluate(f"window.posencPage.charts['{chart}'].getOption().series")
    lines = {line["name"]: line["data"] for line in series}
    assert set(lines) <= set(runs)
    assert lines
    for name, points in lines.items():
        assert points, name
        assert all(1 <= step <= steps for step, _ in points), (name, points)


def test_templates_learn_in_their_stated_time_and_read_as_results(stack: Any, session: Callable[..., Any]) -> None:
    browser = session(stack.url)
    browser.open("jobs")
    page = browser.page
    assert page.evaluate("window.scrollY") == 0
    templates = page.evaluate("window.posencPage.templates")
    names = list(templates)
    assert [templates[name]["body"]["kind"] for name in names] == ["train", "extrapolate", "benchmark"]
    measured: dict[str, float] = {}

    # train: its loss curve from the result, its findings (learned or not), and it learned
    run_template(page, names[0])
    job = finished(page, stack, None)
    measured[names[0]] = seconds(job)
    assert job["result"]["learned"] is True
    assert_result_view(page, job)
    assert "learned the training size" in page.locator("#j-result ul.findings").inner_text()
    points = page.evaluate("window.posencPage.charts['j-losses'].getOption().series[0].data")
    assert points == job["result"]["loss_curve"]
    page.get_by_role("button", name="Download loss_curve.json").wait_for()
    assert page.locator("#j-events li").count() >= 2
    assert page.locator("#j-list tr", has_text=job["id"][:8]).count() == 1
    browser.screenshot("jobs-train")

    # extrapolate, two seeds: the score by size with its spread, the training size marked, each seed's loss
    run_template(page, names[1])
    job = finished(page, stack, job["id"])
    extrapolated = job
    measured[names[1]] = seconds(job)
    assert [run["learned"] for run in job["result"]["runs"]] == [True, True]
    assert_result_view(page, job)
    option = page.evaluate("window.posencPage.charts['j-scores'].getOption()")
    assert option["xAxis"][0]["data"] == ["2", "4", "6", "8"]
    assert option["series"][0]["name"] == "rope"
    assert len(option["series"]) == 3  # the mean, and the band: its lower edge and its width
    for size, mean in zip([2, 4, 6, 8], option["series"][0]["data"], strict=True):
        seen = [row["exact_match"] for row in job["result"]["rows"] if row["size"] == size]
        assert len(seen) == 2  # two seeds
        assert mean == pytest.approx(sum(seen) / 2)
    assert_training_size_marked(page, "j-scores", 4)
    steps = job["spec"]["train"]["steps"]
    assert_losses_at_run_steps(page, "j-losses", steps, ["rope seed 0", "rope seed 1"])
    browser.screenshot("jobs-extrapolate")

    # benchmark: every method learns; the findings, the score curves per method with their spread, each run's loss
    run_template(page, names[2])
    job = finished(page, stack, job["id"])
    benchmark = job
    measured[names[2]] = seconds(job)
    assert [run["learned"] for run in job["result"]["runs"]] == [True] * 6
    assert_result_view(page, job)
    shown = page.locator("#j-result ul.findings li").all_inner_texts()
    assert shown == job["result"]["findings"]
    option = page.evaluate("window.posencPage.charts['j-scores'].getOption()")
    assert [series["name"] for series in option["series"][::3]] == ["alibi", "nope", "rope"]
    assert_training_size_marked(page, "j-scores", 4)
    runs = [f"{method} seed {seed}" for method in ("rope", "alibi", "nope") for seed in (0, 1)]
    assert_losses_at_run_steps(page, "j-losses", job["spec"]["train"]["steps"], runs)
    assert page.locator("#j-result table[aria-label='Benchmark table'] tr").count() == 1 + 3 * 4 * 2  # 2 metrics
    browser.screenshot("jobs-benchmark")

    # the stated durations hold: what a user waited is within 0.4x to 2.5x of them (measured on 2 cores 0.75 s,
    # 1.4 s and 5.7 s quiet; 0.87 s, 1.6 s, 5.7 s with both cores kept busy; 0.92 s, 2.0 s, 5.9 s beside the rest
    # of the suite; the margin is for a loaded CI machine)
    for name, took in measured.items():
        stated = templates[name]["seconds"]
        assert f"about {stated} s" in name
        assert 0.4 * stated <= took <= 2.5 * stated, (name, took, measured)
    print(f"templates measured (submission to end): {measured}")

    # two finished jobs side by side
    page.get_by_role("button", name="Refresh list").click()
    page.locator("#j-compare").wait_for()
    page.get_by_label("Job A").select_option(extrapolated["id"])
    page.get_by_label("Job B").select_option(benchmark["id"])
    page.get_by_role("button", name="Compare jobs").click()
    page.locator("#j-side-b ul.findings").wait_for()
    for side, expected in (("a", extrapolated), ("b", benchmark)):
        assert expected["id"] in page.locator(f"#j-side-{side} h3").inner_text()
        option = page.evaluate(f"window.posencPage.charts['j-cmp-{side}-scores'].getOption()")
        assert option["series"][0]["name"] == ("rope" if side == "a" else "alibi")
    left = page.locator("#j-side-a").bounding_box()
    right = page.locator("#j-side-b").bounding_box()
    assert left["x"] + left["width"] <= right["x"]
    assert abs(left["y"] - right["y"]) < 2
    page.locator("#j-sides").scroll_into_view_if_needed()
    browser.screenshot("jobs-compare")

    # an error is said next to the control that caused it
    page.get_by_label("Job request").fill('{"kind": "train", "spec": {"methods": []}}')
    page.get_by_role("button", name="Submit job").click()
    error = page.locator("#j-form-error")
    error.filter(has_text="422").wait_for()
    button = page.get_by_role("button", name="Submit job").bounding_box()
    assert 0 <= error.bounding_box()["y"] - (button["y"] + button["height"]) < 60
    browser.errors.clear()  # the refused request (422) is logged by Chromium
    browser.screenshot("jobs-error")

    # cancel: a bigger benchmark stopped from the page
    body = templates[names[2]]["body"]
    body["spec"]["train"]["steps"] = 100_000
    page.get_by_label("Job request").fill(json.dumps(body))
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_function(f"document.querySelector('#j-id').textContent !== {json.dumps(benchmark['id'])}")
    assert page.locator("#j-form-error").inner_text() == ""
    page.get_by_role("button", name="Cancel job").click()
    page.locator("#j-status", has_text="cancelled").wait_for(timeout=60_000)
    browser.screenshot("jobs-cancelled")
    browser.assert_no_errors()
