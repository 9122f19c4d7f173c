"""The benchmark plots' data and the result's ``not_learned``: each probe drawn on its own with the control apart,
the spread band clipped to the metric's range and said so, a method whose runs did not all learn labelled with how
many did, a leaderboard number resting on fewer seeds than the job ran marked; ``not_learned`` per run, and per
probe where learning is per probe (a passkey job, ``tests.helpers.passkey_job``)."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from posenc.training.jobs import not_learned_runs
from posenc.training.report import (
    band_label,
    leaderboard_png,
    panel_order,
    plot_png,
    score_series,
    seeds_note,
)
from tests.helpers.passkey_job import SIZES, passkey_result, table

Failed = frozenset[tuple[str, int]] | set[tuple[str, int]]


def sequence_rows(values: dict[str, dict[int, dict[int, float]]], failed: Failed = frozenset()) -> list[dict[str, Any]]:
    """Rows of a sequence job, one per (method, seed, size); a run in ``failed`` did not learn."""
    return [
        {"method": method, "seed": seed, "size": size, "metric": "exact_match", "value": value,
         "learned": (method, seed) not in failed, "in_distribution": 1.0}
        for method, by_seed in values.items()
        for seed, by_size in by_seed.items()
        for size, value in by_size.items()
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------------ probes
def test_each_probe_is_its_own_series_and_the_control_its_own_panel_last() -> None:
    result = passkey_result()
    series = score_series(result["table"], "score", "probe")
    lines = {(line.panel, line.method): line for line in series}
    assert set(lines) == {(probe, method) for probe in ("passkey", "common_words") for method in ("alibi", "rope")}
    # rope's passkey is its own: the mean over seeds (depths first) of passkey alone, not averaged with the control
    passkey = lines[("passkey", "rope")]
    assert passkey.sizes == list(SIZES)
    assert passkey.mean[0] == pytest.approx(statistics.fmean([1.0, 0.1, 0.3]))
    assert passkey.mean[3] == pytest.approx(statistics.fmean([0.9, 0.1, 0.3]))  # seed 0 at 128: depths 1.0, 0.8
    assert lines[("common_words", "rope")].mean[0] == pytest.approx(0.9)
    # 2 of rope's 3 seeds did not learn passkey; every seed learned the control
    assert (passkey.learned, passkey.seeds) == (1, 3)
    assert passkey.label == "rope (1/3 seeds learned)"
    assert lines[("common_words", "rope")].label == "rope"
    assert panel_order(series, "common_words") == [("passkey", "passkey"), ("common_words", "common_words (control)")]


def test_without_a_panel_tag_one_panel_holds_every_method() -> None:
    series = score_series(table(), "score")
    assert {(line.panel, line.method) for line in series} == {(None, "alibi"), (None, "rope")}
    assert panel_order(series) == [(None, "")]


def test_the_probe_plot_is_a_png() -> None:
    png = plot_png(
        passkey_result()["table"], "score", 64, "probes", "tokens", panel_tag="probe", control="common_words"
    )
    assert png.startswith(b"\x89PNG")


# ------------------------------------------------------------------------------------------------ the band
def test_the_band_is_clipped_to_the_metrics_range() -> None:
    values = {"rope": {0: {10: 1.0, 20: 0.0}, 1: {10: 1.0, 20: 0.0}, 2: {10: 0.2, 20: 0.9}}}
    (line,) = score_series(sequence_rows(values), "exact_match")
    # at 10: 0.733 ± 0.377, whose upper edge 1.11 no exact match can reach; at 20: 0.3 ± 0.424, lower edge -0.12
    assert line.mean == pytest.approx([statistics.fmean([1.0, 1.0, 0.2]), 0.3])
    assert line.high[0] == 1.0
    assert line.low[0] == pytest.approx(line.mean[0] - statistics.pstdev([1.0, 1.0, 0.2]))
    assert line.low[1] == 0.0
    assert line.high[1] == pytest.approx(0.3 + statistics.pstdev([0.0, 0.0, 0.9]))


def test_a_perplexity_band_is_clipped_at_one_only() -> None:
    rows = [dict(row, metric="ppl", learned=None) for row in
            sequence_rows({"rope": {0: {10: 1.0}, 1: {10: 1.0}, 2: {10: 10.0}}})]  # fmt: skip
    (line,) = score_series(rows, "ppl")
    # 4 ± 4.24: no perplexity is below 1, and none is too high
    assert line.low == [1.0]
    assert line.high == pytest.approx([4.0 + statistics.pstdev([1.0, 1.0, 10.0])])
    assert line.label == "rope"  # learned None (perplexity) counts as learned


def test_the_band_says_what_it_is() -> None:
    assert band_label("exact_match") == "band: mean ± std over seeds (clipped to [0, 1])"
    assert band_label("score") == "band: mean ± std over seeds (clipped to [0, 1])"
    assert band_label("ppl") == "band: mean ± std over seeds (clipped at 1 from below)"


def test_a_run_that_did_not_learn_is_counted_in_the_label() -> None:
    values = {"rope": {seed: {10: 1.0} for seed in range(3)}, "alibi": {seed: {10: 1.0} for seed in range(2)}}
    labels = [line.label for line in score_series(sequence_rows(values, failed={("rope", 2)}), "exact_match")]
    assert labels == ["alibi", "rope (2/3 seeds learned)"]


# ------------------------------------------------------------------------------------------------ leaderboard
def test_a_leaderboard_number_on_fewer_seeds_than_ran_is_marked() -> None:
    board = {entry["method"]: entry for entry in passkey_result()["leaderboard"]}
    assert seeds_note(board["rope"]) == "1/3 seeds rated"
    assert seeds_note(board["alibi"]) is None
    # an entry without the counts: its per-seed values, None for an unrated seed
    assert seeds_note({"method": "nope", "median": 1.0, "per_seed": [1.0, None]}) == "1/2 seeds rated"
    assert seeds_note({"method": "rope", "median": 0.5, "per_seed": []}) is None  # a suite's rank: no seeds
    assert leaderboard_png(list(board.values()), "median", "L_eff / L_train", "probes").startswith(b"\x89PNG")


# ------------------------------------------------------------------------------------------------ not_learned
def test_not_learned_names_every_probe_a_run_failed() -> None:
    result = passkey_result()
    assert result["not_learned"] == ["rope seed 1: passkey", "rope seed 2: passkey"]
    assert result["not_learned_probes"] == [
        {"method": "rope", "seed": 1, "probe": "passkey"},
        {"method": "rope", "seed": 2, "probe": "passkey"},
    ]
    learned = {(row["method"], row["seed"], row["probe"], row["learned"]) for row in result["table"]}
    assert ("rope", 1, "passkey", False) in learned
    assert ("rope", 1, "common_words", True) in learned
    assert ("rope", 0, "passkey", True) in learned


def test_not_learned_keeps_its_run_form_where_learning_is_per_run() -> None:
    rows = sequence_rows({"rope": {0: {10: 1.0}, 2: {10: 0.1}}, "nope": {0: {10: 0.0}}}, {("rope", 2), ("nope", 0)})
    assert not_learned_runs(rows) == ["nope seed 0", "rope seed 2"]
