"""The page at ``/`` in headless Chromium against the real gateway: each view renders with no console error, the
heatmap shows exactly the API's tensor, a buggy config shows its warning, a job submitted from the page succeeds
and its curves appear. Screenshots of every view are saved (see conftest)."""

from __future__ import annotations

import itertools
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
    assert page.locator("#view-configs").is_visible()
    assert not page.locator("#view-methods").is_visible()
    page.keyboard.press("ArrowLeft")  # (not on to Jobs: this gateway has no Redis, so no job list)
    assert page.locator("#view-methods").is_visible()
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
    # nothing to resolve yet: the message is said in that setup, under its button
    setup_a.get_by_role("button", name="Resolve A").click()
    setup_a.locator(".c-error", has_text="paste a config.json").wait_for()
    assert setup_b.locator(".c-error").inner_text() == ""
    setup_a.get_by_label("config.json", exact=True).fill(json.dumps(BUGGY))
    setup_a.get_by_role("button", name="Resolve A").click()
    warning = setup_a.locator('li[data-code="sliding_layers_scaled"]')
    warning.wait_for()
    assert setup_a.locator(".c-error").inner_text() == ""  # cleared by the next try
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


LABELS = """(axisIndex) => {
  const chart = window.posencPage.charts['m-heatmap'];
  const axis = chart.getModel().getComponent(axisIndex === 0 ? 'xAxis' : 'yAxis', 0).axis;
  return axis.getViewLabels().map((label) => axis.dataToCoord(label.tickValue));
}"""


def label_gaps(page: Any, axis: int) -> tuple[int, float]:
    """How many tick labels an axis of the heatmap shows and the smallest distance (px) between two of them."""
    coords = sorted(page.evaluate(f"({LABELS})({axis})"))
    gaps = [b - a for a, b in itertools.pairwise(coords)]
    return len(coords), min(gaps) if gaps else float("inf")


@pytest.mark.parametrize(("width", "length"), [(1280, 16), (1280, 128), (420, 128)])
def test_heatmap_axes_are_readable_at_every_size(
    gateway: str, session: Callable[..., Any], width: int, length: int
) -> None:
    """Every label while they fit (16 keys); a large heatmap's labels thinned so that none overlap (3-digit labels
    need about 24 px across, a line of text about 14 px down)."""
    browser = session(gateway, width=width, height=900)
    browser.open("methods")
    page = browser.page
    page.locator("#m-method").select_option("alibi")
    page.get_by_label("Heads").fill("1")
    page.get_by_label("Query length").fill(str(length))
    compute(page)
    across, gap_x = label_gaps(page, 0)
    down, gap_y = label_gaps(page, 1)
    assert gap_x >= 24, gap_x
    assert gap_y >= 14, gap_y
    if length == 16 and width == 1280:
        assert across == down == 16  # nothing thinned while every label fits
    else:
        assert 4 <= across < length
        assert 4 <= down < length
    browser.screenshot(f"methods-heatmap-{length}-at-{width}px")
    browser.assert_no_errors()


def test_no_scroll_on_load_and_a_failed_compute_clears_its_stale_result(
    gateway: str, session: Callable[..., Any]
) -> None:
    browser = session(gateway)
    browser.open("methods")
    page = browser.page
    assert page.evaluate("window.scrollY") == 0  # the address's #methods is no element's id
    page.locator("#m-method").select_option("alibi")
    compute(page)
    assert page.locator("#m-title").inner_text().startswith("bias B")

    # rope_yarn without its required factor: the API refuses it; nothing of alibi's stays under the new heading
    page.locator("#m-method").select_option("rope_yarn")
    page.get_by_role("button", name="Compute").click()
    error = page.locator("#m-error")
    error.filter(has_text="422").wait_for()
    assert page.evaluate("window.posencPage.heatmap") is None
    assert page.evaluate("window.posencPage.charts['m-heatmap'].getOption().series || []") == []
    assert page.locator("#m-title").inner_text() == ""
    assert page.locator("#m-head option").count() == 0
    # the message sits right under the button that caused it, not only in the status line far above
    button = page.get_by_role("button", name="Compute").bounding_box()
    assert 0 <= error.bounding_box()["y"] - (button["y"] + button["height"]) < 40
    browser.errors.clear()  # the refused request (422) is logged by Chromium
    browser.screenshot("methods-failed-compute")

    # the next good Compute clears the message
    page.get_by_label("Factor *").fill("4")
    page.get_by_label("Original Max Position Embeddings *").fill("16")
    compute(page)
    assert error.inner_text() == ""
    browser.assert_no_errors()
