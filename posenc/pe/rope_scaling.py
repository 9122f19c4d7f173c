"""RoPE context-extension scalings: each is a function of the frequencies (and an attention scale), never
new rotation code. The shared apply (``posenc.pe.kinds.rotary_tables`` + ``apply_rotary``) does the rotation
with the request's pairing, so every scaling works with half and interleaved layouts alike.

Methods: ``rope_linear`` (PI), ``rope_ntk``, ``rope_dynamic_ntk``, ``rope_yarn``, ``rope_longrope``,
``rope_llama3``. Frequencies are built in float64 and rounded once to the context dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import torch
from pydantic import Field, ValidationInfo, field_validator, model_validator

from posenc.errors import InvalidInput
from posenc.pe.ops import rope_inv_freq
from posenc.pe.registry import MethodParams, register
from posenc.pe.types import RotaryContext, RotaryFrequencies
from posenc.schemas.methods import Kind

PAIRING_CONVENTION = (
    "request option: half (GPT-NeoX/HF rotate_half) or interleaved (GPT-J/Meta); the scaling only changes "
    "the frequencies, so both layouts see the same scaled angles"
)
YARN_PAPER = (
    "Peng, Quesnelle, Fan, Shippole. YaRN: Efficient Context Window Extension of Large Language Models "
    "(ICLR 2024). https://arxiv.org/abs/2309.00071"
)
BASE_DESCRIPTION = "θ in ω_k = θ^(−2k/d) before scaling (Llama-2: 10000, Llama-3: 500000)"
FACTOR_DESCRIPTION = "s = L'/L, the ratio of the target context length to the pretraining one"
ORIGINAL_LENGTH_DESCRIPTION = "L, the pretraining context length (NOT the extended max_position_embeddings)"


def _ntk_exponent(ctx: RotaryContext) -> float:
    """d/(d−2), the exponent that makes NTK scaling divide the lowest frequency by exactly s."""
    if ctx.rotary_dim < 4:
        raise InvalidInput(("rotary_dim",), f"NTK scaling needs rotary_dim >= 4 (d/(d-2)), got {ctx.rotary_dim}")
    return ctx.rotary_dim / (ctx.rotary_dim - 2)


def _as_frequencies(inv_freq64: torch.Tensor, ctx: RotaryContext, attention_scale: float = 1.0) -> RotaryFrequencies:
    """Round the float64 frequencies once to the context dtype and device."""
    return RotaryFrequencies(
        inv_freq=inv_freq64.to(device=ctx.device, dtype=ctx.dtype), attention_scale=attention_scale
    )


# ------------------------------------------------------------------------------------------------ PI (D3)
class RopeLinearParams(MethodParams):
    base: float = Field(default=10000.0, gt=1, description=BASE_DESCRIPTION)
    factor: float = Field(ge=1, description=FACTOR_DESCRIPTION)


@register(
    "rope_linear",
    kind=Kind.ROTARY,
    config_spellings=("linear",),
    band_edges=lambda params: (math.inf, math.inf, ("factor", "factor")),  # every pair interpolated
    config_keys=("factor",),
    params=RopeLinearParams,
    paper="Chen, Wong, Chen, Tian. Extending Context Window of Large Language Models via Positional "
    "Interpolation (2023). https://arxiv.org/abs/2306.15595",
    conventions={
        "pairing": PAIRING_CONVENTION,
        "positions": "positions stay integers; the frequencies are divided by s (dividing positions in a "
        "low-precision dtype would reintroduce rounding error)",
    },
)
def rope_linear(params: RopeLinearParams, ctx: RotaryContext) -> RotaryFrequencies:
    """Position Interpolation (HF rope_type="linear"): ω_k = base^(−2k/d) / s.

    Rotating position p with ω/s is rotating position p/s with ω: L' = s·L positions are squeezed into the
    range the model was trained on (Chen et al., 2023).
    """
    unscaled = rope_inv_freq(params.base, ctx.rotary_dim, dtype=torch.float64)  # (d/2,)
    return _as_frequencies(unscaled / params.factor, ctx)


# ----------------------------------------------------------------------------------------------- NTK (D4)
class RopeNtkParams(MethodParams):
    base: float = Field(default=10000.0, gt=1, description=BASE_DESCRIPTION)
    factor: float = Field(ge=1, description=FACTOR_DESCRIPTION)


@register(
    "rope_ntk",
    kind=Kind.ROTARY,
    params=RopeNtkParams,
    paper="bloc97. NTK-Aware Scaled RoPE (r/LocalLLaMA post, 2023); formalised in " + YARN_PAPER,
    conventions={
        "pairing": PAIRING_CONVENTION,
        "exponent": "d/(d-2) with d = rotary_dim: ω_{d/2-1} is divided by exactly s, ω_0 = 1 is unchanged",
    },
)
def rope_ntk(params: RopeNtkParams, ctx: RotaryContext) -> RotaryFrequencies:
    """NTK-aware scaling (bloc97, 2023): base' = base·s^(d/(d−2)), then ω_k = base'^(−2k/d).

    High frequencies are (almost) kept, which preserves local order; the lowest one is interpolated by s.
    """
    scaled_base = params.base * params.factor ** _ntk_exponent(ctx)
    return _as_frequencies(rope_inv_freq(scaled_base, ctx.rotary_dim, dtype=torch.float64), ctx)


# --------------------------------------------------------------------------------------- dynamic NTK (D5)
class RopeDynamicNtkParams(MethodParams):
    base: float = Field(default=10000.0, gt=1, description=BASE_DESCRIPTION)
    factor: float = Field(ge=1, description=FACTOR_DESCRIPTION)
    original_max_position_embeddings: int = Field(ge=1, description=ORIGINAL_LENGTH_DESCRIPTION)


@register(
    "rope_dynamic_ntk",
    kind=Kind.ROTARY,
    config_spellings=("dynamic",),
    length_dependent=True,
    config_keys=("factor", "original_max_position_embeddings"),
    params=RopeDynamicNtkParams,
    paper="emozilla. Dynamically Scaled RoPE (r/LocalLLaMA post, 2023; HF rope_type='dynamic'); "
    "formalised in " + YARN_PAPER,
    conventions={
        "pairing": PAIRING_CONVENTION,
        "current_length": "ℓ = max position + 1 of this request (seq_len); ℓ* = max(ℓ, L), so below L the "
        "frequencies are plain RoPE's (HF resets to the original inv_freq there)",
        "kv_cache": "the base grows with ℓ, so keys cached at an earlier (shorter) length were rotated with "
        "another base and no longer match; store un-rotated keys and re-rotate them, or accept the drift "
        "(HF accepts it). Each request here is rotated consistently at its own ℓ.",
    },
)
def rope_dynamic_ntk(params: RopeDynamicNtkParams, ctx: RotaryContext) -> RotaryFrequencies:
    """Dynamic NTK: base' = base·(s·ℓ*/L − (s − 1))^(d/(d−2)), ℓ* = max(ℓ, L), ℓ the current length.

    At ℓ ≤ L this is RoPE; at ℓ = s·L it is base·(s² − s + 1)^(d/(d−2)), not the static NTK base.
    """
    original = params.original_max_position_embeddings
    # clamping at L avoids a base below θ (or a negative one: NaNs) for inputs shorter than L
    current = max(ctx.seq_len, original)
    growth = params.factor * current / original - (params.factor - 1)
    scaled_base = params.base * growth ** _ntk_exponent(ctx)
    return _as_frequencies(rope_inv_freq(scaled_base, ctx.rotary_dim, dtype=torch.float64), ctx)


# ---------------------------------------------------------------------------------------------- YaRN (D6)
def yarn_get_mscale(factor: float, mscale: float = 1.0) -> float:
    """0.1·m·ln s + 1 for s > 1, else 1 (YaRN's temperature; DeepSeek's m-weighted form)."""
    return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0


def yarn_correction_range(
    dim: int, base: float, original_length: int, beta_fast: float, beta_slow: float, *, truncate: bool
) -> tuple[float, float]:
    """(low, high) pair indices between which YaRN ramps from extrapolation to interpolation.

    dim(r) = d·ln(L/(2π r)) / (2 ln base) is the pair whose wavelength fits r rotations in L;
    low = dim(β_fast), high = dim(β_slow), floored/ceiled when ``truncate``, clamped to [0, d − 1].
    """

    def pair_with_rotations(rotations: float) -> float:
        return dim * math.log(original_length / (2 * math.pi * rotations)) / (2 * math.log(base))

    low, high = pair_with_rotations(beta_fast), pair_with_rotations(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0.0), min(high, dim - 1.0)


class RopeYarnParams(MethodParams):
    base: float = Field(default=10000.0, gt=1, description=BASE_DESCRIPTION)
    factor: float = Field(ge=1, description=FACTOR_DESCRIPTION)
    original_max_position_embeddings: int = Field(ge=1, description=ORIGINAL_LENGTH_DESCRIPTION)
    beta_fast: float = Field(default=32.0, gt=0, description="rotations in L above which a pair is kept")
    beta_slow: float = Field(
        default=1.0, gt=0, validate_default=True, description="rotations in L below which a pair is scaled"
    )
    attention_factor: float | None = Field(
        default=None, gt=0, description="explicit cos/sin multiplier; overrides every mscale rule"
    )
    mscale: float | None = Field(
        default=None, gt=0, description="DeepSeek: numerator m of get_mscale(s, m); give with mscale_all_dim"
    )
    mscale_all_dim: float | None = Field(
        default=None, gt=0, description="DeepSeek: denominator m of get_mscale(s, m); give with mscale"
    )
    truncate: bool = Field(default=True, description="floor/ceil the correction range (gpt-oss: False)")

    @field_validator("beta_slow")
    @classmethod
    def _slow_not_above_fast(cls, beta_slow: float, info: ValidationInfo) -> float:
        """β_fast ≥ β_slow (more rotations = higher frequency). Equal is a zero-width ramp, which the reference code
        widens by 0.001 (Kimi K2 ships β_fast = β_slow = 1); located at beta_slow, the key a config names."""
        beta_fast = info.data.get("beta_fast")
        if beta_fast is not None and beta_fast < beta_slow:
            raise ValueError(
                f"must not exceed beta_fast ({beta_fast:g} < {beta_slow:g}): beta_fast counts the rotations of the "
                "higher frequencies, where the ramp starts"
            )
        return beta_slow

    @model_validator(mode="after")
    def _consistent(self) -> RopeYarnParams:
        if (self.mscale is None) != (self.mscale_all_dim is None):
            raise ValueError(
                "give both mscale and mscale_all_dim (attention factor = get_mscale(s, mscale) / "
                "get_mscale(s, mscale_all_dim)) or neither; one alone would be silently ignored"
            )
        return self


def yarn_ramp(params: RopeYarnParams, dim: int) -> torch.Tensor:
    """ramp_k = clamp((k − low)/(high − low), 0, 1) per pair k over YaRN's correction range (a zero width widened by
    0.001, the reference's guard): 0 keeps ω_k, 1 divides it by the factor. (d/2,) float64."""
    low, high = yarn_correction_range(
        dim,
        params.base,
        params.original_max_position_embeddings,
        params.beta_fast,
        params.beta_slow,
        truncate=params.truncate,
    )
    if low == high:
        high += 0.001
    pair_index = torch.arange(dim // 2, dtype=torch.float64)  # (d/2,)
    return ((pair_index - low) / (high - low)).clamp(0.0, 1.0)


def yarn_bands(params: RopeYarnParams, dim: int) -> list[tuple[str, float]]:
    """YaRN's band per pair from its ramp: 'extrapolated' (w = 0), 'interpolated' (w = 1), 'ramp' between."""
    return [
        ("extrapolated" if weight == 0.0 else "interpolated" if weight == 1.0 else "ramp", weight)
        for weight in yarn_ramp(params, dim).tolist()
    ]


def yarn_config_warning(params: Mapping[str, Any], attention_scale: float) -> tuple[str, str, dict[str, Any]]:
    """What the config doctor says of a model that ships YaRN: it is static, so short prompts pay for it."""
    factor, original = params.get("factor"), params.get("original_max_position_embeddings")
    message = (
        f"YaRN is static: every prompt, also those shorter than original_max_position_embeddings={original}, gets "
        f"the interpolated low frequencies (factor {factor}) and the attention factor {attention_scale:.6g}; short "
        "prompts score worse than with plain RoPE. Leave the scaling out when serving short contexts."
    )
    evidence = {"factor": factor, "original_max_position_embeddings": original, "attention_scale": attention_scale}
    return "static_yarn", message, evidence


@register(
    "rope_yarn",
    kind=Kind.ROTARY,
    config_spellings=("yarn", "deepseek_yarn"),
    config_warning=yarn_config_warning,
    bands=yarn_bands,
    band_edges=lambda params: (float(params["beta_fast"]), float(params["beta_slow"]), ("beta_fast", "beta_slow")),
    config_keys=(
        "factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "attention_factor",
        "mscale",
        "mscale_all_dim",
        "truncate",
    ),
    params=RopeYarnParams,
    paper=YARN_PAPER,
    conventions={
        "pairing": PAIRING_CONVENTION,
        "scale_placement": "the attention factor multiplies cos and sin ONCE (HF), so logits are multiplied "
        "by its square; do not also put mscale² into the softmax scale",
        "attention_factor": "attention_factor if given; else get_mscale(s, mscale) / "
        "get_mscale(s, mscale_all_dim) when both are given (DeepSeek); else 0.1·ln s + 1. "
        "DeepSeek's extra softmax factor "
        "get_mscale(s, mscale_all_dim)² belongs to the caller's logit scale and is not applied here",
        "correction_range": "computed from original_max_position_embeddings (the pretraining L), not the "
        "extended length",
        "ramp": "ramp_k = clamp((k − low)/(high − low), 0, 1): 0 keeps ω_k, 1 divides it by s",
    },
)
def rope_yarn(params: RopeYarnParams, ctx: RotaryContext) -> RotaryFrequencies:
    """YaRN "NTK-by-parts" frequencies and attention temperature (Peng et al., 2023).

    ω_k = (1 − ramp_k)·ω_k^extra + ramp_k·ω_k^extra/s, ω_k^extra = base^(−2k/d),
    ramp_k = clamp((k − low)/(high − low), 0, 1) over the correction range from β_fast, β_slow and L;
    cos and sin are multiplied by the attention factor (default 0.1·ln s + 1), so logits by its square.
    """
    dim = ctx.rotary_dim
    ramp = yarn_ramp(params, dim)  # (d/2,) 0: extrapolate, 1: interpolate
    extrapolated = rope_inv_freq(params.base, dim, dtype=torch.float64)  # (d/2,)
    inv_freq = extrapolated * (1.0 - ramp) + (extrapolated / params.factor) * ramp

    if params.attention_factor is not None:
        attention_scale = params.attention_factor
    elif params.mscale is not None and params.mscale_all_dim is not None:
        attention_scale = yarn_get_mscale(params.factor, params.mscale) / yarn_get_mscale(
            params.factor, params.mscale_all_dim
        )
    else:
        attention_scale = yarn_get_mscale(params.factor)
    return _as_frequencies(inv_freq, ctx, attention_scale)


# ------------------------------------------------------------------------------------------ LongRoPE (D7)
class RopeLongropeParams(MethodParams):
    base: float = Field(default=10000.0, gt=1, description=BASE_DESCRIPTION)
    short_factor: list[float] = Field(
        min_length=1, description="λ_k per pair (length rotary_dim/2), used for short inputs"
    )
    long_factor: list[float] = Field(
        min_length=1, description="λ_k per pair (length rotary_dim/2), used for long inputs"
    )
    original_max_position_embeddings: int = Field(ge=2, description=ORIGINAL_LENGTH_DESCRIPTION)
    max_position_embeddings: int = Field(ge=1, description="L_max, the extended context; s = L_max / L_orig")
    attention_factor: float | None = Field(
        default=None, gt=0, description="cos/sin multiplier; default 'su': sqrt(1 + ln s / ln L_orig)"
    )
    factor_set: Literal["by_length", "short", "long"] = Field(
        default="by_length",
        description="by_length (HF/Phi-3): long_factor when seq_len > original_max_position_embeddings, else "
        "short_factor; short/long: fix the set whatever the length (KV-cache safe; vLLM fixes it per "
        "deployment from max_model_len)",
    )

    @model_validator(mode="after")
    def _positive_factors(self) -> RopeLongropeParams:
        if min(self.short_factor) <= 0 or min(self.long_factor) <= 0:
            raise ValueError("rescale factors must be positive (they divide the frequencies)")
        return self


def longrope_su_factor(max_length: int, original_length: int) -> float:
    """ "su" attention factor: sqrt(1 + ln s / ln L_orig) with s = L_max/L_orig; 1 when s ≤ 1."""
    scale = max_length / original_length
    return math.sqrt(1 + math.log(scale) / math.log(original_length)) if scale > 1 else 1.0


@register(
    "rope_longrope",
    kind=Kind.ROTARY,
    config_spellings=("longrope", "su"),
    length_dependent=True,  # by_length (HF, Phi-3): the long factors past original_max_position_embeddings
    config_keys=(
        "short_factor",
        "long_factor",
        "original_max_position_embeddings",
        "max_position_embeddings",
        "attention_factor",
    ),
    params=RopeLongropeParams,
    paper="Ding et al. LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens (ICML 2024). "
    "https://arxiv.org/abs/2402.13753",
    conventions={
        "pairing": PAIRING_CONVENTION,
        "factor_set": "default by_length as HF: long factors when seq_len > original_max_position_embeddings "
        "(strictly greater: exactly L_orig still uses the short set)",
        "kv_cache": "with by_length, crossing L_orig changes the rotation of EVERY position, so keys cached "
        "with the short set are stale; recompute them, or fix factor_set per request/deployment",
        "attention_factor": "'su' sqrt(1 + ln s / ln L_orig) with s = max/original, applied on cos and sin "
        "even while the short factors are in use (as HF does)",
    },
)
def rope_longrope(params: RopeLongropeParams, ctx: RotaryContext) -> RotaryFrequencies:
    """LongRoPE (Ding et al., 2024; Phi-3 "su"/"longrope"): ω_k = 1 / (λ_k · base^(2k/d)).

    λ = long_factor when the set rule picks it (default: seq_len > L_orig), else short_factor; cos and sin
    are multiplied by the attention factor, default sqrt(1 + ln s / ln L_orig), s = L_max / L_orig.
    """
    pairs = ctx.rotary_dim // 2
    for field_name, factors in (("short_factor", params.short_factor), ("long_factor", params.long_factor)):
        if len(factors) != pairs:
            raise InvalidInput(
                ("params", field_name),
                f"needs one factor per rotated pair, rotary_dim/2 = {pairs}, got {len(factors)}",
            )
    use_long = params.factor_set == "long" or (
        params.factor_set == "by_length" and ctx.seq_len > params.original_max_position_embeddings
    )
    chosen = params.long_factor if use_long else params.short_factor
    rescale = torch.tensor(chosen, dtype=torch.float64)  # (d/2,)
    inv_freq = rope_inv_freq(params.base, ctx.rotary_dim, dtype=torch.float64) / rescale
    attention_scale = (
        params.attention_factor
        if params.attention_factor is not None
        else longrope_su_factor(params.max_position_embeddings, params.original_max_position_embeddings)
    )
    return _as_frequencies(inv_freq, ctx, attention_scale)


# -------------------------------------------------------------------------------------------- Llama-3 (D8)
class RopeLlama3Params(MethodParams):
    base: float = Field(default=500000.0, gt=1, description=BASE_DESCRIPTION)
    factor: float = Field(default=8.0, ge=1, description="divisor of the low frequencies")
    low_freq_factor: float = Field(default=1.0, gt=0, description="wavelengths > L/low: ω/factor")
    high_freq_factor: float = Field(default=4.0, gt=0, description="wavelengths < L/high: kept")
    original_max_position_embeddings: int = Field(default=8192, ge=1, description=ORIGINAL_LENGTH_DESCRIPTION)

    @model_validator(mode="after")
    def _band_not_inverted(self) -> RopeLlama3Params:
        if self.high_freq_factor < self.low_freq_factor:
            raise ValueError("high_freq_factor must be at least low_freq_factor (wavelengths L/high <= L/low)")
        return self


def llama3_bands(params: RopeLlama3Params, dim: int) -> list[tuple[str, float]]:
    """Llama 3's band per pair, as ``rope_llama3`` decides it from the unscaled wavelength λ_k = 2π/ω_k: 'high'
    when λ_k < L/high (kept, w = 0), 'low' when λ_k > L/low (ω_k/factor, w = 1), else 'smooth' with
    w = 1 − sm, sm = (L/λ_k − low)/(high − low); with high == low that middle is scaled ('low')."""
    length = params.original_max_position_embeddings
    width = params.high_freq_factor - params.low_freq_factor
    bands: list[tuple[str, float]] = []
    for wavelength in (2 * math.pi / rope_inv_freq(params.base, dim, dtype=torch.float64)).tolist():
        if wavelength < length / params.high_freq_factor:
            bands.append(("high", 0.0))
        elif wavelength > length / params.low_freq_factor or width <= 0:
            bands.append(("low", 1.0))
        else:
            bands.append(("smooth", 1.0 - (length / wavelength - params.low_freq_factor) / width))
    return bands


@register(
    "rope_llama3",
    kind=Kind.ROTARY,
    config_spellings=("llama3",),
    bands=llama3_bands,
    # λ_k < L/high ⇔ r_k > high keeps ω_k; λ_k > L/low ⇔ r_k < low divides it by the factor
    band_edges=lambda params: (
        float(params["high_freq_factor"]),
        float(params["low_freq_factor"]),
        ("high_freq_factor", "low_freq_factor"),
    ),
    config_keys=("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    params=RopeLlama3Params,
    paper="Llama Team, Meta. The Llama 3 Herd of Models (2024). https://arxiv.org/abs/2407.21783; "
    "formula from meta-llama/llama-models models/llama3 apply_scaling",
    conventions={
        "pairing": PAIRING_CONVENTION + " (Meta's own checkpoints: interleaved; HF-converted: half)",
        "band_edges": "wavelengths exactly at L/high or L/low belong to the smooth band (reference: >=, <=)",
        "attention_factor": "none (1)",
    },
)
def rope_llama3(params: RopeLlama3Params, ctx: RotaryContext) -> RotaryFrequencies:
    """Llama-3.1 RoPE scaling: by wavelength λ_k = 2π/ω_k, keep ω_k if λ_k < L/high, use ω_k/factor if
    λ_k > L/low, and in between blend (1 − sm)·ω_k/factor + sm·ω_k with sm = (L/λ_k − low)/(high − low).
    """
    original = rope_inv_freq(params.base, ctx.rotary_dim, dtype=torch.float64)  # (d/2,)
    wavelength = 2 * math.pi / original  # (d/2,)
    length = params.original_max_position_embeddings
    band_width = params.high_freq_factor - params.low_freq_factor
    if band_width > 0:
        smooth = (length / wavelength - params.low_freq_factor) / band_width  # (d/2,) 0 at L/low, 1 at L/high
    else:  # high == low (Llama 4): no smooth band; a wavelength of exactly L/low is scaled
        smooth = torch.zeros_like(wavelength)  # (d/2,)
    blended = (1 - smooth) * original / params.factor + smooth * original
    inv_freq = torch.where(
        wavelength < length / params.high_freq_factor,
        original,
        torch.where(wavelength > length / params.low_freq_factor, original / params.factor, blended),
    )
    return _as_frequencies(inv_freq, ctx)
