"""posenc.real_models.diagnostics: per-pair frequencies and bands, dtype precision, the divergence probe between two
setups (checked against a float64 brute-force scan written here), KV-cache drift of length-dependent scalings,
and the interleaved <-> half permutation of q / k projection rows."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from posenc.errors import FieldErrors, InvalidInput
from posenc.pe import get_method
from posenc.pe.appliers import Layer, rotary_applier
from posenc.pe.ops import Pairing
from posenc.real_models import diagnostics as rd
from posenc.real_models.configs import resolve_config
from posenc.real_models.presets import get_preset

LONGROPE_PARAMS = {
    "short_factor": [1.0, 1.1, 1.3, 1.6],
    "long_factor": [1.0, 2.0, 4.0, 8.0],
    "original_max_position_embeddings": 64,
    "max_position_embeddings": 256,
}


def plain_inv_freq(base: float, dim: int) -> torch.Tensor:
    """ω_k = base^(−2k/d) in float64, written from the formula."""
    return torch.tensor([base ** (-2 * k / dim) for k in range(dim // 2)], dtype=torch.float64)


def gemma_sliding_setups() -> tuple[rd.RotarySetup, rd.RotarySetup]:
    """Gemma 3's sliding layer as trained (rope, θ 10000) and as the known bug rotates it: the global layers'
    linear factor 8 applied to it too (its own θ kept)."""
    layers = resolve_config(get_preset("gemma-3-4b")).layers
    sliding = next(layer for layer in layers if layer.layer_type == "sliding_attention")
    global_layer = next(layer for layer in layers if layer.layer_type == "full_attention")
    correct = rd.RotarySetup.from_layer(sliding)
    assert global_layer.method is not None
    buggy = dataclasses.replace(correct, method=global_layer.method, params={**global_layer.params, "base": 10000.0})
    return correct, buggy


# ------------------------------------------------------------------------------------------------ setup
def test_from_layer_takes_a_resolved_layer() -> None:
    correct, buggy = gemma_sliding_setups()
    assert correct == rd.RotarySetup("rope", {"base": 10000.0}, 256, "half")
    assert buggy == rd.RotarySetup("rope_linear", {"base": 10000.0, "factor": 8.0}, 256, "half")
    deepseek = resolve_config(get_preset("deepseek-v3")).layers[0]
    assert rd.RotarySetup.from_layer(deepseek).pairing == "interleaved"
    assert rd.RotarySetup.from_layer(deepseek).rotary_dim == 64
    assert rd.RotarySetup.from_layer(deepseek).start == 128  # MLA: the rope part follows 128 no-rope features
    assert rd.RotarySetup.from_layer(deepseek).layer == deepseek


def test_one_function_resolves_a_method_or_a_config_s_layer_into_the_same_type() -> None:
    gemma = get_preset("gemma-3-4b")
    assert rd.rotation("rope", {"base": 10000.0}, 256, "half") == rd.rotation(None, {}, 0, "half", gemma, 0)
    assert rd.rotation(None, {}, 0, "half", gemma, 5).method == "rope_linear"
    with pytest.raises(InvalidInput) as info:
        rd.rotation(None, {}, 0, "half", gemma, 99)
    assert info.value.loc == ("layer",)
    with pytest.raises(FieldErrors) as bad:
        rd.rotation(None, {}, 0, "half", {**gemma, "text_config": {**gemma["text_config"], "rope_theta": -1.0}}, 0)
    assert bad.value.errors[0]["loc"] == ("config", "text_config", "rope_theta")


def test_from_layer_refuses_a_nope_layer() -> None:
    nope = next(layer for layer in resolve_config(get_preset("llama-4-scout-17b-16e")).layers if layer.method is None)
    with pytest.raises(InvalidInput) as info:
        rd.RotarySetup.from_layer(nope)
    assert info.value.loc == ("layer",)


@pytest.mark.parametrize(
    ("setup", "loc"),
    [
        (rd.RotarySetup("no_such_method", {}, 8), ("setup", "method")),
        (rd.RotarySetup("alibi", {}, 8), ("setup", "method")),
        (rd.RotarySetup("rope_mixed", {}, 8, "interleaved"), ("setup", "method")),  # block rotations: no angle
        (rd.RotarySetup("rope_mixed", {}, 8, "half"), ("setup", "pairing")),  # blocks of adjacent features only
        (rd.RotarySetup("rope_linear", {"factor": 0.5}, 8), ("setup", "params", "factor")),
        (rd.RotarySetup("rope", {}, 7), ("setup", "rotary_dim")),
        (rd.RotarySetup("rope", {}, 8, "zigzag"), ("setup", "pairing")),  # type: ignore[arg-type]
    ],
)
def test_a_bad_setup_is_located_under_the_argument(setup: rd.RotarySetup, loc: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInput) as info:
        rd.frequencies(setup, 100)
    assert info.value.loc == loc


# ------------------------------------------------------------------------------------------------ frequencies
def test_rope_pairs_follow_the_formula() -> None:
    report = rd.frequencies(rd.RotarySetup("rope", {"base": 10000.0}, 64), 4096)
    omega = plain_inv_freq(10000.0, 64)
    assert [pair.pair for pair in report.pairs] == list(range(32))
    for pair, expected in zip(report.pairs, omega.tolist(), strict=True):
        assert pair.inv_freq == pytest.approx(expected, rel=1e-14)
        assert pair.wavelength == pytest.approx(2 * math.pi / expected, rel=1e-14)
        assert pair.rotations == pytest.approx(4096 * expected / (2 * math.pi), rel=1e-14)
        assert pair.wraps == (4096 * expected >= 2 * math.pi)
        assert pair.band is None
        assert pair.axis is None
    assert report.wrapping_pairs == sum(4096 * w >= 2 * math.pi for w in omega.tolist())
    assert 0 < report.wrapping_pairs < 32  # θ = 10^4 over 4096 positions: the slowest pairs never turn round
    assert report.attention_scale == 1.0
    json.dumps(report.to_json())


def test_yarn_bands_match_the_paper_and_the_frequencies() -> None:
    """low = ⌊d·ln(L/(2π β_fast))/(2 ln θ)⌋, high = ⌈… β_slow …⌉; pairs below low keep ω_k, above high get ω_k/s,
    in between the frequency lies strictly between the two."""
    dim, base, length, factor = 128, 10000.0, 4096, 16.0
    setup = rd.RotarySetup(
        "rope_yarn", {"base": base, "factor": factor, "original_max_position_embeddings": length}, dim
    )
    report = rd.frequencies(setup, length)
    low = math.floor(dim * math.log(length / (2 * math.pi * 32)) / (2 * math.log(base)))
    high = math.ceil(dim * math.log(length / (2 * math.pi * 1)) / (2 * math.log(base)))
    omega = plain_inv_freq(base, dim).tolist()
    for pair in report.pairs:
        k = pair.pair
        expected_band = "extrapolated" if k <= low else "interpolated" if k >= high else "ramp"
        assert pair.band == expected_band, k
        assert pair.interpolation == pytest.approx(min(max((k - low) / (high - low), 0.0), 1.0), abs=1e-15)
        if pair.band == "extrapolated":
            assert pair.inv_freq == pytest.approx(omega[k], rel=1e-14)
        elif pair.band == "interpolated":
            assert pair.inv_freq == pytest.approx(omega[k] / factor, rel=1e-14)
        else:
            assert omega[k] / factor < pair.inv_freq < omega[k]
    assert {pair.band for pair in report.pairs} == {"extrapolated", "ramp", "interpolated"}
    assert report.attention_scale == pytest.approx(0.1 * math.log(factor) + 1)


def test_llama3_bands_match_the_wavelength_rule_and_the_frequencies() -> None:
    llama = resolve_config(get_preset("llama-3.1-8b")).layers[0]
    report = rd.frequencies(rd.RotarySetup.from_layer(llama), 8192)
    omega = plain_inv_freq(500000.0, 128).tolist()
    for pair in report.pairs:
        original_wavelength = 2 * math.pi / omega[pair.pair]
        if original_wavelength < 8192 / 4:
            assert pair.band == "high"
            assert pair.inv_freq == pytest.approx(omega[pair.pair], rel=1e-14)
        elif original_wavelength > 8192 / 1:
            assert pair.band == "low"
            assert pair.inv_freq == pytest.approx(omega[pair.pair] / 8, rel=1e-14)
        else:
            assert pair.band == "smooth"
            smooth = (8192 / original_wavelength - 1) / (4 - 1)
            assert pair.interpolation == pytest.approx(1 - smooth, rel=1e-12)
            assert pair.inv_freq == pytest.approx((1 - smooth) * omega[pair.pair] / 8 + smooth * omega[pair.pair])
    assert {pair.band for pair in report.pairs} == {"high", "smooth", "low"}


def test_multi_axis_pairs_report_their_axis() -> None:
    report = rd.frequencies(rd.RotarySetup("rope_2d_axial", {"base": 100.0}, 16), 32)
    assert [pair.axis for pair in report.pairs] == [1, 1, 1, 1, 0, 0, 0, 0]  # x (column) pairs, then y (row)


def test_dynamic_scaling_reads_the_training_length() -> None:
    setup = rd.RotarySetup("rope_dynamic_ntk", {"factor": 4.0, "original_max_position_embeddings": 1024}, 64)
    short, long = rd.frequencies(setup, 1024), rd.frequencies(setup, 4096)
    assert [p.inv_freq for p in short.pairs] == pytest.approx(plain_inv_freq(10000.0, 64).tolist(), rel=1e-14)
    assert long.pairs[-1].inv_freq < short.pairs[-1].inv_freq


@pytest.mark.parametrize("train_length", [0, -5, 1.5, True])
def test_a_bad_training_length_is_refused(train_length: object) -> None:
    with pytest.raises(InvalidInput) as info:
        rd.frequencies(rd.RotarySetup("rope", {}, 8), train_length)  # type: ignore[arg-type]
    assert info.value.loc == ("train_length",)


# ------------------------------------------------------------------------------------------------ precision
def test_precision_orders_the_dtypes_and_float64_is_exact() -> None:
    setup = rd.RotarySetup("rope", {"base": 10000.0}, 64)
    bands = [[0, 1024], [1024, 65536], [65536, 1 << 20]]
    exact = rd.precision(setup, torch.float64, bands, seed=3)
    single = rd.precision(setup, "float32", bands, seed=3)
    brain = rd.precision(setup, "bfloat16", bands, seed=3)
    assert [(b.start, b.stop) for b in single.bands] == [(0, 1024), (1024, 65536), (65536, 1 << 20)]
    assert all(band.positions == rd.POSITIONS_PER_BAND for band in single.bands)
    for band in exact.bands:
        assert band.q_max_error == 0.0
        assert band.logit_max_error == 0.0
    for low, high in zip(single.bands, brain.bands, strict=True):
        # a unit vector's features rotated with tables rounded once: a few unit roundoffs, at every position
        assert 0 < low.q_max_error <= 4 * single.unit_roundoff
        assert 0 < low.logit_max_error <= 8 * single.unit_roundoff
        assert low.q_mean_error <= low.q_max_error
        assert high.q_max_error > 100 * low.q_max_error
        assert high.q_max_error <= 4 * brain.unit_roundoff
    assert brain.unit_roundoff == 2.0**-8
    json.dumps(brain.to_json())


def test_precision_defaults_to_four_bands_up_to_a_million() -> None:
    report = rd.precision(rd.RotarySetup("rope", {}, 8), "float16", positions_per_band=8)
    assert [(b.start, b.stop) for b in report.bands] == [(0, 1024), (1024, 8192), (8192, 65536), (65536, 1 << 20)]
    assert all(band.positions == 8 for band in report.bands)


@pytest.mark.parametrize(
    ("kwargs", "loc"),
    [
        ({"dtype": "int8"}, ("dtype",)),
        ({"positions_bands": [[10, 10]]}, ("positions_bands", 0)),
        ({"positions_bands": [[0, 8], [-1, 4]]}, ("positions_bands", 1)),
        ({"positions_bands": []}, ("positions_bands",)),
        ({"seed": -1}, ("seed",)),
    ],
)
def test_precision_refuses_bad_arguments(kwargs: dict[str, object], loc: tuple[object, ...]) -> None:
    arguments: dict[str, object] = {"dtype": "float32", **kwargs}
    with pytest.raises(InvalidInput) as info:
        rd.precision(rd.RotarySetup("rope", {}, 8), **arguments)  # type: ignore[arg-type]
    assert info.value.loc == loc


# ------------------------------------------------------------------------------------------------ compare
def brute_force_first_divergences(
    inv_freq_a: torch.Tensor,
    scale_a: float,
    inv_freq_b: torch.Tensor,
    scale_b: float,
    max_position: int,
    tolerance_angle: float,
    tolerance_logit: float,
    seed: int,
) -> tuple[int | None, int | None]:
    """Every position 0 … max_position in float64, half pairing: the angle between the rotations of each pair
    (wrapped to [0, π]), and ℓ(p) = c²·⟨R(p) q, k⟩ with the probe's q and k (R(0) is the identity)."""
    q, k = rd.probe_vectors(2 * inv_freq_a.shape[0], seed)
    p = torch.arange(max_position + 1, dtype=torch.float64)[:, None]  # (P, 1)
    angle_a, angle_b = p * inv_freq_a[None], p * inv_freq_b[None]  # (P, d/2)
    delta = torch.remainder(angle_a - angle_b + math.pi, 2 * math.pi) - math.pi
    angle_over = torch.nonzero(delta.abs().amax(dim=1) > tolerance_angle)

    def logits(angles: torch.Tensor, scale: float) -> torch.Tensor:
        half = q.shape[0] // 2
        x, y = q[:half], q[half:]
        cos, sin = torch.cos(angles), torch.sin(angles)
        return scale**2 * ((x * cos - y * sin) @ k[:half] + (x * sin + y * cos) @ k[half:])

    logit_over = torch.nonzero((logits(angle_a, scale_a) - logits(angle_b, scale_b)).abs() > tolerance_logit)
    return (
        int(angle_over[0, 0]) if angle_over.numel() else None,
        int(logit_over[0, 0]) if logit_over.numel() else None,
    )


@pytest.mark.parametrize(("tolerance_angle", "tolerance_logit"), [(1e-3, 1e-3), (0.5, 0.1), (3.0, 0.15)])
def test_gemma3_sliding_layer_with_the_global_factor_diverges_where_brute_force_says(
    tolerance_angle: float, tolerance_logit: float
) -> None:
    correct, buggy = gemma_sliding_setups()
    report = rd.compare(correct, buggy, 32768, tolerance_angle, tolerance_logit, seed=7)
    omega = plain_inv_freq(10000.0, 256)
    expected = brute_force_first_divergences(omega, 1.0, omega / 8, 1.0, 32768, tolerance_angle, tolerance_logit, 7)
    assert (report.first_angle_divergence, report.first_logit_divergence) == expected
    assert report.first_angle_divergence is not None
    assert report.first_logit_divergence is not None
    assert report.angle_difference is not None
    assert report.angle_difference > tolerance_angle
    assert report.logit_a is not None
    assert report.logit_b is not None
    assert abs(report.logit_a - report.logit_b) > tolerance_logit
    json.dumps(report.to_json())


def test_gemma3_logit_divergence_is_not_at_the_first_position() -> None:
    """With a tolerance above the first positions' differences the probe has to scan: the answer is deep in."""
    correct, buggy = gemma_sliding_setups()
    report = rd.compare(correct, buggy, 32768, 1e-3, 0.1, seed=0)
    assert report.first_logit_divergence is not None
    assert report.first_logit_divergence > 100
    omega = plain_inv_freq(10000.0, 256)
    assert brute_force_first_divergences(omega, 1.0, omega / 8, 1.0, 32768, 1e-3, 0.1, 0)[1] == (
        report.first_logit_divergence
    )


def test_a_small_base_change_diverges_late_and_exactly_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rd, "SCAN_FEATURES", 64 * 4096)  # chunks of 4096 positions: the scan crosses several
    a = rd.RotarySetup("rope", {"base": 10000.0}, 64)
    b = rd.RotarySetup("rope", {"base": 10001.0}, 64)
    report = rd.compare(a, b, 40000, 0.05, 0.01, seed=1)  # past the first scan chunk
    expected = brute_force_first_divergences(
        plain_inv_freq(10000.0, 64), 1.0, plain_inv_freq(10001.0, 64), 1.0, 40000, 0.05, 0.01, 1
    )
    assert (report.first_angle_divergence, report.first_logit_divergence) == expected
    assert report.first_angle_divergence is not None
    assert report.first_logit_divergence is not None
    assert 2 * rd.scan_chunk(64) < report.first_angle_divergence < report.first_logit_divergence
    assert report.angle_pair is not None
    assert 0 < report.angle_pair < 32


def test_identical_setups_never_diverge() -> None:
    setup = rd.RotarySetup("rope_llama3", {}, 32)
    report = rd.compare(setup, setup, 10000, 0.0, 0.0)
    assert report.first_angle_divergence is None
    assert report.first_logit_divergence is None
    assert report.angle_pair is None
    assert report.logit_a is None


def test_the_logits_carry_each_setups_attention_scale_squared() -> None:
    plain = rd.RotarySetup("rope", {}, 16)
    scaled = rd.RotarySetup(
        "rope_yarn", {"factor": 1.0, "original_max_position_embeddings": 64, "attention_factor": 2.0}, 16
    )
    report = rd.compare(plain, scaled, 100, 1e-9, 1e-9, seed=2)
    assert report.first_angle_divergence is None  # factor 1: the same angles
    assert report.first_logit_divergence == 0
    assert report.logit_a is not None
    assert report.logit_b is not None
    assert report.logit_b == pytest.approx(4 * report.logit_a, rel=1e-12)


def test_compare_refuses_setups_of_different_widths() -> None:
    with pytest.raises(InvalidInput) as info:
        rd.compare(rd.RotarySetup("rope", {}, 16), rd.RotarySetup("rope", {}, 32), 10)
    assert info.value.loc == ("setup_b", "rotary_dim")
    with pytest.raises(InvalidInput) as info:
        rd.compare(rd.RotarySetup("rope_linear", {}, 16), rd.RotarySetup("rope", {}, 16), 10)
    assert info.value.loc == ("setup_a", "params", "factor")
    with pytest.raises(InvalidInput) as info:
        rd.compare(rd.RotarySetup("rope", {}, 16), rd.RotarySetup("rope", {}, 16), 10, tolerance_angle=-1.0)
    assert info.value.loc == ("tolerance_angle",)


# ------------------------------------------------------------------------------------------------ decode
@pytest.mark.parametrize(
    "setup",
    [
        rd.RotarySetup("rope", {}, 32),
        rd.RotarySetup("rope", {"base": 500000.0}, 32, "interleaved"),
        rd.RotarySetup("rope_yarn", {"factor": 8.0, "original_max_position_embeddings": 16}, 32),  # static
        rd.RotarySetup("rope_longrope", {**LONGROPE_PARAMS, "factor_set": "short"}, 8),  # fixed set: cache-safe
    ],
)
def test_a_cache_is_exact_for_length_independent_rotations(setup: rd.RotarySetup) -> None:
    report = rd.decode(setup, prefill=24, steps=48)
    assert [step.max_logit_error for step in report.per_step] == [0.0] * 48
    assert report.first_divergent_step is None
    assert report.max_logit_error == 0.0
    assert [(s.step, s.position, s.length) for s in report.per_step[:2]] == [(0, 24, 25), (1, 25, 26)]


@pytest.mark.parametrize(
    "setup",
    [
        rd.RotarySetup("rope_dynamic_ntk", {"factor": 2.0, "original_max_position_embeddings": 64}, 32),
        rd.RotarySetup("rope_longrope", LONGROPE_PARAMS, 8),  # short_factor -> long_factor past 64
    ],
)
def test_length_dependent_rotations_drift_once_the_length_passes_the_original(setup: rd.RotarySetup) -> None:
    report = rd.decode(setup, prefill=40, steps=50, tolerance=1e-9)
    before = [step for step in report.per_step if step.length <= 64]
    after = [step for step in report.per_step if step.length > 64]
    assert len(before) == 24
    assert len(after) == 26
    assert all(step.max_logit_error <= 1e-12 for step in before)
    assert all(step.max_logit_error > 1e-6 for step in after)
    assert report.first_divergent_step == 24  # length 65: the first one above original_max_position_embeddings
    assert report.first_divergent_length == 65
    assert report.max_logit_error == max(step.max_logit_error for step in after)
    json.dumps(report.to_json())


def test_a_prefill_longer_than_the_original_length_is_stale_from_the_first_step() -> None:
    setup = rd.RotarySetup("rope_dynamic_ntk", {"factor": 2.0, "original_max_position_embeddings": 16}, 16)
    report = rd.decode(setup, prefill=20, steps=4)
    assert report.first_divergent_step == 0


@pytest.mark.parametrize(
    ("prefill", "steps", "loc"),
    [(0, 4, ("prefill",)), (4, 0, ("steps",)), (rd.MAX_DECODE_LENGTH, 1, ("steps",))],
)
def test_decode_refuses_empty_or_oversized_runs(prefill: int, steps: int, loc: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInput) as info:
        rd.decode(rd.RotarySetup("rope", {}, 8), prefill, steps)
    assert info.value.loc == loc


# ------------------------------------------------------------------------------------------------ pairings
def meta_to_hf_permute(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """transformers' convert_llama_weights_to_hf permute, as written there."""
    dim1, dim2 = weight.shape
    return weight.view(num_heads, dim1 // num_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def test_pairing_permutations() -> None:
    assert rd.pairing_permutation(8, "half") == [0, 2, 4, 6, 1, 3, 5, 7]
    assert rd.pairing_permutation(8, "interleaved") == [0, 4, 1, 5, 2, 6, 3, 7]
    assert rd.pairing_permutation(8, "half", rotary_dim=4) == [0, 2, 1, 3, 4, 5, 6, 7]


def test_convert_to_half_is_the_meta_to_hugging_face_permute() -> None:
    weight = torch.randn(4 * 16, 24, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.equal(rd.convert_qk_rows(weight, 4, 16, "half"), meta_to_hf_permute(weight, 4))


def rotated_heads(weight: torch.Tensor, x: torch.Tensor, heads: int, head_dim: int, pairing: Pairing) -> torch.Tensor:
    """q = x Wᵀ split into heads (1, H, N, d), rotated by posenc's applier (Llama 3 scaling) at positions 0 … N−1."""
    spec = get_method("rope_llama3")
    layer = Layer(num_heads=heads, head_dim=head_dim, causal=True, pairing=pairing, dtype=torch.float64)
    applier = rotary_applier(spec, spec.parse_params({"original_max_position_embeddings": 64}), layer)
    q = (x @ weight.T).view(x.shape[0], heads, head_dim).transpose(0, 1)[None]  # (1, H, N, d)
    pos = torch.arange(x.shape[0], dtype=torch.int64) * 37  # spread over several wavelengths
    return applier.rotate_side(q, pos, int(pos[-1]) + 1, keys=False)


@pytest.mark.parametrize(("source", "target"), [("interleaved", "half"), ("half", "interleaved")])
def test_rotating_then_permuting_is_permuting_then_rotating(source: Pairing, target: Pairing) -> None:
    heads, head_dim = 3, 16
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(heads * head_dim, 20, generator=generator, dtype=torch.float64)
    x = torch.randn(10, 20, generator=generator, dtype=torch.float64)
    order = rd.pairing_permutation(head_dim, target)
    rotated_then_permuted = rotated_heads(weight, x, heads, head_dim, source)[..., order]
    converted = rd.convert_qk_rows(weight, heads, head_dim, target)
    permuted_then_rotated = rotated_heads(converted, x, heads, head_dim, target)
    torch.testing.assert_close(permuted_then_rotated, rotated_then_permuted, rtol=0, atol=1e-12)
    # and the mismatch this fixes is real: the unconverted weights rotated with the other pairing differ
    assert not torch.allclose(rotated_heads(weight, x, heads, head_dim, target), rotated_then_permuted, atol=1e-3)


@pytest.mark.parametrize("rotary_dim", [None, 8])
def test_converting_there_and_back_is_the_identity(rotary_dim: int | None) -> None:
    weight = torch.randn(2 * 16, 5, generator=torch.Generator().manual_seed(2))
    bias = torch.randn(2 * 16, generator=torch.Generator().manual_seed(3))
    for tensor in (weight, bias):
        there = rd.convert_qk_rows(tensor, 2, 16, "half", rotary_dim=rotary_dim)
        assert not torch.equal(there, tensor)
        assert torch.equal(rd.convert_qk_rows(there, 2, 16, "interleaved", rotary_dim=rotary_dim), tensor)


@pytest.mark.parametrize(
    ("shape", "heads", "head_dim", "to", "loc"),
    [
        ((30, 4), 2, 16, "half", ("weight", "shape")),
        ((32, 4, 1), 2, 16, "half", ("weight", "shape")),
        ((30, 4), 2, 15, "half", ("head_dim",)),
        ((32, 4), 2, 16, "neox", ("to",)),
        ((32, 4), 0, 16, "half", ("num_heads",)),
    ],
)
def test_convert_refuses_bad_shapes(
    shape: tuple[int, ...], heads: int, head_dim: int, to: str, loc: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidInput) as info:
        rd.convert_qk_rows(torch.zeros(shape), heads, head_dim, to)  # type: ignore[arg-type]
    assert info.value.loc == loc
