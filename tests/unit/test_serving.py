"""The serving simulator (posenc.real_models.serving): every correct schedule is exactly 0 in float64 against full
recomputation, and every known-bad one is caught at the first wrong (sequence, query, key) derived here from the
setup, or reported equivalent where the method is blind to it (shift-invariant methods given shifted positions)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from posenc.errors import InvalidInput
from posenc.pe.registry import list_methods
from posenc.real_models.presets import get_preset
from posenc.real_models.serving import (
    VARIANTS,
    Schedules,
    ServeReport,
    ServingLayer,
    TransformersRotaryState,
    VariantResult,
    WrongEntry,
    serve_check,
    serving_layer,
)

SIZES: dict[str, Any] = {
    "length": 40,
    "chunk_sizes": [8, 16],
    "prefill": 10,
    "batch_lengths": [40, 25, 7],
    "documents": [12, 20, 8],
    "sinks": 3,
    "window": 10,
    "requests": [40, 30, 10, 24],
}
ORIGINAL = 16  # dynamic NTK's original_max_position_embeddings: inside the 40 tokens, so it scales mid-sequence
FLOOR_SCALE = 4  # Llama 4's temperature steps every floor_scale positions (8192 in the model; 4 to see it here)


def _method(name: str, params: dict[str, Any] | None = None, heads: int = 2) -> ServingLayer:
    return serving_layer(name, params or {}, 16, "half", heads=heads)


def _llama4_nope() -> ServingLayer:
    config = copy.deepcopy(get_preset("llama-4-scout-17b-16e"))
    config["text_config"]["floor_scale"] = FLOOR_SCALE
    layer = serving_layer(None, {}, 0, "half", config, 3, heads=2)
    assert layer.temperature == (FLOOR_SCALE, 0.1, 1.0)  # layer 3 of Llama 4 is a NoPE layer with the temperature
    return layer


def _plain_nope() -> ServingLayer:
    layer = serving_layer(None, {}, 0, "half", get_preset("smollm3-3b"), 3, heads=2)
    assert (layer.applier, layer.temperature) == (None, None)  # every 4th SmolLM3 layer is NoPE
    return layer


SETUPS: dict[str, Callable[[], ServingLayer]] = {
    "rope": lambda: _method("rope"),
    "rope_yarn": lambda: _method("rope_yarn", {"factor": 4.0, "original_max_position_embeddings": 8}),
    "rope_dynamic_ntk": lambda: _method(
        "rope_dynamic_ntk", {"factor": 2.0, "original_max_position_embeddings": ORIGINAL}
    ),
    "llama4_nope_temperature": _llama4_nope,
    "alibi": lambda: _method("alibi", heads=4),
    "nope": _plain_nope,
}
_REPORTS: dict[str, ServeReport] = {}


def _report(name: str) -> ServeReport:
    if name not in _REPORTS:  # each setup simulated once for all the tests that read it
        _REPORTS[name] = serve_check(SETUPS[name](), Schedules.build(**SIZES), tolerance=1e-9, seed=3)
    return _REPORTS[name]


def _variant(report: ServeReport, label: str) -> VariantResult:
    found = [variant for variant in report.variants if variant.label == label]
    assert len(found) == 1, [variant.label for variant in report.variants]
    return found[0]


def _first(report: ServeReport, label: str) -> tuple[int, int, int] | None:
    wrong = _variant(report, label).first_wrong
    return None if wrong is None else (wrong.sequence, wrong.query, wrong.key)


def _equivalent(report: ServeReport, label: str) -> VariantResult:
    variant = _variant(report, label)
    assert variant.verdict == "equivalent", variant
    assert (variant.first_wrong, variant.pattern_errors) == (None, 0)
    assert variant.max_error <= report.tolerance
    return variant


def _chunk_spans(chunk: int) -> list[tuple[int, int]]:
    return [(start, min(start + chunk, SIZES["length"])) for start in range(0, SIZES["length"], chunk)]


FULL = SIZES["sinks"] + SIZES["window"]  # the first step that evicts: the cache is full before it
FIRST_WINDOW_KEY = SIZES["sinks"] + 1  # the oldest key left in the window at that step
SECOND_DOCUMENT = SIZES["documents"][0]  # stream index of the second document's first token


# ------------------------------------------------------------------------------------------------ correct ones
@pytest.mark.parametrize("name", list(SETUPS))
def test_every_correct_schedule_is_exactly_zero_in_float64(name: str) -> None:
    report = _report(name)
    correct = [variant for variant in report.variants if variant.schedule == "correct"]
    # chunked prefill per chunk size, decode, the padded batch, packed documents, the sink + window cache
    assert len(correct) == len(SIZES["chunk_sizes"]) + 4
    for variant in correct:
        assert variant.compared > 0, variant
        assert (variant.max_error, variant.pattern_errors, variant.first_wrong) == (0.0, 0, None), variant
        assert variant.verdict == "exact"
    assert report.summary()["correct_exact"] is True
    assert {variant.name for variant in report.variants} == set(VARIANTS)


def test_every_method_the_simulator_takes_is_exact_on_its_correct_schedules(
    example_params: Callable[..., dict[str, Any]],
) -> None:
    """Through the appliers only: every registered method it accepts (rotary and bias methods of 1D positions),
    not just the ones named above; the others are refused at ("method",)."""
    sizes = Schedules.build(12, [5], 4, [12, 7], [5, 7], 2, 4)
    taken, refused = [], {}
    for spec in list_methods():
        try:
            layer = serving_layer(spec.name, example_params(spec.name, 8), 8, "half", heads=2)
        except InvalidInput as error:
            refused[spec.name] = error.loc
            continue
        taken.append(spec.name)
        report = serve_check(layer, sizes, seed=1)
        assert report.summary()["differs"] == [], (spec.name, report.summary())
    assert set(refused.values()) == {("method",)}, refused
    assert {"rope", "rope_yarn", "rope_dynamic_ntk", "rope_longrope", "alibi", "t5"} <= set(taken)
    assert {"fox", "sinusoidal", "rope_2d_axial"} <= set(refused)


# ------------------------------------------------------------------------------------------------ rotary, static
@pytest.mark.parametrize("name", ["rope", "rope_yarn"])
def test_static_rotations_catch_position_bugs_and_are_blind_to_shifts(name: str) -> None:
    report = _report(name)
    for chunk in SIZES["chunk_sizes"]:
        # the first query of the second chunk restarts at 0: its key 0 looks `chunk` positions closer
        assert _first(report, f"chunk_local_positions[chunk={chunk}]") == (0, chunk, 0)
        # nothing to be stale about: the same computation as the correct schedule
        assert _equivalent(report, f"stale_cached_keys[chunk={chunk}]").max_error == 0.0
    assert _equivalent(report, f"stale_cached_keys_decode[prefill={SIZES['prefill']}]").max_error == 0.0
    # rotations depend on position differences only: shifted positions change rounding, not the logits
    _equivalent(report, "slot_positions")
    _equivalent(report, "packed_positions_not_reset")
    # a static rotation has no length: one call for the whole pack rotates each document as it alone would be
    assert _equivalent(report, "packed_one_length").max_error == 0.0
    assert _first(report, "packed_without_document_mask") == (0, SECOND_DOCUMENT, 0)
    assert _first(report, "packed_as_one_sequence") == (0, SECOND_DOCUMENT, 0)
    eviction = f"[sinks={SIZES['sinks']}, window={SIZES['window']}]"
    # keys at their original positions, the query at its cache position: the window keys are one step off
    assert _first(report, "eviction_keys_not_rerotated" + eviction) == (0, FULL, FIRST_WINDOW_KEY)
    # the query at its original position: every key is off, the first sink first
    assert _first(report, "eviction_query_original_position" + eviction) == (0, FULL, 0)
    summary = report.summary()
    assert "slot_positions" in summary["equivalent_for_this_setup"]
    assert "packed_without_document_mask" in summary["sensitive_to"]


# ------------------------------------------------------------------------------------------------ dynamic NTK
def test_dynamic_ntk_is_caught_by_stale_keys_padding_and_unreset_positions() -> None:
    report = _report("rope_dynamic_ntk")
    for chunk in SIZES["chunk_sizes"]:
        # keys cached while the length was at most the original one keep the base frequencies; the first chunk
        # that ends past it rescales them. Key 0 sits at angle 0 whatever the base: key 1 is the first wrong.
        start = next(start for start, stop in _chunk_spans(chunk) if stop > ORIGINAL and start > 0)
        assert _first(report, f"stale_cached_keys[chunk={chunk}]") == (0, start, 1)
        assert _first(report, f"chunk_local_positions[chunk={chunk}]") == (0, chunk, 0)
    # decode: the first step past original_max_position_embeddings (length ORIGINAL + 1, query ORIGINAL)
    assert SIZES["prefill"] <= ORIGINAL
    assert _first(report, f"stale_cached_keys_decode[prefill={SIZES['prefill']}]") == (0, ORIGINAL, 1)
    # slot positions make the length the padded width: the first padded row, its first query with a distance
    width = max(SIZES["batch_lengths"])
    assert width > ORIGINAL
    row = next(index for index, count in enumerate(SIZES["batch_lengths"]) if count < width)
    assert _first(report, "slot_positions") == (row, 1, 0)
    # unreset positions make the length the whole stream: the first document already rotates differently
    assert sum(SIZES["documents"]) > ORIGINAL >= SIZES["documents"][0]
    assert _first(report, "packed_positions_not_reset") == (0, 1, 0)
    assert _first(report, "packed_without_document_mask") == (0, SECOND_DOCUMENT, 0)
    # one rotation for the pack at max(position_ids) + 1 = the longest document (20 > 16): the first document
    # (12 <= 16 tokens, unscaled alone) is rescaled, its first query with a distance first
    assert max(SIZES["documents"]) > ORIGINAL >= SIZES["documents"][0]
    assert _first(report, "packed_one_length") == (0, 1, 0)


# ------------------------------------------------------------------------------------------------ Llama 4 NoPE
def _steps(n: int) -> int:
    """floor((n + 1) / floor_scale): Llama 4's τ(n) changes exactly where this does."""
    return (n + 1) // FLOOR_SCALE


def test_llama4_temperature_is_caught_where_the_absolute_position_changes_tau() -> None:
    report = _report("llama4_nope_temperature")
    for chunk in SIZES["chunk_sizes"]:
        query = next(
            n for start, stop in _chunk_spans(chunk) for n in range(start, stop) if _steps(n - start) != _steps(n)
        )
        assert _first(report, f"chunk_local_positions[chunk={chunk}]") == (0, query, 0)
        assert _equivalent(report, f"stale_cached_keys[chunk={chunk}]").max_error == 0.0
    width = max(SIZES["batch_lengths"])
    slot = next(
        (row, n)
        for row, count in enumerate(SIZES["batch_lengths"])
        for n in range(count)
        if _steps(n + width - count) != _steps(n)
    )
    assert _first(report, "slot_positions") == (*slot, 0)
    starts = [sum(SIZES["documents"][:d]) for d in range(len(SIZES["documents"]))]
    unreset = next(
        (start + n, start)
        for start, count in zip(starts, SIZES["documents"], strict=True)
        for n in range(count)
        if _steps(start + n) != _steps(n)
    )
    assert _first(report, "packed_positions_not_reset") == (0, *unreset)
    assert _first(report, "packed_without_document_mask") == (0, SECOND_DOCUMENT, 0)
    eviction = f"[sinks={SIZES['sinks']}, window={SIZES['window']}]"
    # the keys carry no position in a NoPE layer: only where the query's temperature is taken matters
    assert _equivalent(report, "eviction_keys_not_rerotated" + eviction).max_error == 0.0
    step = next(n for n in range(FULL, SIZES["length"]) if _steps(n) != _steps(FULL - 1))
    assert _first(report, "eviction_query_original_position" + eviction) == (0, step, 0)


# ------------------------------------------------------------------------------------------------ ALiBi, NoPE
def test_alibi_differences_are_integers_so_shifts_change_nothing_at_all() -> None:
    report = _report("alibi")
    for chunk in SIZES["chunk_sizes"]:
        assert _first(report, f"chunk_local_positions[chunk={chunk}]") == (0, chunk, 0)
    assert _equivalent(report, "slot_positions").max_error == 0.0
    assert _equivalent(report, "packed_positions_not_reset").max_error == 0.0
    eviction = f"[sinks={SIZES['sinks']}, window={SIZES['window']}]"
    assert _first(report, "eviction_keys_not_rerotated" + eviction) == (0, FULL, FIRST_WINDOW_KEY)
    assert _first(report, "eviction_query_original_position" + eviction) == (0, FULL, 0)
    assert _first(report, "packed_without_document_mask") == (0, SECOND_DOCUMENT, 0)


def test_a_plain_nope_layer_is_sensitive_to_the_document_mask_only() -> None:
    report = _report("nope")
    caught = {variant.name for variant in report.variants if variant.verdict == "caught"}
    assert caught == {"packed_without_document_mask", "packed_as_one_sequence"}
    for variant in report.variants:
        if variant.schedule == "known_bad" and variant.name not in caught:
            assert variant.max_error == 0.0, variant
    wrong = _variant(report, "packed_without_document_mask")
    assert wrong.first_wrong == WrongEntry(0, SECOND_DOCUMENT, 0)
    # every query of the later documents sees every earlier document's key, in each head
    documents = SIZES["documents"]
    cross = sum(count * sum(documents[:d]) for d, count in enumerate(documents))
    assert wrong.pattern_errors == report.setup.heads * cross


# ------------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    ("method", "loc"),
    [("rope_2d_axial", ("method",)), ("fox", ("method",)), ("sinusoidal", ("method",)), ("no_such", ("method",))],
)
def test_methods_whose_logits_are_not_positions_and_q_k_are_refused(method: str, loc: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInput) as refused:
        serving_layer(method, {}, 16, "half")
    assert refused.value.loc == loc


def test_bad_params_and_sizes_name_their_field() -> None:
    with pytest.raises(InvalidInput) as params:
        serving_layer("rope", {"base": -1.0}, 16, "half")
    assert params.value.loc == ("params", "base")
    with pytest.raises(InvalidInput) as heads:
        serving_layer("alibi", {}, 16, "half", heads=0)
    assert heads.value.loc == ("heads",)
    with pytest.raises(InvalidInput) as chunk:
        Schedules.build(8, chunk_sizes=[4, 9])
    assert chunk.value.loc == ("chunk_sizes", 1)
    with pytest.raises(InvalidInput) as prefill:
        Schedules.build(8, prefill=8)
    assert prefill.value.loc == ("prefill",)
    with pytest.raises(InvalidInput) as documents:
        Schedules.build(8, documents=[4000, 4000])
    assert documents.value.loc == ("documents",)
    with pytest.raises(InvalidInput) as request:
        Schedules.build(8, requests=[8, 0])
    assert request.value.loc == ("requests", 1)
    with pytest.raises(InvalidInput) as requests:
        Schedules.build(8, requests=[8] * 17)
    assert requests.value.loc == ("requests",)


def test_the_report_as_json_names_every_variant_and_summarises() -> None:
    data = _report("alibi").to_json()
    assert (data["setup"]["method"], data["setup"]["heads"]) == ("alibi", 4)
    assert data["schedules"]["chunk_sizes"] == SIZES["chunk_sizes"]
    labels = [variant["label"] for variant in data["variants"]]
    assert len(labels) == len(set(labels))
    assert set(data["summary"]) == {
        "correct_exact",
        "differs",
        "sensitive_to",
        "equivalent_for_this_setup",
        "transformers_differs",
    }
    assert data["schedules"]["requests"] == SIZES["requests"]
    caught = next(v for v in data["variants"] if v["label"] == "packed_without_document_mask")
    assert caught["first_wrong"] == {"sequence": 0, "query": SECOND_DOCUMENT, "key": 0}


# ------------------------------------------------------------------------------------------------ transformers
def test_transformers_rotary_state_grows_keeps_and_resets_as_its_dynamic_update() -> None:
    """transformers' dynamic update: a call longer than the cached length grows it; one shorter than the original
    max position resets it (once it had grown); any other call keeps the cached length's frequencies."""
    state = TransformersRotaryState(ORIGINAL)
    assert state.cached == ORIGINAL  # the rotary embedding starts with the original max position cached
    # 40 grows; 30 >= ORIGINAL keeps 40; 10 < ORIGINAL resets; 24 grows from the original; 16 keeps 24
    assert state.calls([40, 30, 10, 24, ORIGINAL]) == [40, 40, ORIGINAL, 24, 24]
    # below the original max position from a fresh state: the original frequencies, nothing to reset
    assert TransformersRotaryState(ORIGINAL).calls([3, 9]) == [ORIGINAL, ORIGINAL]
    # any other method: each call its own length (LongRoPE picks its factors per call)
    assert TransformersRotaryState(None).calls([40, 30, 10]) == [40, 30, 10]
    assert _method("rope_dynamic_ntk", {"factor": 2.0, "original_max_position_embeddings": 12}).dynamic_original == 12
    assert _method("rope_longrope", {**_LONGROPE, "original_max_position_embeddings": 12}).dynamic_original is None


_LONGROPE = {"short_factor": [1.0] * 8, "long_factor": [4.0] * 8, "max_position_embeddings": 4 * ORIGINAL}


@pytest.mark.parametrize("name", ["rope", "rope_yarn", "llama4_nope_temperature", "alibi", "nope"])
def test_transformers_variants_are_exact_where_nothing_reads_the_length(name: str) -> None:
    report = _report(name)
    engine = [variant for variant in report.variants if variant.schedule == "transformers"]
    # chunked prefill per chunk size, generate(), the requests, the padded batch
    assert len(engine) == len(SIZES["chunk_sizes"]) + 3
    slots = name == "llama4_nope_temperature"  # transformers' Llama 4 takes τ from the cache slots
    for variant in engine:
        if slots and variant.name == "transformers_left_padded_batch":
            continue
        assert (variant.max_error, variant.first_wrong, variant.verdict) == (0.0, None, "exact"), variant
    assert report.summary()["transformers_differs"] == (["transformers_left_padded_batch"] if slots else [])


def test_llama4_temperature_in_a_transformers_batch_is_taken_at_the_slots() -> None:
    """transformers' Llama 4 scales the queries of its NoPE layers by τ of arange(tokens) + past_seen_tokens: in
    a left-padded batch, the padding counted, as the slot_positions bug does."""
    report = _report("llama4_nope_temperature")
    batch = _variant(report, "transformers_left_padded_batch")
    assert _first(report, "transformers_left_padded_batch") == _first(report, "slot_positions")
    width = max(SIZES["batch_lengths"])
    for row, count in enumerate(SIZES["batch_lengths"]):
        shifted = any(_steps(n + width - count) != _steps(n) for n in range(count))
        assert (batch.sequence_errors[row] > 0.0) == shifted, (row, batch.sequence_errors)


def test_dynamic_ntk_in_transformers_differs_in_short_rows_stale_keys_and_after_longer_requests() -> None:
    report = _report("rope_dynamic_ntk")
    # the padded batch is rotated for its longest row (40 > ORIGINAL): that row is exact, the shorter ones are not
    batch = _variant(report, "transformers_left_padded_batch")
    assert len(batch.sequence_errors) == len(SIZES["batch_lengths"])
    assert batch.sequence_errors[0] == 0.0
    assert min(batch.sequence_errors[1:]) > report.tolerance
    assert max(batch.sequence_errors) == batch.max_error
    assert _first(report, "transformers_left_padded_batch") == (1, 1, 0)
    # requests 40, 30, 10, 24: 30 keeps 40's frequencies; 10 resets; 24 grows from the original like a fresh model
    requests = _variant(report, "transformers_requests")
    assert [error > report.tolerance for error in requests.sequence_errors] == [False, True, False, False]
    assert requests.sequence_errors[2:] == [0.0, 0.0]
    assert _first(report, "transformers_requests") == (1, 1, 0)
    # after them the state holds 24: a chunk ending at 16 (not below ORIGINAL) is rotated for 24, from query 1 on
    assert _first(report, "transformers_chunked_prefill[chunk=16]") == (0, 1, 0)
    # chunks of 8 end at 8 < ORIGINAL first (a reset), then grow with every chunk: the stale cache of a fresh model
    stale = _variant(report, "stale_cached_keys[chunk=8]")
    engine = _variant(report, "transformers_chunked_prefill[chunk=8]")
    assert (engine.max_error, engine.first_wrong) == (stale.max_error, stale.first_wrong)
    # generate(): the prefill (10 < ORIGINAL) resets too, then every step grows: the stale decode
    stale_decode = _variant(report, f"stale_cached_keys_decode[prefill={SIZES['prefill']}]")
    decode = _variant(report, f"transformers_decode[prefill={SIZES['prefill']}]")
    assert (decode.max_error, decode.first_wrong) == (stale_decode.max_error, stale_decode.first_wrong)
    assert "transformers_left_padded_batch" in report.summary()["transformers_differs"]


def test_longrope_in_transformers_carries_no_state_but_reads_the_batch_length() -> None:
    layer = _method("rope_longrope", {**_LONGROPE, "original_max_position_embeddings": ORIGINAL})
    sizes = Schedules.build(40, [8], 10, [40, 12, 30], [20, 20], 2, 8, [40, 12, 30])
    report = serve_check(layer, sizes, seed=3)
    # each request picks its factors for its own length, whatever came before
    assert _variant(report, "transformers_requests").sequence_errors == [0.0, 0.0, 0.0]
    # in the batch every row gets the long factors of the 40-token row: only the 12-token row (short factors
    # alone) changes, the 30-token row has the long ones either way
    batch = _variant(report, "transformers_left_padded_batch")
    assert batch.sequence_errors[0] == batch.sequence_errors[2] == 0.0
    assert batch.sequence_errors[1] > report.tolerance


def test_a_scaled_m_rope_layer_is_refused_naming_its_method() -> None:
    """Qwen2.5-VL with a dynamic rope dict turns a dynamic NTK table by its sections (3-axis positions): the
    simulator runs 1D sequences and says so at the config's method, rather than rotating by one axis."""
    config = {"model_type": "qwen2_5_vl", "hidden_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2,
              "max_position_embeddings": 16, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "dynamic", "factor": 2.0, "mrope_section": [16, 24, 24]}}  # fmt: skip
    with pytest.raises(InvalidInput, match="3-axis") as refused:
        serving_layer(None, {}, None, None, config, 0)
    assert refused.value.loc == ("config", "method")
