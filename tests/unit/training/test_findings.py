"""A benchmark's generated summary: the best method and its number with the spread over seeds (and the seeds it
rests on when fewer than ran), the runner-up and the gap, the ranking, the runs left out (the probes: with the
probes they failed), the probes' effective length and control, a baseline's differences; built from small
hand-made results shaped as ``assemble_benchmark`` returns them, and a passkey job's (``tests.helpers.passkey_job``)."""

from __future__ import annotations

import random
import statistics
from typing import Any

from posenc.training.findings import findings
from tests.helpers.passkey_job import passkey_result

Values = dict[str, dict[int, dict[int, float]]]  # method -> seed -> size -> value


def rows(values: Values, metric: str = "exact_match", learned: dict[tuple[str, int], bool | None] | None = None,
         **tags: Any) -> list[dict[str, Any]]:  # fmt: skip
    """Long-format table rows, one per (method, seed, size); ``learned`` per run, True unless given."""
    return [
        {"method": method, "seed": seed, "size": size, **tags, "metric": metric, "value": value,
         "learned": (learned or {}).get((method, seed), True), "in_distribution": 1.0}
        for method, by_seed in values.items()
        for seed, by_size in by_seed.items()
        for size, value in by_size.items()
    ]  # fmt: skip


def sequence_result(table: list[dict[str, Any]], train_size: int = 10, **fields: Any) -> dict[str, Any]:
    sizes = sorted({row["size"] for row in table})
    data = {"family": "sequence", "task": "copy", "unit": "items", "metric": "exact_match",
            "higher_is_better": True, "train_size": train_size, "sizes": sizes}  # fmt: skip
    return {"kind": "benchmark", "data": data, "table": table, "summary": [], "runs": [], "not_learned": [], **fields}


def text_result(table: list[dict[str, Any]]) -> dict[str, Any]:
    data = {"family": "text", "task": "tiny", "unit": "tokens", "metric": "ppl", "higher_is_better": False,
            "train_size": 128, "sizes": [128, 256, 512]}  # fmt: skip
    return {"kind": "benchmark", "data": data, "table": table, "summary": [], "runs": [], "not_learned": []}


def entry(method: str, per_seed: list[float | None], **fields: Any) -> dict[str, Any]:
    """A leaderboard entry as ``effective_length`` writes it."""
    rated = [value for value in per_seed if value is not None]
    return {
        "method": method,
        "median": statistics.median(rated) if rated else None,
        "min": min(rated) if rated else None,
        "per_seed": per_seed,
        "seeds": list(range(len(per_seed))),
        "unrated_seeds": [seed for seed, value in enumerate(per_seed) if value is None],
        "not_learned": {},
    } | fields


def probes_result(leaderboard: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    data = {"family": "probes", "task": "probes", "unit": "tokens", "metric": "score", "higher_is_better": True,
            "train_size": 64, "sizes": [48, 64, 96, 128, 192, 256]}  # fmt: skip
    return {"kind": "benchmark", "data": data, "table": [], "summary": [], "runs": [], "not_learned": [],
            "leaderboard": leaderboard, **fields}  # fmt: skip


# ------------------------------------------------------------------------------------------------ metrics
def test_the_best_method_is_the_highest_mean_past_the_training_size_with_its_std_over_seeds() -> None:
    values: Values = {
        # the in-distribution sizes (5, 10) would reverse the order: they are not counted
        "rope": {0: {5: 0.0, 10: 0.0, 15: 0.8, 20: 0.6}, 1: {5: 0.0, 10: 0.0, 15: 0.9, 20: 0.9},
                 2: {5: 0.0, 10: 0.0, 15: 0.5, 20: 0.5}},
        "alibi": {seed: {5: 1.0, 10: 1.0, 15: 0.2, 20: 0.2} for seed in range(3)},
    }  # fmt: skip
    sentences = findings(sequence_result(rows(values)))
    # rope: seed means 0.7, 0.9, 0.5 -> 0.7 ± 0.163; alibi 0.2 ± 0: gap 0.5 > 0.163
    assert sentences[0] == (
        "Best mean exact_match past the training size (10 items): rope, 0.7 ± 0.163 over 3 seeds; runner-up alibi "
        "at 0.2 ± 0 over 3 seeds, 0.5 behind; the gap exceeds one standard deviation over seeds: separated at 3 seeds."
    )
    assert sentences[1] == (
        "Ranking by mean exact_match past 10 items, best first (± std over seeds): rope 0.7 (±0.163) > alibi 0.2 (±0)."
    )
    assert len(sentences) == 2


def test_a_gap_within_one_std_is_not_separated() -> None:
    values: Values = {
        "rope": {0: {20: 0.9}, 1: {20: 0.5}, 2: {20: 0.7}},  # 0.7 ± 0.163
        "alibi": {0: {20: 0.6}, 1: {20: 0.6}, 2: {20: 0.6}},  # 0.6: 0.1 behind
    }
    first = findings(sequence_result(rows(values)))[0]
    assert "rope, 0.7 ± 0.163 over 3 seeds" in first
    assert "runner-up alibi at 0.6 ± 0 over 3 seeds, 0.1 behind" in first
    assert first.endswith("the gap is within one standard deviation over seeds: not separated at 3 seeds.")


def test_each_size_averages_its_tags_before_the_sizes_are_averaged() -> None:
    table = [
        *rows({"rope": {0: {15: 1.0}}}, probe="a"),
        *rows({"rope": {0: {15: 0.0}}}, probe="b"),  # size 15: 0.5 over its tags
        *rows({"rope": {0: {20: 0.9}}}, probe="a"),  # size 20: 0.9; the seed: 0.7 (not 0.633 over the rows)
    ]
    first = findings(sequence_result(table))[0]
    assert "rope, 0.7 (1 seed: no spread); no other method is ranked." in first


def test_only_the_headline_metric_is_ranked() -> None:
    table = rows({"rope": {0: {20: 0.3}}, "alibi": {0: {20: 0.4}}})
    table += rows({"rope": {0: {20: 0.99}}, "alibi": {0: {20: 0.01}}}, metric="token_accuracy")
    first = findings(sequence_result(table))[0]
    assert first.startswith("Best mean exact_match past the training size (10 items): alibi, 0.4 (1 seed: no spread)")


def test_lower_is_better_ranks_the_lowest_perplexity_first() -> None:
    values: Values = {
        "rope": {0: {128: 9.0, 256: 12.0, 512: 14.0}, 1: {128: 9.0, 256: 12.0, 512: 14.0}},  # 13
        "alibi": {0: {128: 50.0, 256: 11.0, 512: 11.0}, 1: {128: 50.0, 256: 11.0, 512: 13.0}},  # 11.5 ± 0.5
        "nope": {0: {256: 1234.5, 512: 1234.5}, 1: {256: 1234.5, 512: 1234.5}},
    }
    sentences = findings(text_result(rows(values, metric="ppl", learned=dict.fromkeys(
        [("rope", 0), ("rope", 1), ("alibi", 0), ("alibi", 1), ("nope", 0), ("nope", 1)]))))  # fmt: skip
    assert sentences[0] == (
        "Best mean ppl past the training size (128 tokens; lower is better): alibi, 11.5 ± 0.5 over 2 seeds; "
        "runner-up rope at 13 ± 0 over 2 seeds, 1.5 behind; the gap exceeds one standard deviation over seeds: "
        "separated at 2 seeds."
    )
    assert sentences[1] == (
        "Ranking by mean ppl past 128 tokens, best first (± std over seeds): alibi 11.5 (±0.5) < rope 13 (±0) "
        "< nope 1230 (±0)."
    )
    assert len(sentences) == 2  # learned None (perplexity) counts as learned: no run is left out


def test_runs_that_did_not_learn_are_named_and_left_out_of_the_numbers() -> None:
    values: Values = {
        "rope": {0: {10: 1.0, 20: 0.8}, 1: {10: 1.0, 20: 0.6}, 2: {10: 0.3, 20: 0.0}},
        "alibi": {0: {10: 1.0, 20: 0.5}, 1: {10: 1.0, 20: 0.5}, 2: {10: 1.0, 20: 0.5}},
        "nope": {0: {10: 0.2, 20: 0.9}, 1: {10: 0.1, 20: 0.9}},  # never learned: its 0.9 is not ranked
    }
    failed: dict[tuple[str, int], bool | None] = {("rope", 2): False, ("nope", 0): False, ("nope", 1): False}
    result = sequence_result(rows(values, learned=failed), not_learned=["nope seed 0", "nope seed 1", "rope seed 2"])
    sentences = findings(result)
    # rope: 0.7 ± 0.1 over its 2 learned seeds of the 3 it ran (seed 2's 0 left out)
    assert sentences[0] == (
        "Best mean exact_match past the training size (10 items): rope, 0.7 ± 0.1 over 2 of 3 seeds; runner-up alibi "
        "at 0.5 ± 0 over 3 seeds, 0.2 behind; the gap exceeds one standard deviation over seeds: separated at 2 and 3 "
        "seeds."
    )
    assert sentences[1].endswith("rope 0.7 (±0.1; 2 of 3 seeds) > alibi 0.5 (±0); not learned: nope.")
    assert sentences[2] == (
        "Did not learn the training size (10 items), left out of the ranking numbers: nope seeds 0, 1 (no run "
        "learned: not ranked); rope seed 2."
    )


def test_no_method_learned_says_there_is_nothing_to_rank() -> None:
    table = rows({"rope": {0: {20: 0.9}}, "alibi": {0: {20: 0.8}}}, learned={("rope", 0): False, ("alibi", 0): False})
    sentences = findings(sequence_result(table))
    assert sentences[0] == "No method learned its training size (10 items): nothing to rank."
    assert sentences[1].endswith("best first (± std over seeds): none; not learned: alibi, rope.")
    assert "alibi seed 0 (no run learned: not ranked); rope seed 0 (no run learned: not ranked)" in sentences[2]


def test_a_single_seed_has_no_spread() -> None:
    sentences = findings(sequence_result(rows({"rope": {0: {20: 0.9}}, "alibi": {0: {20: 0.5}}})))
    assert sentences[0] == (
        "Best mean exact_match past the training size (10 items): rope, 0.9 (1 seed: no spread); runner-up alibi at "
        "0.5 (1 seed: no spread), 0.4 behind; 1 seed: no spread, so the gap is not judged against the spread over "
        "seeds."
    )
    assert sentences[1].endswith("rope 0.9 > alibi 0.5.")


def test_tied_methods_are_said_to_be_tied() -> None:
    values: Values = {method: {0: {20: 0.5}, 1: {20: 0.7}} for method in ("rope", "alibi")}
    sentences = findings(sequence_result(rows(values)))
    assert sentences[0].startswith("Best mean exact_match past the training size (10 items): alibi, 0.6")  # by name
    assert sentences[0].endswith("0 behind; they are tied.")
    assert sentences[1].endswith("alibi 0.6 (±0.1) = rope 0.6 (±0.1).")


# ------------------------------------------------------------------------------------------------ baseline
def test_a_baseline_gets_every_other_methods_difference() -> None:
    values: Values = {
        "base": {0: {20: 0.4}, 1: {20: 0.4}},
        "yarn": {0: {20: 0.9}, 1: {20: 0.7}},
        "pi": {0: {20: 0.3}, 1: {20: 0.3}},
    }
    sentences = findings(sequence_result(rows(values)), baseline="base")
    assert sentences[-2:] == [
        "yarn vs base: mean exact_match 0.8 vs 0.4, +0.4 (better).",
        "pi vs base: mean exact_match 0.3 vs 0.4, -0.1 (worse).",
    ]
    assert not any(" vs " in sentence for sentence in findings(sequence_result(rows(values))))


def test_a_study_outside_its_rules_regime_says_so_last() -> None:
    values: Values = {"base": {0: {256: 20.0}}, "yarn": {0: {256: 15.0}}}
    warning = "yarn: no pair in the kept band at this setup"
    result = text_result(rows(values, metric="ppl")) | {"study": {"regime_warnings": [warning]}}
    sentences = findings(result, baseline="base")
    assert sentences[-1] == f"Regime: {warning}"
    assert not any(s.startswith("Regime") for s in findings(text_result(rows(values, metric="ppl")), baseline="base"))


def test_a_lower_is_better_baseline_calls_a_lower_number_better() -> None:
    values: Values = {"base": {0: {256: 20.0}}, "ntk": {0: {256: 15.0}}}
    sentences = findings(text_result(rows(values, metric="ppl")), baseline="base")
    assert sentences[-1] == "ntk vs base: mean ppl 15 vs 20, -5 (better)."


def test_a_missing_or_unlearned_baseline_is_said_so() -> None:
    values: Values = {"yarn": {0: {20: 0.9}}, "base": {0: {20: 0.1}}}
    missing = findings(sequence_result(rows(values)), baseline="nothing")
    assert missing[-1] == "No difference from the baseline nothing is given: it is not among the ranked methods."
    failed = findings(sequence_result(rows(values, learned={("base", 0): False})), baseline="base")
    assert failed[-1] == "No difference from the baseline base is given: it learned no run."


# ------------------------------------------------------------------------------------------------ probes
def test_probes_rank_the_median_effective_length_with_its_range_over_seeds() -> None:
    result = probes_result([entry("rope", [2.0, 1.5, 3.0]), entry("alibi", [1.5, 1.5, 1.0]), entry("nope", [None] * 3)])
    sentences = findings(result)
    assert sentences[0] == (
        "Best effective length L_eff / L_train (L_train = 64 tokens): rope, median 2x over 3 seeds (range 1.5x..3x); "
        "runner-up alibi at 1.5x over 3 seeds (range 1x..1.5x), 0.5x behind; the seed ranges overlap: not separated "
        "at 3 seeds."
    )
    assert sentences[1] == (
        "Ranking by median L_eff / L_train, best first (range over seeds): rope 2x (1.5x..3x) > alibi 1.5x "
        "(1x..1.5x); no seed rated: nope."
    )
    assert sentences[2] == (
        "Unrated, left out of the ranking numbers: no probe other than the control learned at the training length "
        "(64 tokens): nope seeds 0, 1, 2 (no seed rated: not ranked)."
    )
    assert len(sentences) == 3


def test_probe_seed_ranges_that_do_not_overlap_are_separated() -> None:
    first = findings(probes_result([entry("alibi", [1.0, 0.75]), entry("rope", [2.0, 1.5])]))[0]
    assert "rope, median 1.75x over 2 seeds (range 1.5x..2x)" in first
    assert first.endswith("0.875x behind; the seed ranges do not overlap: separated at 2 seeds.")


def test_an_unrated_probe_seed_is_left_out_of_the_median_and_named() -> None:
    sentences = findings(probes_result([entry("rope", [3.0, None, 1.0]), entry("alibi", [1.5, 1.5, 1.5])]))
    assert sentences[0].startswith(
        "Best effective length L_eff / L_train (L_train = 64 tokens): rope, median 2x over 2 of 3 seeds"
    )
    assert sentences[1] == (
        "Ranking by median L_eff / L_train, best first (range over seeds): rope 2x (1x..3x; 2 of 3 seeds) > alibi "
        "1.5x (1.5x..1.5x)."
    )
    assert sentences[2] == (
        "Unrated, left out of the ranking numbers: no probe other than the control learned at the training length "
        "(64 tokens): rope seed 1."
    )


def test_a_seed_at_the_longest_length_is_a_lower_bound() -> None:
    sentences = findings(probes_result([entry("rope", [4.0, 2.0, 4.0]), entry("alibi", [1.0, 1.0, 1.0])]))
    assert sentences[2:] == [
        "L_eff reached the longest length evaluated (256 tokens = 4x), so it is only a lower bound for: rope (2 of 3 "
        "seeds)."
    ]


def test_probes_not_learned_by_a_rated_run_and_the_control_are_reported() -> None:
    leaderboard = [
        entry("rope", [2.0, 1.0], not_learned={"multi_key": [1], "common_words": [0]}),
        entry("nope", [1.0, None], not_learned={"passkey": [1], "multi_key": [1]}),  # seed 1: unrated, named above
    ]
    control = {
        "probe": "common_words",
        "by_method": {
            "rope": {"64": {"mean": 0.1, "std": 0.0, "seeds": 2}, "128": {"mean": 0.9, "std": 0.0, "seeds": 2},
                     "256": {"mean": 0.7, "std": 0.1, "seeds": 2}},  # past 64: 0.8
            "nope": {"128": {"mean": 0.6, "std": 0.0, "seeds": 2}},
        },
    }  # fmt: skip
    sentences = findings(probes_result(leaderboard, control=control))
    assert "Probes not learned by a run, left out of that run's L_eff: rope multi_key (seed 1)." in sentences
    assert sentences[-1] == (
        "Control probe common_words (it needs little position information, so it should be flat across methods), "
        "mean score past 64 tokens: nope 0.6, rope 0.8; range across methods 0.2."
    )


def test_a_probes_baseline_difference_is_a_ratio() -> None:
    sentences = findings(
        probes_result([entry("base", [1.0]), entry("yarn", [2.0]), entry("pi", [0.5])]), baseline="base"
    )
    assert sentences[-2:] == ["yarn vs base: L_eff / L_train 2x vs 1x, +1x (better).",
                              "pi vs base: L_eff / L_train 0.5x vs 1x, -0.5x (worse)."]  # fmt: skip


# ------------------------------------------------------------------------------------------------ degenerate
NOTHING = "Nothing past the training size (10 items) to compare: the result has no scored size above it."


def test_nothing_past_the_training_size_is_one_sentence() -> None:
    assert findings(sequence_result([])) == [NOTHING]
    assert findings(sequence_result(rows({"rope": {0: {5: 1.0, 10: 1.0}}}))) == [NOTHING]
    unscored = sequence_result(rows({"rope": {0: {10: 1.0, 20: None}}}))  # type: ignore[dict-item]
    assert findings(unscored) == [NOTHING]


def test_missing_keys_never_raise() -> None:
    missing = ["Nothing past the training size to compare: the result has no scored size above it."]
    assert findings({}) == missing
    assert findings({"data": None, "table": None}) == missing
    assert findings({"data": {"train_size": 10, "unit": "items", "sizes": [20]}}) == [NOTHING]
    bare_probes = {"data": {"family": "probes", "train_size": 10, "unit": "items", "sizes": [20]}, "leaderboard": None}
    assert findings(bare_probes) == [NOTHING]
    odd = probes_result([{"method": "rope"}, {"method": "alibi", "per_seed": [1.0], "median": None}], control={})
    assert findings(odd)[0].startswith("Best effective length L_eff / L_train (L_train = 64 tokens): alibi, median 1x")


def test_the_sentences_do_not_depend_on_the_order_of_the_rows() -> None:
    values: Values = {"rope": {0: {15: 0.9, 20: 0.7}, 1: {15: 0.6, 20: 0.5}}, "alibi": {0: {20: 0.4}, 1: {20: 0.8}}}
    table = rows(values)
    shuffled = list(table)
    random.Random(0).shuffle(shuffled)
    assert findings(sequence_result(table)) == findings(sequence_result(shuffled))


def test_a_passkey_job_names_the_probe_its_unrated_runs_failed_and_the_seeds_its_number_rests_on() -> None:
    """rope seeds 1 and 2 learned the control (0.83, 0.97) but not passkey (0.1, 0.3): they are unrated, and the
    findings say which probe they failed, never that they learned no probe; rope's 2x rests on 1 of 3 seeds."""
    result = passkey_result()
    assert result["not_learned"] == ["rope seed 1: passkey", "rope seed 2: passkey"]
    sentences = findings(result)
    assert sentences[1] == (
        "Ranking by median L_eff / L_train, best first (range over seeds): alibi 4x (4x..4x) > rope 2x (1 of 3 seeds)."
    )
    assert sentences[2] == (
        "Unrated, left out of the ranking numbers: no probe other than the control learned at the training length "
        "(64 tokens; in brackets a probe's score at the two shortest lengths): rope seeds 1, 2 learned the control "
        "common_words (0.83..0.97) but not passkey (0.1..0.3)."
    )
    assert not any("learned no probe" in sentence.lower() for sentence in sentences)


def test_an_unrated_run_that_failed_the_control_too_is_said_so() -> None:
    leaderboard = [entry("rope", [2.0, None, None], not_learned={"passkey": [1, 2], "common_words": [2]})]
    control = {"probe": "common_words", "by_method": {"rope": {"128": {"mean": 0.5, "std": 0.0, "seeds": 3}}}}
    sentences = findings(probes_result(leaderboard, control=control))
    assert sentences[1] == (
        "Unrated, left out of the ranking numbers: no probe other than the control learned at the training length "
        "(64 tokens): rope seed 1 learned the control common_words but not passkey; rope seed 2 learned neither "
        "passkey nor the control common_words."
    )


def test_a_per_probe_not_learned_entry_counts_as_its_run() -> None:
    result = sequence_result(rows({"rope": {0: {20: 0.9}}}), not_learned=["rope seed 1: passkey"])
    assert findings(result)[-1] == (
        "Did not learn the training size (10 items), left out of the ranking numbers: rope seed 1."
    )
