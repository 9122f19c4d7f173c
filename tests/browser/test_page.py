"""The page at ``/`` in headless Chromium against the real gateway: each view renders with no console error, the
heatmap shows exactly the API's tensor, a buggy config shows its warning, a job submitted from the page succeeds
and its curves appear. Screenshots of every view are saved (see conftest)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.browser

API_KEY = "browser-test-key"  # the conftest's
BASE = {"hidden_size": 1024, "num_attention_heads": 8, "head_dim": 128, "num_hidden_layers": 4,
        "max_position_embeddings": 32768}  # fmt: skip
GEMMA_TYPES = ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]
# Gemma 3 with the global linear factor on its sliding layers (v5, per layer type), and as published
LINEAR = {"rope_type": "linear", "factor": 8.0}
BUGGY = {**BASE, "model_type": "gemma3_text", "layer_types": GEMMA_TYPES, "sliding_window": 512,
         "rope_parameters": {"full_attention": {**LINEAR, "rope_theta": 1000000.0},
                             "sliding_attention": {**LINEAR, "rope_theta": 10000.0}}}  # fmt: skip
FIXED = {**BUGGY, "rope_parameters": {
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
}}  # fmt: skip


def api(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{url}/{path}", json=body, headers={"X-API-Key": API_KEY}, timeout=30)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def head_of(item: dict[str, Any], head: int) -> list[list[Any]]:
    """One head's (Nq, Nk) matrix of a (.., H, Nq, Nk) JSON tensor, values exactly as sent."""
    rows, cols = item["shape"][-2:]
    start = head * rows * cols
    return [item["data"][start + i * cols : start + (i + 1) * cols] for i in range(rows)]


def shown_matrix(page: Any) -> tuple[int, list[list[Any]], dict[str, Any]]:
    shown = page.evaluate("window.posencPage.heatmap")
    return shown["head"], shown["matrix"], page.evaluate("window.posencPage.request")


def compute(page: Any) -> None:
    page.evaluate("window.posencPage.heatmap = null")
    page.get_by_role("button", name="Compute").click()
    page.wait_for_function("window.posencPage.heatmap !== null && document.querySelector('#status').textContent"
                           ".includes('exact value')")  # fmt: skip


def test_methods_view_shows_the_api_tensor_exactly(
    gateway: str, session: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    browser = session(gateway)
    browser.open("methods")
    page = browser.page
    page.locator("#m-method").select_option("alibi")
    page.get_by_label("Heads").fill("4")
    page.get_by_label("Query length").fill("12")
    compute(page)
    page.locator("#m-head").select_option("2")
    head, matrix, request = shown_matrix(page)
    assert head == 2
    assert request["path"] == "v1/bias"
    expected = api(gateway, request["path"], request["body"])["tensors"]["bias"]
    assert matrix == head_of(expected, 2)
    assert "-inf" in matrix[0]  # causal: masked cells are shown as the API spells them
    # the Toeplitz profile: one line per head
    assert page.evaluate("window.posencPage.charts['m-profile'].getOption().series.length") == 4

    # hover a cell: the tooltip shows its exact value
    page.locator("#m-heatmap").scroll_into_view_if_needed()
    box = page.locator("#m-heatmap").bounding_box()
    x, y = page.evaluate("window.posencPage.charts['m-heatmap'].convertToPixel({seriesIndex: 0}, [3, 7])")
    page.mouse.move(box["x"] + x - 1, box["y"] + y - 1)
    page.mouse.move(box["x"] + x, box["y"] + y)
    tooltip = page.locator("#m-heatmap div", has_text="query 7, key 3")
    tooltip.wait_for()
    assert str(matrix[7][3]) in tooltip.inner_text()

    # copy as curl / as Python: the exact request, which gives the same tensor when run
    page.get_by_role("button", name="Copy as Python").click()
    snippet = page.get_by_label("Request", exact=True).input_value()
    assert "httpx.post(" in snippet
    namespace: dict[str, Any] = {}
    monkeypatch.setenv("POSENC_API_KEY", API_KEY)
    exec(snippet, namespace)
    assert namespace["tensors"]["bias"] == expected
    page.get_by_role("button", name="Copy as curl").click()
    curl = page.get_by_label("Request", exact=True).input_value()
    assert curl.startswith("curl ")
    if shutil.which("curl"):
        ran = subprocess.run(["bash", "-c", curl], env={**os.environ, "POSENC_API_KEY": API_KEY},
                             capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
        assert json.loads(ran.stdout)["tensors"]["bias"] == expected
    browser.screenshot("methods-alibi")

    # a rotary method: attention map per head and the wavelength per pair with its bands
    page.locator("#m-method").select_option("rope_yarn")
    page.get_by_label("Factor *").fill("4")
    page.get_by_label("Original Max Position Embeddings *").fill("16")
    compute(page)
    page.locator("#m-head").select_option("1")
    head, matrix, request = shown_matrix(page)
    assert request["path"] == "v1/attention"
    assert matrix == head_of(api(gateway, request["path"], request["body"])["tensors"]["weights"], 1)
    page.locator("#m-profile-note", has_text="pairs wrap within").wait_for()
    bands = page.evaluate("window.posencPage.charts['m-profile'].getOption().series.map(s => s.name)")
    assert {"extrapolated", "interpolated"} <= set(bands)
    browser.screenshot("methods-rope-yarn")
    browser.assert_no_errors()


def test_the_page_is_keyboard_usable_and_fits_a_narrow_window(gateway: str, session: Callable[..., Any]) -> None:
    browser = session(gateway, width=420, height=800)
    browser.open("methods")
    page = browser.page
    page.get_by_role("tab", name="Methods").focus()
    page.keyboard.press("ArrowRight")
    assert page.get_by_role("tab", name="Configs").get_attribute("aria-selected") == "true"
    assert page.locator("#configs").is_visible()
    assert not page.locator("#methods").is_visible()
    page.keyboard.press("ArrowLeft")  # (not on to Jobs: this gateway has no Redis, so no job list)
    assert page.locator("#methods").is_visible()
    page.get_by_label("Heads").focus()
    page.keyboard.press("Enter")  # submits the form: the heatmap renders
    page.wait_for_function("window.posencPage.heatmap !== null")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('input, select, textarea')].filter(e => !e.labels?.length"
        " && !e.getAttribute('aria-label')).map(e => e.id || e.className)"
    )
    assert unlabelled == []
    browser.screenshot("methods-narrow")
    browser.assert_no_errors()


def test_configs_view_shows_the_warning_and_compares(gateway: str, session: Callable[..., Any], tmp_path: Path) -> None:
    browser = session(gateway)
    browser.open("configs")
    page = browser.page
    setup_a = page.locator('.setup[data-side="a"]')
    setup_b = page.locator('.setup[data-side="b"]')
    setup_a.get_by_label("config.json", exact=True).fill(json.dumps(BUGGY))
    setup_a.get_by_role("button", name="Resolve A").click()
    warning = setup_a.locator('li[data-code="sliding_layers_scaled"]')
    warning.wait_for()
    assert "layers: 0, 1, 2" in warning.inner_text()
    assert '"factor":8' in warning.inner_text()  # the evidence
    assert "4 layers, 2 runs" in setup_a.locator("caption").inner_text()  # 0-2 sliding, 3 full

    setup_b.get_by_label("Preset").select_option("gemma-3-4b")
    assert json.loads(setup_b.get_by_label("config.json", exact=True).input_value())["model_type"] == "gemma3"
    fixed = tmp_path / "config.json"
    fixed.write_text(json.dumps(FIXED))
    setup_b.get_by_label("Upload config.json").set_input_files(str(fixed))
    page.wait_for_function("document.querySelector('.setup[data-side=b] .c-config').value.includes('full_attention\"')")
    setup_b.get_by_role("button", name="Resolve B").click()
    setup_b.locator("li.ok", has_text="No known bug pattern").wait_for()
    assert "4 layers, 2 runs" in setup_b.locator("caption").inner_text()  # 0-2 sliding, 3 full

    page.get_by_role("button", name="Compare A and B").click()
    page.locator("#c-result", has_text="part at position").wait_for()
    series = page.evaluate("window.posencPage.charts['c-chart'].getOption().series")
    assert [s["name"] for s in series] == ["angle", "probe logit"]
    assert any(point[1] is not None for point in series[0]["data"])
    browser.screenshot("configs")
    browser.assert_no_errors()


def test_jobs_view_runs_a_job_to_success(stack: Any, session: Callable[..., Any]) -> None:
    browser = session(stack.url)
    browser.open("jobs")
    page = browser.page
    page.get_by_label("Template").select_option("Train: RoPE on copy_single (about 5 s)")
    page.get_by_role("button", name="Submit job").click()
    page.locator("#j-status", has_text="succeeded").wait_for(timeout=120_000)
    points = page.evaluate("window.posencPage.charts['j-loss'].getOption().series[0].data")
    assert len(points) >= 2
    job_id = page.locator("#j-id").inner_text()
    with stack.client() as client:
        job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "succeeded"
    assert points == job["result"]["loss_curve"]
    page.get_by_role("button", name="Download loss_curve.json").wait_for()
    assert page.locator("#j-events li").count() >= 2
    assert page.locator("#j-list tr", has_text=job_id[:8]).count() == 1
    browser.screenshot("jobs-train")

    # the extrapolation curve with its spread over two seeds
    page.get_by_label("Template").select_option("Extrapolate: RoPE on copy_single, 2 seeds (about 15 s)")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_function(f"document.querySelector('#j-id').textContent !== {json.dumps(job_id)}")
    page.locator("#j-status", has_text="succeeded").wait_for(timeout=120_000)
    option = page.evaluate("window.posencPage.charts['j-curve'].getOption()")
    assert option["xAxis"][0]["data"] == [2, 4, 6, 8]
    assert option["series"][0]["name"] == "rope"
    assert len(option["series"]) == 3  # the mean, and the band: its lower edge and its width
    means = option["series"][0]["data"]
    with stack.client() as client:
        rows = client.get(f"/v1/jobs/{page.locator('#j-id').inner_text()}").json()["result"]["rows"]
    for size, mean in zip([2, 4, 6, 8], means, strict=True):
        seen = [row["exact_match"] for row in rows if row["size"] == size]
        assert len(seen) == 2  # two seeds
        assert mean == pytest.approx(sum(seen) / 2)
    browser.screenshot("jobs-extrapolate")

    # cancel: a benchmark stopped from the page
    extrapolated = page.locator("#j-id").inner_text()
    page.get_by_label("Template").select_option(index=2)
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_function(f"document.querySelector('#j-id').textContent !== {json.dumps(extrapolated)}")
    page.get_by_role("button", name="Cancel job").click()
    page.locator("#j-status", has_text="cancelled").wait_for(timeout=60_000)
    browser.screenshot("jobs-cancelled")
    browser.assert_no_errors()
