"""p-RoPE (Gemma 4), NTK by alpha (Hunyuan) and FoPE's floor clipping: each against the formula of the
implementation it follows (transformers' own function for p-RoPE; vLLM's formulas written out here for the
others, in float64), and the properties a user would assume."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch
import transformers
from transformers.modeling_rope_utils import _compute_proportional_rope_parameters

from posenc.errors import InvalidInput
from posenc.pe import RotaryContext, RotaryFrequencies, get_method, rotary_frequencies
from posenc.pe.kinds import apply_rotary, rotary_tables
from posenc.pe.ops import Pairing


def frequencies(
    name: str, params: dict[str, Any], rotary_dim: int, seq_len: int = 16, dtype: torch.dtype = torch.float64
) -> RotaryFrequencies:
    spec = get_method(name)
    freqs = rotary_frequencies(spec, spec.parse_params(params), RotaryContext(rotary_dim, seq_len, dtype))
    assert isinstance(freqs, RotaryFrequencies)
    return freqs


def rotate(x: torch.Tensor, freqs: RotaryFrequencies, positions: torch.Tensor, pairing: Pairing) -> torch.Tensor:
    cos, sin = rotary_tables(freqs, positions, torch.float64)
    return apply_rotary(x, cos, sin, pairing=pairing)


def inline(t: torch.Tensor) -> dict[str, Any]:
    """A tensor as a request gives it: float64, flat data and its shape."""
    return {"dtype": "float64", "shape": list(t.shape), "data": t.flatten().tolist()}


def rope_frequencies(base: float, dim: int) -> torch.Tensor:
    """ω_k = base^(−2k/d), written out here so the references do not call the code under test."""
    return torch.tensor([base ** (-2.0 * k / dim) for k in range(dim // 2)], dtype=torch.float64)


# --------------------------------------------------------------------------------- rope_proportional
def hf_proportional(head_dim: int, base: float, fraction: float, factor: float | None) -> tuple[torch.Tensor, float]:
    """transformers' own p-RoPE frequencies and attention factor, from a minimal config."""
    rope_parameters: dict[str, Any] = {
        "rope_type": "proportional",
        "rope_theta": base,
        "partial_rotary_factor": fraction,
    }
    if factor is not None:
        rope_parameters["factor"] = factor
    # the config's fields are free-form keyword arguments (typed per model class, not on the base class)
    fields: dict[str, Any] = {
        "head_dim": head_dim,
        "hidden_size": head_dim * 4,
        "num_attention_heads": 4,
        "rope_parameters": rope_parameters,
    }
    config = transformers.PretrainedConfig(**fields)
    inv_freq, attention_factor = _compute_proportional_rope_parameters(config)
    return inv_freq.to(torch.float64), float(attention_factor)


@pytest.mark.parametrize(
    ("head_dim", "base", "fraction", "factor"),
    [
        (512, 1_000_000.0, 0.25, None),  # Gemma 4 global layers
        (256, 10_000.0, 0.5, None),
        (128, 500_000.0, 0.75, 2.0),
        (64, 10_000.0, 1.0, None),
        (64, 10_000.0, 0.0, None),
        (100, 1_000_000.0, 0.58, None),  # p·d = 57.99999999999999 in floating point: HF rotates 28 pairs, not 29
        (96, 10_000.0, 0.3, 4.0),
    ],
)
def test_proportional_matches_transformers(head_dim: int, base: float, fraction: float, factor: float | None) -> None:
    expected, expected_scale = hf_proportional(head_dim, base, fraction, factor)
    params: dict[str, Any] = {"base": base, "rotated_fraction": fraction}
    if factor is not None:
        params["factor"] = factor
    freqs = frequencies("rope_proportional", params, head_dim)
    assert freqs.inv_freq.shape == expected.shape == (head_dim // 2,)
    # transformers computes θ^(2k/d) in float32: relative error up to ln θ · 2^-24 (ln 1e6 · 2^-24 ≈ 8.2e-7)
    torch.testing.assert_close(freqs.inv_freq, expected, rtol=2e-6, atol=0.0)
    assert torch.equal(freqs.inv_freq == 0, expected == 0), "the same pairs are left unrotated"
    assert freqs.attention_scale == expected_scale


def test_proportional_golden_gemma4_count() -> None:
    freqs = frequencies("rope_proportional", {}, 512)  # defaults: θ = 1e6, p = 0.25
    assert int((freqs.inv_freq > 0).sum()) == 64  # 0.25 · 512 / 2
    torch.testing.assert_close(freqs.inv_freq[:64], rope_frequencies(1e6, 512)[:64], rtol=1e-15, atol=0.0)
    assert bool((freqs.inv_freq[64:] == 0).all())


def test_proportional_full_fraction_is_rope() -> None:
    freqs = frequencies("rope_proportional", {"rotated_fraction": 1.0, "base": 10000.0}, 32)
    assert torch.equal(freqs.inv_freq, frequencies("rope", {}, 32).inv_freq)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_proportional_unrotated_pairs_pass_through(pairing: Pairing) -> None:
    dim, rotated = 16, 2  # p = 0.25: pairs 0, 1 rotate, pairs 2 … 7 do not
    freqs = frequencies("rope_proportional", {"rotated_fraction": 0.25, "base": 100.0}, dim)
    x = torch.randn(3, 5, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = rotate(x, freqs, torch.tensor([0, 1, 7, 100, 4096]), pairing)
    if pairing == "half":
        still = [k for k in range(dim // 2) if k >= rotated] + [k + dim // 2 for k in range(dim // 2) if k >= rotated]
    else:
        still = [f for k in range(rotated, dim // 2) for f in (2 * k, 2 * k + 1)]
    moved = [f for f in range(dim) if f not in still]
    assert torch.equal(y[..., still], x[..., still])
    assert not torch.allclose(y[..., 1:, moved], x[..., 1:, moved])  # position 0 is the identity, the rest turn


def test_proportional_refuses_a_fraction_above_one() -> None:
    with pytest.raises(pydantic.ValidationError, match="rotated_fraction"):
        get_method("rope_proportional").parse_params({"rotated_fraction": 1.5})


# ------------------------------------------------------------------------------------------ rope_ntk_alpha
def vllm_ntk_alpha(base: float, alpha: float, rotary_dim: int) -> torch.Tensor:
    """vLLM DynamicNTKAlphaRotaryEmbedding: base · α^(rotary_dim / (rotary_dim − 2)), then 1/base'^(2k/d)."""
    scaled = base * alpha ** (rotary_dim / (rotary_dim - 2))
    return torch.tensor([1.0 / scaled ** (2 * k / rotary_dim) for k in range(rotary_dim // 2)], dtype=torch.float64)


@pytest.mark.parametrize(
    ("base", "alpha", "dim"), [(10000.0, 1000.0, 128), (10000.0, 2.0, 64), (500000.0, 50.0, 8), (10000.0, 1.5, 4)]
)
def test_ntk_alpha_matches_vllm_formula(base: float, alpha: float, dim: int) -> None:
    freqs = frequencies("rope_ntk_alpha", {"base": base, "alpha": alpha}, dim)
    torch.testing.assert_close(freqs.inv_freq, vllm_ntk_alpha(base, alpha, dim), rtol=1e-14, atol=0.0)
    assert freqs.attention_scale == 1.0


def test_ntk_alpha_one_is_rope() -> None:
    freqs = frequencies("rope_ntk_alpha", {"alpha": 1.0}, 64)
    assert torch.equal(freqs.inv_freq, frequencies("rope", {}, 64).inv_freq)


def test_ntk_alpha_divides_the_lowest_frequency_by_alpha() -> None:
    dim, alpha = 64, 1000.0
    freqs = frequencies("rope_ntk_alpha", {"alpha": alpha}, dim)
    plain = rope_frequencies(10000.0, dim)
    assert freqs.inv_freq[0] == 1.0
    torch.testing.assert_close(freqs.inv_freq[-1], plain[-1] / alpha, rtol=1e-13, atol=0.0)


def test_ntk_alpha_is_the_ntk_formula_with_factor_alpha() -> None:
    ntk = frequencies("rope_ntk", {"factor": 7.0}, 32)
    assert torch.equal(frequencies("rope_ntk_alpha", {"alpha": 7.0}, 32).inv_freq, ntk.inv_freq)


def test_ntk_alpha_refusals() -> None:
    spec = get_method("rope_ntk_alpha")
    with pytest.raises(pydantic.ValidationError, match="alpha"):
        spec.parse_params({"alpha": 0.5})
    with pytest.raises(InvalidInput) as error:
        rotary_frequencies(spec, spec.parse_params({"alpha": 2.0}), RotaryContext(2, 4))
    assert error.value.loc == ("rotary_dim",)


# ------------------------------------------------------------------------------------------------------ fope
def vllm_fope_inv_freq(base: float, rotary_dim: int, max_position: int, num_inv_freq: int | None) -> torch.Tensor:
    """vLLM FourierRotaryEmbedding._compute_inv_freq: the kept frequencies only (D_in,), in float64."""
    inv_freq = torch.tensor([1.0 / base ** (k / rotary_dim) for k in range(0, rotary_dim, 2)], dtype=torch.float64)
    keep = (
        inv_freq > 2.0 * math.pi / max_position if num_inv_freq is None else torch.arange(len(inv_freq)) < num_inv_freq
    )
    return inv_freq[keep]


def vllm_fope_tables(
    positions: torch.Tensor, inv_freq: torch.Tensor, cos_coef: torch.Tensor, sin_coef: torch.Tensor, head_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's FoPE cos/sin (N, head/2) for one KV head: Fourier sums over the kept frequencies, then cos padded with
    1 and sin with 0 up to head/2 columns."""
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # (N, D_in)
    cos = angles.cos() @ cos_coef  # (N, D_out)
    sin = angles.sin() @ sin_coef  # (N, D_out)
    pad = head_size // 2 - cos.shape[-1]
    return torch.nn.functional.pad(cos, (0, pad), value=1.0), torch.nn.functional.pad(sin, (0, pad), value=0.0)


def vllm_neox_apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x·cat(cos, cos) + rotate_neox(x)·cat(sin, sin), rotate_neox(x) = cat(−x2, x1)."""
    first, second = x.chunk(2, dim=-1)
    return x * torch.cat((cos, cos), -1) + torch.cat((-second, first), -1) * torch.cat((sin, sin), -1)


@pytest.mark.parametrize(
    ("dim", "base", "train_length", "num_inv_freq"),
    [(64, 10000.0, 512, None), (128, 500000.0, 4096, None), (32, 10000.0, 64, None), (64, 10000.0, 512, 10)],
)
def test_fope_matches_vllm_with_identity_coefficients(
    dim: int, base: float, train_length: int, num_inv_freq: int | None
) -> None:
    params: dict[str, Any] = {"base": base, "train_length": None if num_inv_freq else train_length}
    if num_inv_freq is not None:
        params["num_inv_freq"] = num_inv_freq
    freqs = frequencies("fope", params, dim)
    kept = vllm_fope_inv_freq(base, dim, train_length, num_inv_freq)
    assert 0 < len(kept) < dim // 2, "the case clips some pairs and keeps some"
    identity = torch.eye(len(kept), dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 17, 511, 4096, 100_000])
    ref_cos, ref_sin = vllm_fope_tables(positions, kept, identity, identity, dim)
    cos, sin = rotary_tables(freqs, positions, torch.float64)
    # ω may differ by an ulp between the two pow evaluations: the angle by n·ω·2^-52, 2e-11 at n = 1e5
    torch.testing.assert_close(cos, ref_cos, rtol=0.0, atol=1e-10)
    torch.testing.assert_close(sin, ref_sin, rtol=0.0, atol=1e-10)
    x = torch.randn(2, len(positions), dim, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(
        rotate(x, freqs, positions, "half"), vllm_neox_apply(x, ref_cos, ref_sin), rtol=0.0, atol=1e-9
    )


def test_fope_golden_floor_count() -> None:
    # ω_k = 10000^(−2k/64) > 2π/512 ⇔ k < 32·ln(512/2π)/ln(10000) = 15.28: 16 pairs kept
    freqs = frequencies("fope", {"train_length": 512}, 64)
    assert int((freqs.inv_freq > 0).sum()) == 16
    assert float(freqs.inv_freq[15]) > 2 * math.pi / 512 > float(rope_frequencies(10000.0, 64)[16])


def test_fope_without_clipping_is_rope() -> None:
    plain = frequencies("rope", {}, 64).inv_freq
    assert torch.equal(frequencies("fope", {"train_length": None}, 64).inv_freq, plain)
    # a training length whose floor 2π/L lies below the lowest frequency clips nothing either
    assert torch.equal(frequencies("fope", {"train_length": 1_000_000}, 64).inv_freq, plain)
    assert torch.equal(frequencies("fope", {"train_length": None, "num_inv_freq": 32}, 64).inv_freq, plain)


def test_fope_clipped_pairs_ignore_position() -> None:
    freqs = frequencies("fope", {"train_length": 64}, 32)
    clipped = freqs.inv_freq == 0
    cos, sin = rotary_tables(freqs, torch.arange(0, 10_000, 37), torch.float64)
    assert bool(clipped.any())
    assert bool((cos[:, clipped] == 1).all())
    assert bool((sin[:, clipped] == 0).all())


def test_fope_refusals() -> None:
    spec = get_method("fope")
    with pytest.raises(pydantic.ValidationError, match="not both"):
        spec.parse_params({"train_length": 512, "num_inv_freq": 4})
    with pytest.raises(pydantic.ValidationError, match="train_length"):
        spec.parse_params({})  # required (null to switch the floor off), never a silent default
    with pytest.raises(InvalidInput) as error:
        rotary_frequencies(spec, spec.parse_params({"train_length": None, "num_inv_freq": 9}), RotaryContext(16, 4))
    assert error.value.loc == ("params", "num_inv_freq")


@pytest.mark.parametrize(("dim", "train_length"), [(64, 512), (32, 64)])
def test_fope_matches_vllm_with_its_fourier_coefficients(dim: int, train_length: int) -> None:
    kept = vllm_fope_inv_freq(10000.0, dim, train_length, None)
    generator = torch.Generator().manual_seed(dim)
    # vLLM's checkpoints hold (num_kv_heads, K, K); one set shared by the heads: its fope_sep_head=False
    cos_coef = torch.eye(len(kept), dtype=torch.float64) + 0.1 * torch.randn(
        len(kept), len(kept), generator=generator, dtype=torch.float64
    )
    sin_coef = torch.eye(len(kept), dtype=torch.float64) + 0.1 * torch.randn(
        len(kept), len(kept), generator=generator, dtype=torch.float64
    )
    params = {"train_length": train_length, "cos_coef": inline(cos_coef[None]), "sin_coef": inline(sin_coef)}
    freqs = frequencies("fope", params, dim)
    positions = torch.tensor([0, 1, 5, 300, 4095])
    ref_cos, ref_sin = vllm_fope_tables(positions, kept, cos_coef, sin_coef, dim)
    cos, sin = rotary_tables(freqs, positions, torch.float64)
    torch.testing.assert_close(cos, ref_cos, rtol=0.0, atol=1e-10)
    torch.testing.assert_close(sin, ref_sin, rtol=0.0, atol=1e-10)
    x = torch.randn(2, len(positions), dim, dtype=torch.float64, generator=generator)
    torch.testing.assert_close(
        rotate(x, freqs, positions, "half"), vllm_neox_apply(x, ref_cos, ref_sin), rtol=0.0, atol=1e-9
    )
    # general coefficients break relativity: the same offset at another place scores differently
    q, k = torch.randn(2, 1, dim, dtype=torch.float64, generator=generator)
    near = (rotate(q, freqs, torch.tensor([3]), "half") * rotate(k, freqs, torch.tensor([1]), "half")).sum()
    far = (rotate(q, freqs, torch.tensor([203]), "half") * rotate(k, freqs, torch.tensor([201]), "half")).sum()
    assert abs(float(near - far)) > 1e-6


def test_fope_coefficients_of_the_wrong_size_are_refused() -> None:
    with pytest.raises(InvalidInput) as raised:
        frequencies("fope", {"train_length": 512, "cos_coef": inline(torch.eye(3))}, 64)
    assert raised.value.loc == ("params", "cos_coef")


def test_fope_fixed_random_coefficients_are_seeded_and_identity_at_gain_zero() -> None:
    first = frequencies("fope", {"train_length": 512, "gain": 0.3, "seed": 1}, 64)
    again = frequencies("fope", {"train_length": 512, "gain": 0.3, "seed": 1}, 64)
    other = frequencies("fope", {"train_length": 512, "gain": 0.3, "seed": 2}, 64)
    assert first.fourier_cos is not None
    assert again.fourier_cos is not None
    assert other.fourier_cos is not None
    assert first.fourier_sin is not None
    assert torch.equal(first.fourier_cos, again.fourier_cos)
    assert not torch.equal(first.fourier_cos, other.fourier_cos)
    assert not torch.equal(first.fourier_cos, first.fourier_sin)  # separate bases, as the authors' configs
    kept = first.fourier_cos.shape[0]
    spread = float((first.fourier_cos - torch.eye(kept, dtype=torch.float64)).std())
    assert 0.5 * 0.3 / math.sqrt(kept) < spread < 2 * 0.3 / math.sqrt(kept)  # xavier normal: gain·√(2/(2K))
    assert frequencies("fope", {"train_length": 512}, 64).fourier_cos is None
