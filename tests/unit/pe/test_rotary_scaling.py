"""RoPE scalings (PI, NTK, dynamic NTK, YaRN, LongRoPE, Llama-3.1): hand-computed goldens T9-T13, float64
references written from each paper's formula, and the properties every scaling must keep."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import RotaryContext, RotaryFrequencies, get_method, rotary_frequencies
from posenc.pe.kinds import apply_rotary, rotary_tables
from posenc.pe.ops import Pairing


def frequencies(
    name: str, params: dict[str, Any], rotary_dim: int, seq_len: int = 16, dtype: torch.dtype = torch.float64
) -> RotaryFrequencies:
    spec = get_method(name)
    return rotary_frequencies(spec, spec.parse_params(params), RotaryContext(rotary_dim, seq_len, dtype))


def rotate(x: torch.Tensor, freqs: RotaryFrequencies, positions: torch.Tensor, pairing: Pairing) -> torch.Tensor:
    cos, sin = rotary_tables(freqs, positions, torch.float64)
    return apply_rotary(x, cos, sin, pairing=pairing)


def rope_frequencies(base: float, dim: int) -> torch.Tensor:
    """ω_k = base^(−2k/d), written out here so the references do not call the code under test."""
    return torch.tensor([base ** (-2.0 * k / dim) for k in range(dim // 2)], dtype=torch.float64)


def f64(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# -------------------------------------------------------------------------------------------- PI (T9)
def test_t9_linear_interpolation() -> None:
    freqs = frequencies("rope_linear", {"factor": 4}, 8)
    torch.testing.assert_close(freqs.inv_freq, f64([0.25, 0.025, 0.0025, 0.00025]))
    assert freqs.attention_scale == 1.0


@pytest.mark.parametrize("factor", [2.0, 4.0, 2.5])
def test_linear_at_position_p_is_rope_at_p_over_s(factor: float) -> None:
    dim = 32
    positions = torch.tensor([0, 1, 5, 10, 1000, 8191, 32768])
    cos, sin = rotary_tables(frequencies("rope_linear", {"factor": factor}, dim), positions, torch.float64)
    angles = (positions.double() / factor)[:, None] * rope_frequencies(10000.0, dim)[None, :]  # (N, d/2)
    torch.testing.assert_close(cos, torch.cos(angles), rtol=0, atol=1e-11)
    torch.testing.assert_close(sin, torch.sin(angles), rtol=0, atol=1e-11)


def test_linear_on_multiples_of_s_is_exactly_the_rope_table() -> None:
    positions = torch.arange(0, 64, 4)
    scaled = rotary_tables(frequencies("rope_linear", {"factor": 4}, 16), positions, torch.float64)
    plain = rotary_tables(frequencies("rope", {}, 16), positions // 4, torch.float64)
    torch.testing.assert_close(scaled, plain, rtol=0, atol=1e-14)


# ------------------------------------------------------------------------------------------- NTK (T10)
@pytest.mark.parametrize(
    ("factor", "dim", "golden_base"),
    [(4, 128, 40889.94243248622), (8, 128, 82684.62264056221), (4, 64, 41829.36592889948)],
)
def test_t10_ntk_base(factor: float, dim: int, golden_base: float) -> None:
    freqs = frequencies("rope_ntk", {"factor": factor}, dim)
    torch.testing.assert_close(freqs.inv_freq, rope_frequencies(golden_base, dim), rtol=1e-12, atol=0)


def test_t10_ntk_inv_freq() -> None:
    inv_freq = frequencies("rope_ntk", {"factor": 4}, 128).inv_freq
    torch.testing.assert_close(inv_freq[:4], f64([1, 0.8471171852, 0.7176075254, 0.6078976669]), rtol=1e-9, atol=0)
    last = f64([4.74908051e-5, 4.02302771e-5, 3.40797591e-5, 2.88695496e-5])
    torch.testing.assert_close(inv_freq[-4:], last, rtol=1e-8, atol=0)
    original = rope_frequencies(10000.0, 128)
    torch.testing.assert_close(inv_freq[-1], original[-1] / 4, rtol=1e-13, atol=0)  # lowest divided by exactly s
    assert inv_freq[0].item() == 1.0  # highest unchanged


def test_ntk_needs_more_than_one_pair() -> None:
    with pytest.raises(InvalidInput) as caught:
        frequencies("rope_ntk", {"factor": 4}, 2)
    assert caught.value.loc == ("rotary_dim",)


# ----------------------------------------------------------------------------------- dynamic NTK (T10)
DYNAMIC = {"factor": 2, "original_max_position_embeddings": 4096}


@pytest.mark.parametrize(
    ("seq_len", "golden_base"),
    [(4096, 10000.0), (6144, 20221.261689737912), (8192, 30527.7367488067), (16384, 72195.86008650938)],
)
def test_t10_dynamic_ntk_base(seq_len: int, golden_base: float) -> None:
    freqs = frequencies("rope_dynamic_ntk", DYNAMIC, 128, seq_len=seq_len)
    torch.testing.assert_close(freqs.inv_freq, rope_frequencies(golden_base, 128), rtol=1e-12, atol=0)


@pytest.mark.parametrize("seq_len", [1, 100, 4095, 4096])
def test_dynamic_ntk_is_plain_rope_up_to_the_original_length(seq_len: int) -> None:
    """ℓ* = max(ℓ, L): short inputs never get a smaller (or negative, NaN-producing) base."""
    freqs = frequencies("rope_dynamic_ntk", DYNAMIC, 128, seq_len=seq_len)
    assert torch.equal(freqs.inv_freq, frequencies("rope", {}, 128).inv_freq)


def test_dynamic_ntk_at_s_times_l_is_not_static_ntk() -> None:
    dynamic = frequencies("rope_dynamic_ntk", DYNAMIC, 128, seq_len=8192).inv_freq
    static = frequencies("rope_ntk", {"factor": 2}, 128).inv_freq
    torch.testing.assert_close(dynamic, rope_frequencies(10000 * (2**2 - 2 + 1) ** (128 / 126), 128))
    assert not torch.allclose(dynamic, static)


def test_dynamic_ntk_changes_with_length_so_cached_keys_drift() -> None:
    """The documented KV-cache caveat: a key rotated at length 5000 is not the same key at length 9000."""
    key = torch.ones(1, 64, dtype=torch.float64)
    pos = torch.tensor([4000])
    early = rotate(key, frequencies("rope_dynamic_ntk", DYNAMIC, 64, seq_len=5000), pos, "half")
    late = rotate(key, frequencies("rope_dynamic_ntk", DYNAMIC, 64, seq_len=9000), pos, "half")
    assert not torch.allclose(early, late)


# ------------------------------------------------------------------------------------------ YaRN (T11)
YARN = {"factor": 4, "original_max_position_embeddings": 2048}
T11_INV_FREQ = [
    1.0000000000e00, 7.4989420933e-01, 5.6234132519e-01, 4.2169650343e-01,
    3.1622776602e-01, 2.3713737057e-01, 1.7782794100e-01, 1.3335214322e-01,
    1.0000000000e-01, 7.0663108187e-02, 4.9745578767e-02, 3.4871057014e-02,
    2.4325212771e-02, 1.6873235983e-02, 1.1627211527e-02, 7.9498393071e-03,
    5.3846153846e-03, 3.6052606218e-03, 2.3791363758e-03, 1.5408141471e-03,
    9.7300851082e-04, 5.9284342642e-04, 4.4456985251e-04, 3.3338035804e-04,
    2.5000000000e-04, 1.8747355233e-04, 1.4058533130e-04, 1.0542412586e-04,
    7.9056941504e-05, 5.9284342642e-05, 4.4456985251e-05, 3.3338035804e-05,
]  # fmt: skip


def reference_yarn(
    dim: int,
    base: float,
    factor: float,
    length: int,
    *,
    truncate: bool,
    beta_fast: float = 32,
    beta_slow: float = 1,
) -> torch.Tensor:
    """YaRN "NTK-by-parts" as the YaRN paper defines it: r(k) = L/λ_k rotations of pair k in L tokens; keep ω where
    r > β_fast, use ω/s where r < β_slow. Between, the ramp is linear in the pair index k (the reference code,
    which every YaRN checkpoint uses; the paper's γ is written as linear in r)."""

    def boundary(rotations: float) -> float:  # pair index at which r(k) = rotations
        return dim * math.log(length / (2 * math.pi * rotations)) / (2 * math.log(base))

    low, high = boundary(beta_fast), boundary(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    values = []
    for k in range(dim // 2):
        omega = base ** (-2.0 * k / dim)
        interpolate = min(max((k - low) / (high - low), 0.0), 1.0)
        values.append(omega * (1 - interpolate) + omega / factor * interpolate)
    return f64(values)


def test_t11_yarn_inv_freq_and_mscale() -> None:
    freqs = frequencies("rope_yarn", YARN, 64)
    torch.testing.assert_close(freqs.inv_freq, f64(T11_INV_FREQ), rtol=2e-10, atol=0)
    assert freqs.attention_scale == pytest.approx(1.138629436111989, rel=1e-14)
    assert freqs.attention_scale**2 == pytest.approx(1.2964769927807063, rel=1e-14)
    torch.testing.assert_close(freqs.inv_freq, reference_yarn(64, 1e4, 4, 2048, truncate=True))


def test_t11_yarn_correction_range() -> None:
    from posenc.pe.rope_scaling import yarn_correction_range

    raw = yarn_correction_range(64, 1e4, 2048, 32, 1, truncate=False)
    assert raw == pytest.approx((8.064000845, 20.105200672), abs=1e-9)
    assert yarn_correction_range(64, 1e4, 2048, 32, 1, truncate=True) == (8, 21)
    assert yarn_correction_range(128, 1e4, 4096, 32, 1, truncate=True) == (20, 46)


def test_t11_yarn_truncate_false() -> None:
    freqs = frequencies("rope_yarn", {**YARN, "truncate": False}, 64)
    golden = f64([0.1, 0.0706175538, 0.0494530869, 0.0344579983, 0.0238701923, 0.0164230816, 0.0112079520,
                  0.0075741791])  # fmt: skip
    torch.testing.assert_close(freqs.inv_freq[8:16], golden, rtol=0, atol=6e-11)  # golden has 10 decimals
    torch.testing.assert_close(freqs.inv_freq, reference_yarn(64, 1e4, 4, 2048, truncate=False))


def test_t11_yarn_second_case() -> None:
    freqs = frequencies("rope_yarn", {"factor": 16, "original_max_position_embeddings": 4096}, 128)
    original = rope_frequencies(10000.0, 128)
    torch.testing.assert_close(freqs.inv_freq[:21], original[:21], rtol=1e-14, atol=0)  # k ≤ low = 20 kept
    torch.testing.assert_close(freqs.inv_freq[46:], original[46:] / 16, rtol=1e-14, atol=0)  # k ≥ high = 46
    assert (freqs.inv_freq[21:46] < original[21:46]).all()
    assert (freqs.inv_freq[21:46] > original[21:46] / 16).all()
    assert freqs.attention_scale == pytest.approx(1.2772588722, abs=1e-10)
    torch.testing.assert_close(freqs.inv_freq, reference_yarn(128, 1e4, 16, 4096, truncate=True))


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"attention_factor": 1.5}, 1.5),
        ({"attention_factor": 1.5, "mscale": 1.0, "mscale_all_dim": 0.5}, 1.5),  # an explicit factor wins
        ({"mscale": 0.707, "mscale_all_dim": 0.707}, 1.0),  # DeepSeek-V3: ratio of equal terms
        ({"mscale": 1.0, "mscale_all_dim": 0.5}, (0.1 * math.log(40) + 1) / (0.05 * math.log(40) + 1)),
        ({}, 0.1 * math.log(40) + 1),
    ],
)
def test_yarn_attention_factor_rules(extra: dict[str, float], expected: float) -> None:
    freqs = frequencies("rope_yarn", {"factor": 40, "original_max_position_embeddings": 4096, **extra}, 64)
    assert freqs.attention_scale == pytest.approx(expected, rel=1e-14)


def test_yarn_factor_one_has_no_temperature_and_no_scaling() -> None:
    freqs = frequencies("rope_yarn", {"factor": 1, "original_max_position_embeddings": 4096}, 64)
    assert freqs.attention_scale == 1.0
    torch.testing.assert_close(freqs.inv_freq, rope_frequencies(10000.0, 64), rtol=1e-14, atol=0)


@pytest.mark.parametrize(
    "bad",
    [
        {"mscale": 1.0},  # one of the pair alone would be silently ignored by HF
        {"mscale_all_dim": 1.0},
        {"beta_fast": 1, "beta_slow": 32},
        {"beta_fast": 0.5},  # below the default beta_slow (1)
        {"unknown": 1},
        {"factor": 0.5},
    ],
)
def test_yarn_rejects_invalid_params(bad: dict[str, float]) -> None:
    with pytest.raises(pydantic.ValidationError):
        get_method("rope_yarn").parse_params({**YARN, **bad})


def hf_yarn_ramp_inv_freq(
    dim: int, base: float, factor: float, length: int, beta_fast: float, beta_slow: float, *, truncate: bool
) -> torch.Tensor:
    """YaRN's frequencies as transformers' _compute_yarn_parameters computes them, in float64: the correction range
    (find_correction_range: floor/ceil when truncating, clamped to [0, d − 1]), then linear_ramp_factor, which
    widens a zero-width range by 0.001 (the case β_fast = β_slow can reach)."""

    def correction_dim(rotations: float) -> float:
        return dim * math.log(length / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    values = []
    for k in range(dim // 2):
        ramp = min(max((k - low) / (high - low), 0.0), 1.0)  # 1 − the extrapolation factor
        omega = base ** (-2.0 * k / dim)
        values.append(omega / factor * ramp + omega * (1 - ramp))
    return f64(values)


@pytest.mark.parametrize(
    ("dim", "base", "factor", "length", "truncate"),
    [
        (64, 50000.0, 64.0, 4096, True),  # Kimi K2: low 19.17 floored, high ceiled to 20 (one ramp step)
        (64, 50000.0, 64.0, 4096, False),  # no rounding: low == high, the 0.001-wide ramp
        (64, 10000.0, 8.0, 4, True),  # both below pair 0: clamped to 0 == 0, widened
        (16, 10.0, 4.0, 1 << 20, True),  # both past the last pair: clamped to d − 1 == d − 1, widened
    ],
)
def test_yarn_with_beta_fast_equal_to_beta_slow_is_what_transformers_computes(
    dim: int, base: float, factor: float, length: int, truncate: bool
) -> None:
    """β_fast = β_slow (Kimi K2 ships 1 and 1) is a correction range of zero width before rounding: accepted, and
    the frequencies are transformers' (its ramp widened by 0.001 where the range has no width left)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"base": base, "factor": factor, "original_max_position_embeddings": length, "beta_fast": 1.0,
              "beta_slow": 1.0, "truncate": truncate, "attention_factor": 1.0}  # fmt: skip
    ours = frequencies("rope_yarn", params, dim).inv_freq
    expected = hf_yarn_ramp_inv_freq(dim, base, factor, length, 1.0, 1.0, truncate=truncate)
    torch.testing.assert_close(ours, expected, rtol=1e-14, atol=0)
    rope = {"rope_type": "yarn", "rope_theta": base, "factor": factor, "original_max_position_embeddings": length,
            "beta_fast": 1.0, "beta_slow": 1.0, "truncate": truncate, "attention_factor": 1.0}  # fmt: skip
    config = LlamaConfig(hidden_size=dim, num_attention_heads=1, head_dim=dim, max_position_embeddings=length,
                         rope_parameters=rope)  # fmt: skip
    hf_inv_freq, hf_scale = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")  # float32
    torch.testing.assert_close(ours.float(), hf_inv_freq, rtol=2e-6, atol=0)
    assert hf_scale == 1.0


def test_yarn_refuses_beta_fast_below_beta_slow_at_beta_slow() -> None:
    from posenc.real_models.configs import rope_frequencies as config_frequencies

    with pytest.raises(InvalidInput) as raised:
        config_frequencies("rope_yarn", {**YARN, "beta_fast": 1.0, "beta_slow": 1.5}, 64)
    assert raised.value.loc == ("params", "beta_slow")
    assert "beta_fast" in raised.value.msg
    config_frequencies("rope_yarn", {**YARN, "beta_fast": 1.5, "beta_slow": 1.5}, 64)  # equal: accepted


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_yarn_attention_scale_multiplies_logits_by_mscale_squared(pairing: Pairing) -> None:
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(6, 64, dtype=torch.float64, generator=gen)
    k = torch.randn(6, 64, dtype=torch.float64, generator=gen)
    pos = torch.tensor([0, 1, 100, 2047, 4000, 8191])
    yarn = frequencies("rope_yarn", YARN, 64)
    unscaled = RotaryFrequencies(inv_freq=yarn.inv_freq)  # the same angles, no temperature
    logits = rotate(q, yarn, pos, pairing) @ rotate(k, yarn, pos, pairing).T
    plain = rotate(q, unscaled, pos, pairing) @ rotate(k, unscaled, pos, pairing).T
    torch.testing.assert_close(logits, plain * 1.2964769927807063, rtol=1e-12, atol=1e-12)


# -------------------------------------------------------------------------------------- Llama-3.1 (T12)
def test_t12_llama3() -> None:
    freqs = frequencies("rope_llama3", {}, 128)
    original = rope_frequencies(500000.0, 128)
    new = freqs.inv_freq
    torch.testing.assert_close(new[:29], original[:29], rtol=1e-14, atol=0)  # high frequencies untouched
    torch.testing.assert_close(new[35:], original[35:] / 8, rtol=1e-14, atol=0)
    torch.testing.assert_close(new[:4], f64([1, 0.8146172339, 0.6636012377, 0.5405810046]), rtol=1e-9, atol=0)
    last = f64([5.6770881008e-7, 4.6246538050e-7, 3.7673226902e-7, 3.0689259889e-7])
    torch.testing.assert_close(new[-4:], last, rtol=1e-9, atol=0)
    band_new = f64([2.1665708e-3, 1.3718936e-3, 8.567514e-4, 5.248462e-4, 3.126938e-4, 1.785078e-4])
    band_original = f64([2.6160993e-3, 2.1311195e-3, 1.7360467e-3, 1.4142136e-3, 1.1520427e-3, 9.384739e-4])
    torch.testing.assert_close(new[29:35], band_new, rtol=5e-7, atol=0)
    torch.testing.assert_close(original[29:35], band_original, rtol=5e-7, atol=0)
    assert freqs.attention_scale == 1.0


def test_llama3_matches_the_wavelength_rule() -> None:
    """Reference written from the reference code's rule: classify each pair by its wavelength 2π/ω."""
    factor, low, high, length = 8.0, 1.0, 4.0, 8192
    expected = []
    for omega in rope_frequencies(500000.0, 128).tolist():
        wavelength = 2 * math.pi / omega
        if wavelength < length / high:
            expected.append(omega)
        elif wavelength > length / low:
            expected.append(omega / factor)
        else:
            blend = (length / wavelength - low) / (high - low)
            expected.append((1 - blend) * omega / factor + blend * omega)
    torch.testing.assert_close(frequencies("rope_llama3", {}, 128).inv_freq, f64(expected), rtol=1e-14, atol=0)


def test_llama3_rejects_an_inverted_band_and_takes_an_empty_one() -> None:
    with pytest.raises(pydantic.ValidationError):
        get_method("rope_llama3").parse_params({"low_freq_factor": 4, "high_freq_factor": 2})
    # Llama 4 ships low = high = 1: no smooth band, wavelengths below L kept, the others divided by the factor
    params = {"low_freq_factor": 1, "high_freq_factor": 1, "factor": 16, "original_max_position_embeddings": 8192}
    expected = [
        omega if 2 * math.pi / omega < 8192 else omega / 16 for omega in rope_frequencies(500000.0, 128).tolist()
    ]
    torch.testing.assert_close(frequencies("rope_llama3", params, 128).inv_freq, f64(expected), rtol=1e-14, atol=0)


# ---------------------------------------------------------------------------------------- LongRoPE (T13)
def longrope_params(pairs: int, **extra: Any) -> dict[str, Any]:
    return {
        "short_factor": [1.0 + 0.01 * k for k in range(pairs)],
        "long_factor": [1.0 + 0.5 * k for k in range(pairs)],
        "original_max_position_embeddings": 4096,
        "max_position_embeddings": 131072,
        **extra,
    }


@pytest.mark.parametrize(("max_length", "golden"), [(131072, 1.1902380714238083), (65536, 1.1547005383792517)])
def test_t13_longrope_su_factor(max_length: int, golden: float) -> None:
    freqs = frequencies("rope_longrope", longrope_params(8, max_position_embeddings=max_length), 16)
    assert freqs.attention_scale == pytest.approx(golden, rel=1e-14)


def test_longrope_factor_one_when_not_extended_and_override() -> None:
    assert frequencies("rope_longrope", longrope_params(8, max_position_embeddings=4096), 16).attention_scale == 1.0
    overridden = frequencies("rope_longrope", longrope_params(8, attention_factor=1.3), 16)
    assert overridden.attention_scale == 1.3


@pytest.mark.parametrize(
    ("factor_set", "seq_len", "uses"),
    [
        ("by_length", 4096, "short_factor"),  # exactly L_orig is still short (HF: seq_len > L_orig)
        ("by_length", 4097, "long_factor"),
        ("by_length", 1, "short_factor"),
        ("short", 100000, "short_factor"),
        ("long", 10, "long_factor"),
    ],
)
def test_longrope_factor_set_rule(factor_set: str, seq_len: int, uses: str) -> None:
    params = longrope_params(8, factor_set=factor_set)
    freqs = frequencies("rope_longrope", params, 16, seq_len=seq_len)
    expected = rope_frequencies(10000.0, 16) / f64(params[uses])  # ω_k = 1/(λ_k base^(2k/d))
    torch.testing.assert_close(freqs.inv_freq, expected, rtol=1e-14, atol=0)
    # HF applies the attention factor from max/original whichever set is in use
    assert freqs.attention_scale == pytest.approx(1.1902380714238083, rel=1e-14)


@pytest.mark.parametrize("field", ["short_factor", "long_factor"])
def test_longrope_factor_length_must_match_rotary_dim(field: str) -> None:
    params = longrope_params(8)
    params[field] = params[field][:-1]
    with pytest.raises(InvalidInput) as caught:
        frequencies("rope_longrope", params, 16)
    assert caught.value.loc == ("params", field)


def test_longrope_rejects_non_positive_factors() -> None:
    params = longrope_params(8)
    params["long_factor"][3] = 0.0
    with pytest.raises(pydantic.ValidationError):
        get_method("rope_longrope").parse_params(params)


# ------------------------------------------------------------------------------- shared properties
SCALINGS: list[tuple[str, dict[str, Any]]] = [
    ("rope_linear", {"factor": 4}),
    ("rope_ntk", {"factor": 4}),
    ("rope_dynamic_ntk", {"factor": 2, "original_max_position_embeddings": 64}),
    ("rope_yarn", {"factor": 4, "original_max_position_embeddings": 2048}),
    ("rope_yarn", {"factor": 4, "original_max_position_embeddings": 2048, "truncate": False}),
    ("rope_longrope", longrope_params(16)),
    ("rope_llama3", {}),
]


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize(("name", "params"), SCALINGS)
def test_scaled_scores_depend_only_on_relative_position(name: str, params: dict[str, Any], pairing: Pairing) -> None:
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(2, 9, 40, dtype=torch.float64, generator=gen)  # (H, N, D) with a 32-wide rotated head
    k = torch.randn(2, 9, 40, dtype=torch.float64, generator=gen)
    freqs = frequencies(name, params, 32, seq_len=200)
    pos = torch.tensor([0, 1, 2, 8, 30, 31, 64, 100, 199])
    base_scores = rotate(q, freqs, pos, pairing) @ rotate(k, freqs, pos, pairing).transpose(-1, -2)
    for shift in (1, 77, 12345):
        shifted = rotate(q, freqs, pos + shift, pairing) @ rotate(k, freqs, pos + shift, pairing).transpose(-1, -2)
        torch.testing.assert_close(shifted, base_scores, rtol=0, atol=1e-10)


@pytest.mark.parametrize(("name", "params"), SCALINGS)
def test_scalings_return_the_context_dtype(name: str, params: dict[str, Any]) -> None:
    freqs32 = frequencies(name, params, 32, dtype=torch.float32)
    freqs64 = frequencies(name, params, 32, dtype=torch.float64)
    assert freqs32.inv_freq.dtype == torch.float32
    assert torch.equal(freqs32.inv_freq, freqs64.inv_freq.float())  # built in float64, rounded once
