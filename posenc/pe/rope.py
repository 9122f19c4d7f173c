"""RoPE: rotary position embedding (Su et al., RoFormer, 2021).

Methods: ``rope``. The scaled variants live in ``rope_scaling``; the rotation itself is shared
(``posenc.pe.kinds.apply_rotary``) and takes the pairing (half or interleaved) as a parameter.
"""

from __future__ import annotations

from pydantic import Field

from posenc.pe.ops import rope_inv_freq
from posenc.pe.registry import MethodParams, register
from posenc.pe.types import RotaryContext, RotaryFrequencies
from posenc.schemas.methods import Kind

ROPE_CONVENTIONS = {
    "pairing": "request option: half (GPT-NeoX/HF rotate_half) or interleaved (GPT-J/Meta); "
    "half_split(P x) = P interleaved(x) with P = [0, 2, ..., d-2, 1, 3, ..., d-1]",
    "positions": "int64 until the frequency multiply; tables in float32 (float64 for references)",
}


class RopeParams(MethodParams):
    base: float = Field(default=10000.0, gt=1, description="θ in ω_k = θ^(−2k/d) (Llama-3: 500000)")


@register(
    "rope",
    kind=Kind.ROTARY,
    # "mrope" is Qwen2-VL's v4 spelling: with an mrope_section the resolver turns it into the method mrope
    config_spellings=("default", "mrope"),
    params=RopeParams,
    paper="Su et al. RoFormer: Enhanced Transformer with Rotary Position Embedding (2021). "
    "https://arxiv.org/abs/2104.09864",
    conventions=ROPE_CONVENTIONS,
)
def rope(params: RopeParams, ctx: RotaryContext) -> RotaryFrequencies:
    """RoPE: rotate pair k of q_i by i·ω_k and of k_j by j·ω_k, ω_k = base^(−2k/d), k ∈ [0, d/2).

    Then ⟨R(i)q, R(j)k⟩ = ⟨q, R(j − i)k⟩: scores depend on content and j − i only.
    """
    inv_freq = rope_inv_freq(params.base, ctx.rotary_dim, dtype=ctx.dtype)  # (d/2,) built on the CPU
    return RotaryFrequencies(inv_freq=inv_freq.to(ctx.device))
