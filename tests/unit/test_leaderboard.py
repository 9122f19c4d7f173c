"""The leaderboard suite: its methods derived from the registry, a spec without methods, and the table of a
finished suite from hand-built task results."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from posenc.pe import get_method, list_methods
from posenc.schemas.jobs import JobSpec
from posenc.tasks.suites import (
    SUITES,
    is_scaling_rule,
    leaderboard_methods,
    mean_reciprocal_rank,
    suite_specs,
)
from posenc.training.leaderboard import (
    diagnose_run,
    format_cell,
    leaderboard_markdown,
    leaderboard_table,
    run_learned,
    seed_dependence,
    suite_results,
)

# The issue's 24: NoPE, ALiBi, RoPE, sinusoidal, FoX, FIRE, KERPLE log and power, Sandwich, T5, xPos, FoPE, p-RoPE,
# learned absolute, axial, CoPE, CAPE, Huang, Shaw, TENER, Transformer-XL, TAPE, DA-Transformer, stick-breaking.
ISSUE_METHODS = {
    "nope", "alibi", "rope", "sinusoidal", "fox", "fire", "kerple_log", "kerple_power", "sandwich", "t5", "xpos",
    "fope", "rope_proportional", "learned_absolute", "axial", "cope", "cape", "huang", "shaw", "tener",
    "transformer_xl", "tape", "da_transformer", "stick_breaking",
}  # fmt: skip
SCALING_RULES = {
    "rope_linear", "rope_ntk", "rope_dynamic_ntk", "rope_yarn", "rope_llama3", "rope_longrope", "rope_ntk_alpha",
}  # fmt: skip


# ------------------------------------------------------------------------------------------ the methods
def test_the_leaderboard_methods_are_the_issues_24() -> None:
    methods = leaderboard_methods()
    assert set(methods) == ISSUE_METHODS
    assert len(methods) == len(set(methods)) == 24


def test_the_1d_methods_left_out_are_exactly_the_scaling_rules() -> None:
    one_d = {method.name for method in list_methods() if method.axes == 1}
    assert one_d - set(leaderboard_methods()) == SCALING_RULES
    assert {method.name for method in list_methods() if method.axes == 1 and is_scaling_rule(method)} == SCALING_RULES
    assert all(get_method(name).kind.value == "rotary" for name in SCALING_RULES)


def test_a_leaderboard_spec_without_methods_gets_every_method_with_the_training_length_where_required() -> None:
    parts = suite_specs(JobSpec.model_validate({"suite": "leaderboard"}))
    assert [part.data.task or part.data.corpus for part in parts] == ["copy_single", "copy", "probes", "stdlib"]
    for part in parts:
        assert [ref.method for ref in part.methods] == leaderboard_methods()
        assert part.seeds == [0, 1, 2]
        assert part.train.until is not None
        assert part.train.until.every <= part.train.steps
        given = {ref.method: ref.params for ref in part.methods if ref.params}
        assert given == {"fope": {"train_length": part.train.length if part.data.task in (None, "probes") else 19}}
    assert parts[3].train.until is not None
    assert parts[3].train.until.score is not None


def test_a_leaderboard_spec_with_methods_uses_those() -> None:
    parts = suite_specs(JobSpec.model_validate({"suite": "leaderboard", "methods": [{"method": "alibi"}]}))
    assert all([ref.method for ref in part.methods] == ["alibi"] for part in parts)


def test_only_a_suite_with_its_own_methods_may_leave_them_out() -> None:
    with pytest.raises(ValidationError, match="at least one entry in 'methods'"):
        JobSpec.model_validate({"data": {"task": "copy", "size": 8}})
    with pytest.raises(Exception, match="takes the methods to compare"):
        suite_specs(JobSpec.model_validate({"suite": "quick"}))


# ------------------------------------------------------------------------------------------ the table
def _task(
    task: str, metric: str, higher: bool, runs: list[tuple[str, int, float, int | None]], cap_hit: set[tuple[str, int]]
) -> dict[str, Any]:
    """A suite task's result: per run (method, seed, score past the training size, steps_needed); the runs in
    ``cap_hit`` never reached until (steps_needed None). Each run also scores 0.99 at the training size (8),
    which the table must leave out."""
    table = []
    summaries = []
    for method, seed, score, steps in runs:
        for size, value in ((8, 0.99), (12, score - 0.05), (16, score + 0.05)):
            table.append({"method": method, "seed": seed, "size": size, "metric": metric, "value": value})
        table.append({"method": method, "seed": seed, "size": 16, "metric": "other", "value": 123.0})
        needed = None if (method, seed) in cap_hit else steps
        summaries.append({"label": method, "seed": seed, "learned": None, "steps_needed": needed, "until": {}})
    data = {"task": task, "family": "sequence", "metric": metric, "higher_is_better": higher, "train_size": 8}
    return {"data": data, "table": table, "runs": summaries}


@pytest.fixture
def results() -> list[dict[str, Any]]:
    copy = _task(
        "copy",
        "exact_match",
        True,
        [("a", 0, 0.8, 300), ("a", 1, 0.6, 500), ("a", 2, 0.7, 400),
         ("b", 0, 0.9, 900), ("b", 1, 0.1, None), ("b", 2, 0.2, None),
         ("c", 0, 0.5, 200), ("c", 1, 0.5, 200), ("c", 2, 0.5, 200)],
        cap_hit={("b", 1), ("b", 2)},
    )  # fmt: skip
    text = _task(
        "stdlib",
        "ppl",
        False,
        [("a", 0, 5.0, 100), ("a", 1, 5.0, 100), ("a", 2, 5.0, 100),
         ("b", 0, 4.0, 300), ("b", 1, 4.0, 300), ("b", 2, 4.0, 300),
         ("c", 0, 9.0, None), ("c", 1, 9.0, None), ("c", 2, 9.0, None)],
        cap_hit={("c", 0), ("c", 1), ("c", 2)},
    )  # fmt: skip
    return [copy, text]


def test_a_cell_is_the_mean_and_std_over_the_seeds_that_learned(results: list[dict[str, Any]]) -> None:
    rows = {row["method"]: row for row in leaderboard_table(results, [1000, 2000])["rows"]}
    a = rows["a"]["cells"]["copy"]
    assert a["score"] == pytest.approx(0.7)  # the mean past the training size: 0.8, 0.6, 0.7
    assert a["std"] == pytest.approx(0.1)
    assert (a["seeds_learned"], a["seeds_run"], a["steps_needed"], a["cap"]) == (3, 3, 400, 1000)


def test_a_cell_resting_on_one_seed_says_so_and_has_no_std(results: list[dict[str, Any]]) -> None:
    cell = {row["method"]: row for row in leaderboard_table(results)["rows"]}["b"]["cells"]["copy"]
    assert cell["score"] == pytest.approx(0.9)  # seeds 1 and 2 hit the cap: not averaged in
    assert (cell["seeds_learned"], cell["seeds_run"], cell["std"], cell["steps_needed"]) == (1, 3, None, 900)
    assert format_cell(cell) == "0.9† (1/3, 900 steps; unchecked ×2)"  # the hand-built runs have no checks
    assert cell["seed_dependent"] == ["learned on 1 of 3 seeds"]


def test_a_method_that_never_learned_a_task_is_unrated_and_its_cell_says_cap(results: list[dict[str, Any]]) -> None:
    table = leaderboard_table(results, [1000, 2000])
    rows = {row["method"]: row for row in table["rows"]}
    c = rows["c"]
    assert (c["rank"], c["mrr"], c["not_learned"]) == (None, None, ["stdlib"])
    assert c["cells"]["stdlib"]["score"] is None
    assert c["cells"]["stdlib"]["steps_needed"] is None
    assert format_cell(c["cells"]["stdlib"]) == "– (0/3, cap; unchecked ×3)"
    assert [row["method"] for row in table["rows"]][-1] == "c"


def test_the_rank_is_mrr_over_learned_runs_of_the_rated_methods(results: list[dict[str, Any]]) -> None:
    table = leaderboard_table(results)
    rows = {row["method"]: row for row in table["rows"]}
    # copy: seed 0 b (0.9) beats a (0.8); seeds 1 and 2 only a learned. text (lower is better): b beats a on
    # every seed. c did not learn text: it is left out of the ranking, copy included.
    assert rows["a"]["mrr"] == pytest.approx((0.5 + 1 + 1 + 0.5 + 0.5 + 0.5) / 6)
    assert rows["b"]["mrr"] == pytest.approx((1 + 1 + 1 + 1) / 4)
    assert (rows["b"]["rank"], rows["a"]["rank"]) == (1, 2)
    assert (rows["a"]["entries"], rows["b"]["entries"]) == (6, 4)
    assert table["rated_over"] == ["copy", "stdlib"]
    # the suite's own MRR counts every run, learned or not: b's unlearned copy seeds count against it there
    plain = {entry["method"]: entry["mrr"] for entry in mean_reciprocal_rank(results)}
    assert plain["b"] < rows["b"]["mrr"]


def test_a_cell_whose_value_flips_with_the_seed_is_marked(results: list[dict[str, Any]]) -> None:
    rows = {row["method"]: row for row in leaderboard_table(results)["rows"]}
    assert rows["a"]["cells"]["copy"]["seed_dependent"] == []  # 0.6 to 0.8: a fifth of the range, not more
    assert rows["c"]["cells"]["stdlib"]["seed_dependent"] == []  # none learned: no seed disagrees
    assert seed_dependence(3, 3, [0.38, 0.28, 0.0], True) == ["scores 0 to 0.38"]  # two lucky seeds
    assert seed_dependence(2, 3, [0.5, 0.5], True) == ["learned on 2 of 3 seeds"]
    assert seed_dependence(3, 3, [5.0, 5.9], False) == []  # a perplexity 18 % apart
    assert seed_dependence(3, 3, [5.0, 6.1], False) == ["scores 5 to 6.1"]
    assert format_cell(rows["a"]["cells"]["copy"]).startswith("0.7 ± 0.1 (")


def test_a_run_without_until_follows_its_family_rule() -> None:
    assert run_learned({"learned": True})
    assert run_learned({"learned": None})
    assert not run_learned({"learned": False})
    assert not run_learned({"learned": True, "until": {"every": 100}, "steps_needed": None})


def test_the_markdown_table_has_a_row_per_method_and_a_column_per_task(results: list[dict[str, Any]]) -> None:
    text = leaderboard_markdown(leaderboard_table(results, [1000, 2000]))
    lines = text.splitlines()
    assert lines[0] == "| rank | method | MRR (entries) | copy (exact_match ↑) | stdlib (ppl ↓) |"
    assert len(lines) == 2 + 3
    assert lines[-1] == "| – | c | unrated | 0.5 ± 0 (3/3, 200 steps) | – (0/3, cap; unchecked ×3) |"


def test_only_the_leaderboard_suite_adds_the_table(results: list[dict[str, Any]]) -> None:
    assert suite_results(JobSpec.model_validate({"suite": "quick", "methods": [{"method": "rope"}]}), results) == {}
    added = suite_results(JobSpec.model_validate({"suite": "leaderboard"}), results)
    assert [column["task"] for column in added["leaderboard"]["tasks"]] == ["copy", "stdlib"]
    assert SUITES["leaderboard"].leaderboard


def _checked(values: list[float], loss: float = 1.0) -> dict[str, Any]:
    return {"final_loss": loss, "until": {"checks": [[100 * (i + 1), v] for i, v in enumerate(values)]}}


@pytest.mark.parametrize(
    ("values", "higher", "loss", "verdict"),
    [
        ([0.1, 0.2, 0.5], True, float("nan"), "diverged"),
        ([0.05, 0.06, 0.05, 0.06], True, 1.0, "flat"),
        ([0.1, 0.3, 0.5, 0.7], True, 1.0, "improving"),
        ([0.1, 0.6, 0.6, 0.6], True, 1.0, "plateaued"),
        ([0.1, 0.8, 0.3, 0.3], True, 1.0, "regressed"),
        ([12.0, 9.0, 8.9, 8.9], False, 1.0, "plateaued"),
        ([12.0, 11.0, 10.0, 9.0], False, 1.0, "improving"),
        ([12.0, 12.1, 11.9], False, 1.0, "flat"),
    ],
)
def test_a_run_that_did_not_learn_is_diagnosed_from_its_checks(
    values: list[float], higher: bool, loss: float, verdict: str
) -> None:
    assert diagnose_run(_checked(values, loss), higher) == verdict


def test_the_cells_diagnosis_names_the_seeds_that_did_not_learn() -> None:
    result = _task("copy", "exact_match", True, [("a", 0, 0.5, 100), ("a", 1, 0.5, None)], cap_hit={("a", 1)})
    result["runs"][1].update(_checked([0.0, 0.0, 0.0]))
    cell = leaderboard_table([result])["rows"][0]["cells"]["copy"]
    assert cell["diagnosis"] == [{"seed": 1, "verdict": "flat"}]
    assert format_cell(cell) == "0.5† (1/2, 100 steps; flat ×1)"


def test_a_task_no_method_learned_is_left_out_of_the_rank(results: list[dict[str, Any]]) -> None:
    nobody = _task("probes", "score", True, [("a", 0, 0.1, None), ("b", 0, 0.2, None), ("c", 0, 0.3, None)], set())
    table = leaderboard_table([*results, nobody])
    rows = {row["method"]: row for row in table["rows"]}
    assert table["rated_over"] == ["copy", "stdlib"]
    assert rows["a"]["not_learned"] == ["probes"]
    assert (rows["b"]["rank"], rows["a"]["rank"], rows["c"]["rank"]) == (1, 2, None)
    assert rows["b"]["mrr"] == leaderboard_table(results)["rows"][0]["mrr"]
