"""RoPE variants of recent models, each a function of the frequencies and never new rotation code.

Methods and the sources their formulas are read from:

- ``rope_proportional``: p-RoPE of Barbero, Vitvitskyi, Perivolaropoulos, Pascanu, Veličković, "Round and Round
  We Go! What makes Rotary Positional Encodings useful?" (ICLR 2025, https://arxiv.org/abs/2410.06205), as
  Gemma 4's global layers use it; formula from Hugging Face transformers 5.23
  ``modeling_rope_utils._compute_proportional_rope_parameters`` (rope_type="proportional").
- ``rope_ntk_alpha``: the fixed-alpha NTK base of Tencent Hunyuan (https://github.com/Tencent/Hunyuan-Large);
  formula from vLLM ``vllm/model_executor/layers/rotary_embedding/dynamic_ntk_alpha_rope.py``
  (``DynamicNTKAlphaRotaryEmbedding``), the same as transformers' HunYuan ``compute_ntk_alpha_rope_parameters``.
- ``fope``: the floor-frequency clipping of Hua et al., "Fourier Position Embedding: Enhancing Attention's
  Periodic Extension for Length Generalization" (ICML 2025, https://arxiv.org/abs/2412.17739), as vLLM
  ``vllm/model_executor/layers/rotary_embedding/fope.py`` (``FourierRotaryEmbedding``) implements it, with its
  Fourier-series coefficients: the kept pairs' cos and sin become weighted sums over the kept frequencies
  (``RotaryFrequencies.fourier_cos`` / ``fourier_sin``, applied by ``posenc.pe.kinds.rotary_tables``).

The shared apply (``posenc.pe.kinds.rotary_tables`` + ``apply_rotary``) rotates with the request's pairing; a zero
frequency is the identity rotation, so pairs a method leaves unrotated pass through unchanged in either layout.
Frequencies are built in float64 and rounded once to the context dtype.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from pydantic import Field, model_validator

from posenc.errors import InvalidInput
from posenc.pe.ops import rope_inv_freq
from posenc.pe.registry import MethodParams, register
from posenc.pe.types import Extent, ParamCost, RotaryContext, RotaryFrequencies
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn
from posenc.tensors import to_torch

PAIRING_CONVENTION = (
    "request option: half (GPT-NeoX/HF rotate_half) or interleaved (GPT-J/Meta); the method only changes "
    "the frequencies, so both layouts see the same angles"
)
VLLM_ROTARY = "https://github.com/vllm-project/vllm/tree/main/vllm/model_executor/layers/rotary_embedding"


def _as_frequencies(inv_freq64: torch.Tensor, ctx: RotaryContext) -> RotaryFrequencies:
    """Round the float64 frequencies (d/2,) once to the context dtype and device."""
    return RotaryFrequencies(inv_freq=inv_freq64.to(device=ctx.device, dtype=ctx.dtype))


# ------------------------------------------------------------------------------------- p-RoPE (Gemma 4)
class RopeProportionalParams(MethodParams):
    base: float = Field(
        default=1_000_000.0, gt=1, description="θ in ω_k = θ^(−2k/d) (HF rope_theta; Gemma 4 global layers: 1e6)"
    )
    rotated_fraction: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="p, the fraction of the d/2 pairs that rotate, highest frequencies first (HF "
        "partial_rotary_factor; Gemma 4 global layers: 0.25); the other pairs get ω = 0",
    )
    factor: float = Field(default=1.0, gt=0, description="s, divides every frequency (HF factor; default 1)")


@register(
    "rope_proportional",
    kind=Kind.ROTARY,
    # transformers' rope_type "proportional" (Gemma 4); its partial_rotary_factor is this method's rotated_fraction
    config_spellings=("proportional",),
    config_keys=("factor",),
    params=RopeProportionalParams,
    paper="Barbero, Vitvitskyi, Perivolaropoulos, Pascanu, Veličković. Round and Round We Go! What makes Rotary "
    "Positional Encodings useful? (ICLR 2025). https://arxiv.org/abs/2410.06205; Gemma 4 form from Hugging Face "
    "transformers modeling_rope_utils._compute_proportional_rope_parameters (rope_type='proportional')",
    conventions={
        "pairing": PAIRING_CONVENTION + ". HF/Gemma 4 use half with rotary_dim = head_dim: the unrotated pairs "
        "(k, k + d/2) for k >= r sit at the end of each half, not at the end of the head",
        "exponent": "ω_k = θ^(−2k/d) with d = rotary_dim (the whole head in Gemma 4), NOT θ^(−2k/(p·d)) as a "
        "partial rotary (partial_rotary_factor in other HF rope types) would give: p-RoPE keeps the p·d/2 "
        "highest frequencies of full RoPE and drops the lowest",
        "rotated_pairs": "r = int(p·d // 2) evaluated in floating point exactly as HF does, so a p·d that "
        "floating point puts just below an even integer rotates one pair fewer (p = 0.58, d = 100: r = 28)",
        "factor": "divides the rotated frequencies, as HF's function reads it (HF's config validation warns "
        "that 'factor' is not a key of rope_type 'proportional'; Gemma 4 does not set it); attention factor 1",
    },
)
def rope_proportional(params: RopeProportionalParams, ctx: RotaryContext) -> RotaryFrequencies:
    """p-RoPE: ω_k = θ^(−2k/d)/s for k < r = ⌊p·d/2⌋ and ω_k = 0 for r ≤ k < d/2, d = rotary_dim.

    The p·d/2 highest frequencies of RoPE rotate (divided by the factor s, default 1); the lowest (1 − p)·d/2
    pairs are never rotated, which leaves them position-free channels (Barbero et al., 2024). p = 1 is RoPE
    (linear-scaled by s), p = 0 is NoPE.
    """
    # HF's expression, float floor division included: the count must match checkpoints trained with it
    rotated = int(params.rotated_fraction * ctx.rotary_dim // 2)  # <= d/2 since p <= 1
    inv_freq = rope_inv_freq(params.base, ctx.rotary_dim, dtype=torch.float64) / params.factor  # (d/2,)
    inv_freq[rotated:] = 0.0  # (d/2,): the lowest frequencies become the identity rotation
    return _as_frequencies(inv_freq, ctx)


# --------------------------------------------------------------------------------- NTK by alpha (Hunyuan)
class RopeNtkAlphaParams(MethodParams):
    base: float = Field(default=10000.0, gt=1, description="θ before scaling (HF rope_theta)")
    alpha: float = Field(
        ge=1,
        description="α, the fixed NTK constant of the checkpoint (Hunyuan configs: rope_scaling.alpha, e.g. "
        "1000 for Hunyuan-A13B); not a context-length ratio",
    )


@register(
    "rope_ntk_alpha",
    kind=Kind.ROTARY,
    params=RopeNtkAlphaParams,
    config_extends=("rope_dynamic_ntk", "alpha"),  # HunYuan: rope_type "dynamic" with an alpha is this, static
    config_keys=("alpha",),
    paper="Tencent Hunyuan (Hunyuan-Large, Hunyuan-A13B). https://github.com/Tencent/Hunyuan-Large; formula from "
    f"vLLM {VLLM_ROTARY}/dynamic_ntk_alpha_rope.py (DynamicNTKAlphaRotaryEmbedding)",
    conventions={
        "pairing": PAIRING_CONVENTION,
        "exponent": "d/(d−2) with d = rotary_dim, as vLLM and transformers' HunYuan; the same formula as "
        "rope_ntk with factor = α",
        "static": "checkpoints label it rope_scaling type 'dynamic', but with a fixed α the base does not depend "
        "on the sequence length (vLLM builds one cache; transformers gives it its own type 'ntk_alpha')",
        "attention_factor": "none (1)",
    },
)
def rope_ntk_alpha(params: RopeNtkAlphaParams, ctx: RotaryContext) -> RotaryFrequencies:
    """NTK by alpha (Hunyuan): base' = base·α^(d/(d−2)), then ω_k = base'^(−2k/d), d = rotary_dim.

    The highest frequency ω_0 = 1 is kept and the lowest, ω_{d/2−1}, is divided by exactly α; α = 1 is RoPE.
    """
    dim = ctx.rotary_dim
    if dim < 4:
        raise InvalidInput(("rotary_dim",), f"NTK-alpha scaling needs rotary_dim >= 4 (d/(d-2)), got {dim}")
    scaled_base = params.base * params.alpha ** (dim / (dim - 2))
    return _as_frequencies(rope_inv_freq(scaled_base, dim, dtype=torch.float64), ctx)


# -------------------------------------------------------------------------------------------------- FoPE
class FopeParams(MethodParams):
    base: float = Field(default=10000.0, gt=1, description="θ in ω_k = θ^(−2k/d)")
    train_length: int | None = Field(
        ge=1,
        description="L_train for the floor frequency 2π/L_train: ω_k ≤ 2π/L_train is clipped to 0 (vLLM passes "
        "the config's max_position_embeddings); null: no floor clipping",
    )
    num_inv_freq: int | None = Field(
        default=None,
        ge=0,
        description="vLLM's alternative to the floor: keep the first n pairs and clip the rest; give it with "
        "train_length null",
    )
    cos_coef: TensorIn | None = Field(
        default=None,
        description="(K, K) or (1, K, K) Fourier coefficients C of the K kept pairs: cos'_k = Σ_u cos(n·ω_u)·C[u, k] "
        "(vLLM's cos_coef of a checkpoint, shared by the heads); default the identity",
    )
    sin_coef: TensorIn | None = Field(
        default=None, description="(K, K) or (1, K, K) coefficients S: sin'_k = Σ_u sin(n·ω_u)·S[u, k]"
    )
    gain: float = Field(
        default=0.0,
        ge=0,
        description="coefficients not given: fixed random C, S = I + xavier_normal(gain) (the authors' "
        "eye_xavier_norm; their gains 0.3 / 0.4 / 0.6 for 60M / 180M / 1.2B models); 0: the identity",
    )
    seed: int = Field(default=0, ge=0, description="seed of the random coefficients (gain > 0)")

    @model_validator(mode="after")
    def _one_selection(self) -> FopeParams:
        if self.train_length is not None and self.num_inv_freq is not None:
            raise ValueError(
                "give train_length (floor-frequency clipping) or num_inv_freq (keep the first n pairs), not both; "
                "vLLM would silently ignore train_length"
            )
        return self


# FoPE's frequencies (and its seeded coefficients) are built up to this many times a request: the route's
# workspace estimate, each rotated side, the meta and the returned tables.
FOPE_BUILDS = 5


def _fope_kept(params: FopeParams, pairs: int, rotary_dim: int) -> int:
    """K, the pairs FoPE keeps out of ``pairs`` (as ``fope`` selects them)."""
    if params.num_inv_freq is not None:
        return min(params.num_inv_freq, pairs)
    if params.train_length is None:
        return pairs
    inv_freq = rope_inv_freq(params.base, rotary_dim, dtype=torch.float64)  # (d/2,)
    return int((inv_freq > 2.0 * math.pi / params.train_length).sum())


def fope_cost(params: FopeParams, extent: Extent) -> ParamCost:
    """The Fourier series over the K kept pairs, when there are coefficients (given, or gain > 0): per table
    (each side's and the returned one's, Nq + 2·Nk rows at most) 2·N·K² multiply-adds and the (N, K) products
    and (N, d/2) tables they are concatenated into; per build (FOPE_BUILDS) the (K, K) draws of the coefficients
    not given and 3·K² values per coefficient. Nothing without coefficients."""
    if params.cos_coef is None and params.sin_coef is None and params.gain == 0:
        return ParamCost()
    pairs = extent.dim // 2
    kept = _fope_kept(params, pairs, 2 * pairs)
    rows = extent.queries + 2 * extent.keys
    missing = (params.cos_coef is None) + (params.sin_coef is None)
    selection = ("num_inv_freq",) if params.num_inv_freq is not None else ("train_length",)
    drivers = ("gain",) if missing else ("cos_coef", "sin_coef")
    return ParamCost(
        drawn=FOPE_BUILDS * missing * kept * kept,
        elements=2 * 3 * kept * kept + 2 * 2 * max(extent.queries, extent.keys) * (kept + pairs),
        passes=FOPE_BUILDS * 2 * 3 * kept * kept + 2 * 2 * rows * (kept + pairs),
        macs=2 * 2 * rows * kept * kept,
        params=(*selection, *drivers),
    )


@register(
    "fope",
    kind=Kind.ROTARY,
    params=FopeParams,
    param_cost=fope_cost,
    paper="Hua et al. Fourier Position Embedding: Enhancing Attention's Periodic Extension for Length "
    f"Generalization (ICML 2025). https://arxiv.org/abs/2412.17739; vLLM {VLLM_ROTARY}/fope.py",
    conventions={
        "pairing": PAIRING_CONVENTION + " (vLLM's FoPE always uses half)",
        "floor": "a pair is kept iff ω_k > 2π/L_train (vLLM; the authors' code clips ω_k < 2π/L_train, the two "
        "differ only at equality); compared in float64, vLLM compares the float32 ω",
        "clipped_pairs": "ω = 0: cos 1, sin 0, the identity, as vLLM pads its tables; the authors' code pads "
        "cos = sin = 1 instead (a fixed 45° turn with gain √2, so q·k gains 2 on those pairs), not supported",
        "coefficients": "cos_coef and sin_coef shared by every head (vLLM's fope_sep_head=False; per-KV-head "
        "coefficients are not supported); default the identity, which is RoPE with clipping",
        "rotary_dim": "d = rotary_dim; vLLM lays the tables over the whole head (rotary_dim = head_size)",
    },
)
def fope(params: FopeParams, ctx: RotaryContext) -> RotaryFrequencies:
    """FoPE: ω_k = θ^(−2k/d) if ω_k > 2π/L_train, else 0 (d = rotary_dim); over the K kept pairs
    cos'_k(n) = Σ_u cos(n·ω_u)·C[u, k] and sin'_k(n) = Σ_u sin(n·ω_u)·S[u, k]; clipped pairs are the identity.

    Frequencies that do not complete one period within the training length are under-trained; FoPE replaces
    them by the zero frequency, so those pairs carry no position, and lets each kept pair mix the kept
    frequencies (a Fourier series; Hua et al., 2024). With num_inv_freq = n the first n pairs are kept instead
    (vLLM). C and S default to the identity (plain RoPE with clipping).
    """
    pairs = ctx.rotary_dim // 2
    inv_freq = rope_inv_freq(params.base, ctx.rotary_dim, dtype=torch.float64)  # (d/2,)
    if params.num_inv_freq is not None:
        if params.num_inv_freq > pairs:
            raise InvalidInput(
                ("params", "num_inv_freq"),
                f"keeps the first n of rotary_dim/2 = {pairs} pairs, got n = {params.num_inv_freq}",
            )
        inv_freq[params.num_inv_freq :] = 0.0
    elif params.train_length is not None:
        floor = 2.0 * math.pi / params.train_length
        inv_freq = torch.where(inv_freq > floor, inv_freq, torch.zeros_like(inv_freq))  # (d/2,)
    frequencies = _as_frequencies(inv_freq, ctx)
    if params.cos_coef is None and params.sin_coef is None and params.gain == 0:
        return frequencies
    kept = int((inv_freq > 0).sum())  # the floor keeps a prefix: ω decreases with k
    generator = torch.Generator().manual_seed(params.seed)
    mix = {
        name: _coefficients(getattr(params, name), name, kept, params.gain, generator)
        for name in ("cos_coef", "sin_coef")
    }
    return replace(frequencies, fourier_cos=mix["cos_coef"], fourier_sin=mix["sin_coef"])


def _coefficients(
    value: TensorIn | None, name: str, kept: int, gain: float, generator: torch.Generator
) -> torch.Tensor:
    """A (K, K) coefficient matrix in float64: the given one ((1, K, K) squeezed), or I + N(0, σ²) with the
    xavier-normal σ = gain·√(2 / (K + K)) (the identity at gain 0)."""
    if value is None:
        noise = torch.randn(kept, kept, generator=generator, dtype=torch.float64)  # (K, K)
        return torch.eye(kept, dtype=torch.float64) + gain * math.sqrt(2.0 / (2 * kept)) * noise
    matrix = to_torch(value, ("params", name)).to(torch.float64)
    if matrix.dim() == 3 and matrix.shape[0] == 1:
        matrix = matrix[0]  # (K, K): one set shared by the heads
    if tuple(matrix.shape) != (kept, kept):
        raise InvalidInput(
            ("params", name),
            f"must be (K, K) or (1, K, K) for the K = {kept} kept pairs, got {tuple(matrix.shape)}",
        )
    return matrix
