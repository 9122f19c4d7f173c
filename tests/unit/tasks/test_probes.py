"""The probes family: every probe's instances checked by an independent solver, exact lengths, determinism,
distractors, needle depth, alias lines only in training, the spec checks, the effective-length rule on
hand-built rows, and one small benchmark end to end."""

from __future__ import annotations

import math
import re
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.errors import InvalidInput
from posenc.jobspec import validate_spec
from posenc.schemas.jobs import JobSpec
from posenc.tasks import family_of
from posenc.tasks.base import Instance
from posenc.tasks.probes import PROBES, VOCAB, Probes, effective_length
from posenc.training.hooks import NoHooks
from posenc.training.jobs import run_job

ALL = ("passkey", "multi_key", "multi_value", "variable_tracking", "common_words", "no_literal")
KEYBOARD = dict(zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "qwertyuiopasdfghjklzxcvbnm", strict=True))
UNALIAS = {alias: key for key, alias in KEYBOARD.items()}
WORD_LIST = frozenset(["an", "as", "at", "be", "by", "do", "go", "he", "if", "in", "is", "it", "me", "my", "no",
                       "of", "on", "or", "so", "up"])  # fmt: skip
STATEMENT = re.compile(r"([A-Z]+)=([A-Z0-9]+)\.")
QUERIES = {"passkey": r"(K)\?$", "multi_key": r"([A-Z]{2})\?$", "multi_value": r"([A-Z])\*\?$",
           "variable_tracking": r"(\d)\?$", "no_literal": r"([a-z])\?$"}  # fmt: skip
RUN_DIGITS = {"passkey": 5, "no_literal": 5, "multi_value": 3}  # unkeyed distractor runs


def make_spec(**data: Any) -> JobSpec:
    raw: dict[str, Any] = {
        "methods": [{"method": "rope"}],
        "data": {"task": "probes"},
        "model": {"layers": 1, "dim": 32, "heads": 2},
        "train": {"length": 64},
    }
    for key, value in data.items():
        raw[key] = {**raw.get(key, {}), **value}
    return JobSpec.model_validate(raw)


def family(**data: Any) -> Probes:
    found = family_of(make_spec(**data))
    assert isinstance(found, Probes)
    return found


def text(ids: list[int]) -> str:
    return "".join(VOCAB[i] for i in ids)


# ------------------------------------------------------------------------------------- independent solver
def solve(probe: str, prompt: str) -> tuple[str, list[str] | None, str]:
    """(expected answer, its parts or None, the haystack) of a prompt, asserting it is well formed."""
    if probe == "common_words":
        assert prompt.endswith(" #?")
        haystack = prompt[:-2]
        words = haystack.split()
        assert set(words) <= WORD_LIST
        assert set(haystack) <= set("abcdefghijklmnopqrstuvwxyz ")
        ranked = Counter(words).most_common()
        assert len(ranked) >= 5  # the frequent three and at least two others
        assert ranked[2][1] > ranked[3][1]  # the top three are well defined
        assert ranked[2][1] >= 3 * ranked[-1][1]  # and much more frequent than the others
        top = sorted(word for word, _ in ranked[:3])
        return ",".join(top), top, haystack
    query = re.search(QUERIES[probe], prompt)
    assert query is not None
    haystack = prompt[: query.start()]
    assert set(haystack) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789=.")
    statements = STATEMENT.findall(haystack)
    key = query.group(1)
    if probe == "passkey":
        values = [value for name, value in statements if name == "K"]
        assert len(values) == 1
        assert re.fullmatch(r"\d{5}", values[0])
        return values[0], None, haystack
    if probe == "multi_key":
        assert len(statements) == 4
        assert len({name for name, _ in statements}) == 4
        assert all(re.fullmatch(r"[A-Z]{2}", name) and re.fullmatch(r"\d{5}", v) for name, v in statements)
        return dict(statements)[key], None, haystack
    if probe == "multi_value":
        values = [value for name, value in statements if name == key]
        assert len(values) == 3
        assert len(set(values)) == 3
        return ",".join(values), values, haystack
    if probe == "variable_tracking":
        assigned: dict[str, str] = {}
        for name, value in statements:
            assert name not in assigned  # every name assigned once
            assert value.isdigit() or value in assigned  # a hop names an earlier name
            assigned[name] = value

        def resolve(name: str) -> str:
            value = assigned[name]
            return value if value.isdigit() else resolve(value)

        names = [name for name, _ in statements if resolve(name) == key]
        assert 3 <= len(names) <= 5
        chains = {resolve(name) for name in assigned}
        assert 1 <= len(chains) <= 2
        return "".join(names), names, haystack
    if probe == "no_literal":
        assert key not in haystack  # no literal overlap anywhere in the context
        values = [value for name, value in statements if name == UNALIAS[key]]
        assert len(values) == 1
        assert re.fullmatch(r"\d{5}", values[0])
        return values[0], None, haystack
    raise AssertionError(probe)


def check(probe: str, item: Instance, length: int) -> str:
    """The instance is exactly ``length`` tokens and its target is the solver's answer; returns the haystack."""
    assert len(item.prompt) + len(item.target) + 3 == length  # BOS prompt SEP target EOS
    prompt, target = text(item.prompt), text(item.target)
    answer, parts, haystack = solve(probe, prompt)
    assert target == answer
    if parts is None:
        assert item.parts is None
    else:
        assert item.parts is not None
        assert [target[start:stop] for start, stop in item.parts] == parts
    return haystack


@pytest.mark.parametrize("probe", ALL)
def test_every_instance_is_solved_by_the_independent_solver_at_its_exact_length(probe: str) -> None:
    task = family()
    shortest = PROBES[probe].shortest
    generator = torch.Generator().manual_seed(7)
    for length in (shortest, shortest + 1, shortest + 2, 64, 97, 300):
        for depth in (0.0, 0.3, 0.5, 1.0):
            for _ in range(6):
                item = task.instance(probe, length, depth, generator)
                check(probe, item, length)
                assert item.tags == {"probe": probe, "depth": depth}
    with pytest.raises(ValueError, match=str(shortest)):
        task.instance(probe, shortest - 1, 0.5, generator)


def test_the_shortest_lengths_are_reached_and_documented() -> None:
    """At its shortest length some instance of each probe has no filler left: the minimum is tight."""
    expected = {"passkey": 31, "multi_key": 47, "multi_value": 44, "variable_tracking": 50, "common_words": 46,
                "no_literal": 31}  # fmt: skip
    assert {name: probe.shortest for name, probe in PROBES.items()} == expected
    task = family()
    generator = torch.Generator().manual_seed(3)
    for probe, shortest in expected.items():
        haystacks = [check(probe, task.instance(probe, shortest, 0.5, generator), shortest) for _ in range(300)]
        if probe != "common_words":
            assert any(not re.search("[a-z]", haystack) for haystack in haystacks), probe


def test_instances_follow_the_generator() -> None:
    task = family()

    def draw(seed: int) -> list[Instance]:
        generator = torch.Generator().manual_seed(seed)
        return task.train_instances(40, generator) + task.eval_instances(64, generator)

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)
    assert task.eval_instances(128, task.eval_generator(128)) == task.eval_instances(128, task.eval_generator(128))


@pytest.mark.parametrize("probe", ["passkey", "multi_value", "no_literal"])
def test_the_answer_digits_are_not_the_only_digits(probe: str) -> None:
    """Keyed distractors (other keys) and unkeyed digit runs at every length, one pair per 64 haystack tokens:
    copying 'the digits' cannot find the value."""
    task = family()
    generator = torch.Generator().manual_seed(11)
    digits = RUN_DIGITS[probe]
    for length in (PROBES[probe].shortest, 80, 400):
        item = task.instance(probe, length, 0.5, generator)
        prompt = text(item.prompt)
        _, _, haystack = solve(probe, prompt)
        key = "K" if probe == "passkey" else prompt[-3] if probe == "multi_value" else UNALIAS[prompt[-2]]
        others = [(name, value) for name, value in STATEMENT.findall(haystack) if name != key]
        unkeyed = re.findall(r"\d+", STATEMENT.sub(".", haystack))
        assert others
        assert all(len(value) == digits for _, value in others)
        assert sum(len(run) for run in unkeyed) == digits * len(others)  # as many unkeyed runs as keyed ones
        assert len(others) <= max(1, len(haystack) // 64)  # one pair per 64 haystack tokens
        answer_digits = re.sub(r"\D", "", text(item.target))
        all_digits = re.sub(r"\D", "", haystack)
        assert len(all_digits) > len(answer_digits)


def atoms(haystack: str, run_digits: int) -> list[str]:
    """The haystack's atoms: statements, unkeyed digit runs (a maximal run of n digits is n / run_digits
    runs) and single filler letters."""
    out: list[str] = []
    for match in re.finditer(r"[A-Z]+=[A-Z0-9]+\.|\d+|.", haystack):
        piece = match.group()
        if piece.isdigit():
            assert len(piece) % run_digits == 0
            out += [piece[i : i + run_digits] for i in range(0, len(piece), run_digits)]
        else:
            out.append(piece)
    return out


@pytest.mark.parametrize("probe", ["passkey", "multi_key", "multi_value", "variable_tracking", "no_literal"])
def test_the_depth_places_the_first_needle_among_the_haystack_atoms(probe: str) -> None:
    task = family()
    generator = torch.Generator().manual_seed(5)
    for length in (PROBES[probe].shortest + 10, 128, 333):
        for depth in (0.0, 0.1, 0.25, 0.5, 0.75, 1.0):
            item = task.instance(probe, length, depth, generator)
            prompt, target = text(item.prompt), text(item.target)
            _, _, haystack = solve(probe, prompt)
            pieces = atoms(haystack, RUN_DIGITS.get(probe, 1))
            if probe == "variable_tracking":
                needles = [p for p in pieces if p[0] in target and "=" in p]
            elif probe == "multi_value":
                needles = [p for p in pieces if p.startswith(prompt[-3] + "=")]
            else:
                value = target
                needles = [p for p in pieces if p.endswith(f"={value}.")]
            first = pieces.index(needles[0])
            others = len(pieces) - len(needles)
            assert first == math.floor(depth * others + 0.5)
            if depth == 0.0:
                assert haystack.startswith(needles[0])
            if depth == 1.0:
                assert haystack.endswith("".join(needles))  # every later needle is after the first: at the end


def test_alias_lines_are_in_the_training_stream_only() -> None:
    task = family()
    generator = torch.Generator().manual_seed(2)
    stream = task.train_instances(1600, generator)
    lines = [item for item in stream if item.tags.get("probe") == "alias"]
    assert 0.09 < len(lines) / len(stream) < 0.16  # ALIAS_SHARE = 1/8
    seen = set()
    for item in lines:
        prompt, target = text(item.prompt), text(item.target)
        assert len(prompt) == 2
        assert prompt[1] == "~"
        pair = (prompt[0], target) if prompt[0].isupper() else (target, prompt[0])
        assert KEYBOARD[pair[0]] == pair[1]
        seen.add(prompt[0])
    assert len(seen) > 30  # both directions, most letters
    assert not any("~" in text(item.prompt) for item in stream if item.tags.get("probe") != "alias")
    for size in (50, 64, 200):
        assert not any("~" in text(item.prompt) for item in task.eval_instances(size, task.eval_generator(size)))
    without = family(data={"probes": ["passkey", "multi_key"]})
    assert not any(item.tags.get("probe") == "alias" for item in without.train_instances(400, generator))


def test_training_mixes_the_probes_at_lengths_from_a_quarter_to_the_training_length() -> None:
    task = family(data={"probes": ["passkey", "common_words", "variable_tracking"]}, train={"length": 160})
    stream = task.train_instances(900, torch.Generator().manual_seed(4))
    by_probe: dict[str, list[int]] = {}
    for item in stream:
        probe = str(item.tags["probe"])
        length = len(item.prompt) + len(item.target) + 3
        check(probe, item, length)
        by_probe.setdefault(probe, []).append(length)
    assert set(by_probe) == {"passkey", "common_words", "variable_tracking"}
    assert all(250 < len(lengths) < 350 for lengths in by_probe.values())
    assert 40 <= min(by_probe["passkey"]) < 45
    assert max(by_probe["passkey"]) > 155
    assert 50 <= min(by_probe["variable_tracking"]) < 55  # clamped to its shortest
    assert all(max(lengths) <= 160 for lengths in by_probe.values())
    depths = [float(item.tags["depth"]) for item in stream]
    assert min(depths) < 0.05
    assert max(depths) > 0.95


def test_evaluation_instances_per_probe_and_depth() -> None:
    task = family(data={"probes": ["passkey", "no_literal"]}, eval={"depths": [0.0, 0.5, 1.0], "samples": 10})
    items = task.eval_instances(80, task.eval_generator(80))
    groups = Counter((item.tags["probe"], item.tags["depth"]) for item in items)
    assert groups == {(p, d): 3 for p in ("passkey", "no_literal") for d in (0.0, 0.5, 1.0)}
    assert all(len(item.prompt) + len(item.target) + 3 == 80 for item in items)
    assert task.eval_tokens(80) == 2 * 9 * 80
    few = family(eval={"depths": [0.0, 0.5, 1.0], "samples": 2})
    assert len(few.eval_instances(64, few.eval_generator(64))) == 6 * 3  # at least one per depth
    assert few.eval_tokens(64) == 6 * 3 * 64


def test_sizes_and_defaults() -> None:
    task = family()
    assert task.unit == "tokens"
    assert task.tokens(77) == 77
    assert task.train_size() == 64
    assert task.eval_sizes() == [50, 64, 128, 256, 512]  # L/4 and L/2 raised to variable tracking's 50
    assert family(data={"probes": ["passkey"]}).eval_sizes() == [31, 32, 64, 128, 256, 512]
    assert family(train={"length": 400}).eval_sizes() == [100, 200, 400, 800, 1600, 3200]
    assert task.depths == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert task.eval_tokens(64) == 6 * 100 * 64
    described = task.describe()
    assert described["family"] == "probes"
    assert described["metric"] == "score"


def test_scores_exact_match_and_recall() -> None:
    task = family()
    single = Instance([5], [60, 61, 62], parts=None)
    assert task.score([True, True, True, True], single) == {"score": 1.0}
    assert task.score([True, True, True, False], single) == {"score": 0.0}  # EOS counts for exact match
    several = Instance([5], [60, 61, 70, 62, 63, 70, 64], parts=[(0, 2), (3, 5), (6, 7)])
    assert task.score([True, True, False, True, False, False, True, False], several) == {"score": 2 / 3}
    assert task.score([False, True, True, True, True, True, True, True], several) == {"score": 2 / 3}
    assert task.score([True] * 8, several) == {"score": 1.0}


def refused(kind_spec: JobSpec) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        validate_spec("benchmark", kind_spec)
    return caught.value


def test_validation_names_the_field() -> None:
    error = refused(make_spec(data={"probes": ["passkey", "needle"]}))
    assert error.loc == ("body", "spec", "data", "probes")
    assert "'needle'" in error.msg
    assert all(name in error.msg for name in ALL)
    assert refused(make_spec(data={"probes": ["passkey", "passkey"]})).loc == ("body", "spec", "data", "probes")
    error = refused(make_spec(train={"length": 49}))
    assert error.loc == ("body", "spec", "train", "length")
    assert "50" in error.msg
    validate_spec("benchmark", make_spec(train={"length": 50}))
    validate_spec("benchmark", make_spec(train={"length": 31}, data={"probes": ["passkey"]}))
    error = refused(make_spec(eval={"lengths": [64, 40, 128]}))
    assert error.loc == ("body", "spec", "eval", "lengths")
    assert "40" in error.msg
    assert "50" in error.msg
    assert refused(make_spec(data={"size": 4})).loc == ("body", "spec", "data", "size")  # another family's field
    assert refused(make_spec(eval={"sizes": [4]})).loc == ("body", "spec", "eval", "sizes")
    # a learned table longer than the longest evaluation (8 x 64 = 512) runs; a shorter one is refused up front
    validate_spec("benchmark", _with_methods([{"method": "learned_absolute"}]))
    error = refused(_with_methods([{"method": "learned_absolute", "params": {"max_positions": 256}}]))
    assert error.loc[:4] == ("body", "spec", "methods", 0)


def _with_methods(methods: list[dict[str, Any]]) -> JobSpec:
    return make_spec().model_copy(update={"methods": JobSpec.model_validate({"methods": methods}).methods})


# ------------------------------------------------------------------------------------- effective length
def rows_of(method: str, seed: int, scores: dict[str, dict[int, float | tuple[float, float]]]) -> list[dict[str, Any]]:
    """Long-format rows: per probe and length a score, or a pair (depth 0, depth 1)."""
    rows = []
    for probe, by_size in scores.items():
        for size, value in by_size.items():
            pair = value if isinstance(value, tuple) else (value, value)
            for depth, score in zip((0.0, 1.0), pair, strict=True):
                rows.append({"method": method, "seed": seed, "size": size, "probe": probe, "depth": depth,
                             "metric": "score", "value": score, "learned": None, "in_distribution": None})  # fmt: skip
    return rows


SIZES = (16, 32, 64, 128, 256, 512)


def flat(value: float, **at: float) -> dict[int, float | tuple[float, float]]:
    return {size: at.get(f"s{size}", value) for size in SIZES}


def test_effective_length_drop_at_4x_not_learned_probe_and_control() -> None:
    rows = rows_of("alibi", 0, {
        "passkey": flat(1.0, s256=0.5, s512=0.2),
        "multi_key": flat(0.9, s256=0.85, s512=0.6),
        "variable_tracking": flat(0.3),  # not learned: base 0.3
        "common_words": flat(0.95, s64=0.1, s128=0.1, s256=0.1, s512=0.1),  # the control: not counted
    })  # fmt: skip
    result = effective_length(rows, 64)
    (run,) = result["effective_length"]
    assert run["learned_probes"] == ["passkey", "multi_key"]
    assert run["not_learned_probes"] == ["variable_tracking"]
    assert run["l_eff"] == 128
    assert run["ratio"] == 2.0
    assert run["score_by_length"]["256"] == pytest.approx((0.5 + 0.85 / 0.9) / 2)
    assert run["base"]["variable_tracking"] == pytest.approx(0.3)
    assert result["control"]["probe"] == "common_words"
    assert result["control"]["by_method"]["alibi"]["64"] == {"mean": pytest.approx(0.1), "std": 0.0, "seeds": 1}
    # the same run without the control's collapse and without the unlearned probe: the same number
    kept = [row for row in rows if row["probe"] in ("passkey", "multi_key")]
    assert effective_length(kept, 64)["effective_length"][0]["l_eff"] == 128


def test_one_lucky_long_length_does_not_count() -> None:
    rows = rows_of("rope", 0, {"passkey": flat(1.0, s128=0.2, s256=0.1, s512=1.0)})
    (run,) = effective_length(rows, 64)["effective_length"]
    assert run["score_by_length"]["512"] == 1.0
    assert run["l_eff"] == 64
    assert run["ratio"] == 1.0


def test_depths_are_averaged_and_the_base_is_the_two_shortest_lengths() -> None:
    # base (1.0 + 0.9) / 2 = 0.95; at 128 the depths average (1.0 + 0.6) / 2 = 0.8 -> S = 0.84 < 0.85
    rows = rows_of("t5", 0, {"passkey": {16: 1.0, 32: 0.9, 64: 1.0, 128: (1.0, 0.6), 256: 1.0}})
    (run,) = effective_length(rows, 64)["effective_length"]
    assert run["base"]["passkey"] == pytest.approx(0.95)
    assert run["score_by_length"]["128"] == pytest.approx(0.8 / 0.95)
    assert run["l_eff"] == 64
    # a shortest length below 0.85 of the base: no effective length, 0 on the leaderboard
    rows = rows_of("t5", 0, {"passkey": {16: 0.7, 32: 1.0, 64: 1.0}})
    result = effective_length(rows, 64)
    assert result["effective_length"][0]["l_eff"] is None
    assert result["leaderboard"][0]["per_seed"] == [0.0]


def test_leaderboard_over_seeds_and_runs_that_learned_nothing() -> None:
    rows = (
        rows_of("alibi", 0, {"passkey": flat(1.0)})
        + rows_of("alibi", 1, {"passkey": flat(1.0, s512=0.1)})
        + rows_of("alibi", 2, {"passkey": flat(0.5), "common_words": flat(1.0)})  # learned only the control
        + rows_of("rope", 0, {"passkey": flat(1.0, s128=0.0, s256=0.0, s512=0.0)})
        + rows_of("rope", 1, {"passkey": flat(1.0, s256=0.0, s512=0.0)})
        + rows_of("nope", 0, {"passkey": flat(0.1)})
    )
    result = effective_length(rows, 64)
    board = {entry["method"]: entry for entry in result["leaderboard"]}
    assert [entry["method"] for entry in result["leaderboard"]] == ["alibi", "rope", "nope"]
    assert board["alibi"]["per_seed"] == [8.0, 4.0, None]
    assert board["alibi"]["median"] == 6.0
    assert board["alibi"]["min"] == 4.0
    assert board["alibi"]["unrated_seeds"] == [2]
    assert board["alibi"]["not_learned"] == {"passkey": [2]}
    assert board["rope"]["median"] == 1.5
    assert board["rope"]["min"] == 1.0
    assert board["nope"]["median"] is None
    assert board["nope"]["not_learned"] == {"passkey": [0]}
    assert [(board[m]["seeds_rated"], board[m]["seeds_run"]) for m in ("alibi", "rope", "nope")] == [
        (2, 3),
        (2, 2),
        (0, 1),
    ]
    assert result["not_learned_probes"] == [
        {"method": "alibi", "seed": 2, "probe": "passkey"},
        {"method": "nope", "seed": 0, "probe": "passkey"},
    ]
    runs = {(entry["method"], entry["seed"]): entry for entry in result["effective_length"]}
    assert runs[("alibi", 2)]["l_eff"] is None
    assert runs[("alibi", 2)]["learned_probes"] == []
    assert result["leaderboard_label"] == "effective length / training length"
    assert result["control"]["by_method"] == {"alibi": {str(s): {"mean": 1.0, "std": 0.0, "seeds": 1} for s in SIZES}}
    assert family(train={"length": 32}).extra_results(rows)["leaderboard"][0]["median"] == 12.0  # L_train = 32


def test_the_control_spread_over_seeds() -> None:
    rows = rows_of("fox", 0, {"common_words": {64: 0.8}}) + rows_of("fox", 1, {"common_words": {64: 0.6}})
    control = effective_length(rows, 64)["control"]["by_method"]["fox"]["64"]
    assert control["mean"] == pytest.approx(0.7)
    assert control["std"] == pytest.approx(statistics.pstdev([0.8, 0.6]))
    assert control["seeds"] == 2


# ------------------------------------------------------------------------------------------------ end to end
def test_a_small_benchmark_end_to_end(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    spec = JobSpec.model_validate(
        {
            "methods": [{"method": "alibi"}, {"method": "rope"}],
            "data": {"task": "probes", "probes": ["passkey", "common_words"]},
            "model": {"layers": 2, "dim": 32, "heads": 2},
            "train": {"length": 48, "steps": 250, "batch_size": 16, "lr": 3e-3, "warmup_steps": 20,
                      "checkpoint_every": 1000},
            "eval": {"lengths": [46, 48, 96], "depths": [0.0, 0.5, 1.0], "samples": 9},
            "seeds": [0],
        }
    )  # fmt: skip
    started = time.monotonic()
    result = run_job("benchmark", spec, job_dir=tmp_path / "job", artifact_root=tmp_path, hooks=NoHooks(), threads=1)
    elapsed = time.monotonic() - started
    assert elapsed < 90
    assert {entry["method"] for entry in result["leaderboard"]} == {"alibi", "rope"}
    assert [(entry["method"], entry["seed"]) for entry in result["effective_length"]] == [("alibi", 0), ("rope", 0)]
    for entry in result["effective_length"]:
        assert set(entry["score_by_length"]) == {"46", "48", "96"}
        assert sorted(entry["learned_probes"] + entry["not_learned_probes"]) in (
            ["common_words", "passkey"], ["passkey"], ["common_words"], [])  # fmt: skip
    artifacts = set(result["artifacts"])
    assert {"heatmap-depth-passkey.png", "heatmap-depth-common_words.png", "leaderboard.png", "plot.png",
            "table.csv"} <= artifacts  # fmt: skip
    assert not {"heatmap-probe.png", "heatmap-depth.png"} & artifacts  # a heatmap per probe, never probes mixed
    assert (tmp_path / "job" / "leaderboard.png").stat().st_size > 1000
    table = result["table"]
    assert {(row["probe"], row["depth"]) for row in table} == {
        (p, d) for p in ("passkey", "common_words") for d in (0.0, 0.5, 1.0)
    }
    assert {row["size"] for row in table} == {46, 48, 96}
    assert {row["metric"] for row in table} == {"score"}
    assert all(0.0 <= row["value"] <= 1.0 for row in table)
    assert result["control"]["by_method"].keys() == {"alibi", "rope"}
    assert result["data"]["family"] == "probes"
    # not_learned per probe, in the result's list, its runs and its table rows alike
    failed = [(run["method"], run["seed"], probe) for run in result["effective_length"]
              for probe in sorted(run["not_learned_probes"])]  # fmt: skip
    assert result["not_learned"] == sorted(f"{method} seed {seed}: {probe}" for method, seed, probe in failed)
    assert [(f["method"], f["seed"], f["probe"]) for f in result["not_learned_probes"]] == failed
    for run in result["runs"]:
        assert [(run["label"], run["seed"], probe) for probe in run["not_learned_probes"]] == [
            failure for failure in failed if failure[:2] == (run["label"], run["seed"])
        ]
    assert all(row["learned"] is ((row["method"], row["seed"], row["probe"]) not in failed) for row in table)


def test_a_study_rates_its_arms_against_the_base_model_s_own_short_length_scores() -> None:
    rows = [
        *rows_of("base", 0, {"passkey": flat(1.0, s128=0.5, s256=0.1, s512=0.0)}),
        # a rule that breaks the model at every length: on its own b_t it would be "not learned"
        *rows_of("broken", 0, {"passkey": flat(0.1)}),
        # a rule that costs a little at short lengths and holds longer
        *rows_of("helps", 0, {"passkey": flat(0.9, s256=0.9, s512=0.3)}),
    ]
    alone = {run["method"]: run for run in effective_length(rows, 64)["effective_length"]}
    assert alone["broken"]["not_learned_probes"] == ["passkey"]
    assert alone["broken"]["ratio"] is None
    study = effective_length(rows, 64, baseline="base")
    runs = {run["method"]: run for run in study["effective_length"]}
    assert runs["broken"]["learned_probes"] == ["passkey"]
    assert runs["broken"]["l_eff"] is None
    assert runs["broken"]["base_from"] == "baseline"
    assert runs["helps"]["base"] == runs["base"]["base"] == {"passkey": pytest.approx(1.0)}
    assert runs["helps"]["l_eff"] == 256  # 0.9 / 1.0 >= 0.85 up to 256
    board = {entry["method"]: entry for entry in study["leaderboard"]}
    assert board["broken"]["per_seed"] == [0.0]  # rated, below the grid, not "unrated"
    assert board["broken"]["unrated_seeds"] == []
    assert [entry["method"] for entry in study["leaderboard"]] == ["helps", "base", "broken"]
