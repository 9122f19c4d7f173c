"""xPos: RoPE with a per-pair exponential decay (Sun et al., 2022, "A Length-Extrapolatable Transformer").

Methods: ``xpos``. The angles are RoPE's; the method also returns ζ and λ, from which
``posenc.pe.kinds.xpos_scale`` builds ζ^(n/λ). The caller multiplies rotated queries by it and rotated keys by
its reciprocal (``apply_rotary(..., scale=...)``), so that q̃_i·k̃_j = Σ_k ζ_k^((i−j)/λ)·[rotary term]_k.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from posenc.pe.ops import rope_inv_freq
from posenc.pe.registry import MethodParams, register
from posenc.pe.types import RotaryContext, RotaryFrequencies
from posenc.schemas.methods import Kind

XPOS_GAMMA = 0.4  # γ in ζ_k = (2k/d + γ)/(1 + γ), fixed by the paper and torchscale


class XposParams(MethodParams):
    base: float = Field(default=10000.0, gt=1, description="θ of the RoPE angles, ω_k = θ^(−2k/d)")
    scale_base: float = Field(default=512.0, gt=0, description="λ in ζ^(n/λ) (torchscale: 512; NeMo's port: 2048)")
    scale_center: Literal["none", "midpoint"] = Field(
        default="none",
        description="positions the decay scale uses: 'none' the raw n (the paper's formula); 'midpoint' "
        "n − ⌈L/2⌉ with L the current length (torchscale's min_pos = −⌈L/2⌉), which keeps ζ^(±n/λ) finite for "
        "long sequences",
    )


@register(
    "xpos",
    kind=Kind.ROTARY,
    params=XposParams,
    paper="Sun et al. A Length-Extrapolatable Transformer (ACL 2023). https://arxiv.org/abs/2212.10554",
    conventions={
        "pairing": "request option (torchscale: interleaved); both members of pair k share ζ_k in any layout",
        "causal_only": "the key-side factor ζ^(−j/λ) grows for j > i, so future keys must be masked; "
        "xPos is defined for causal attention only",
        "scale_direction": "queries × ζ^(n/λ), keys × ζ^(−n/λ) (the reciprocal): scores decay as i − j grows",
        "centring": "a shift n → n − c of the scale positions cancels in q·k when queries and keys are scaled "
        "with the same c (ζ^((i−c)/λ)·ζ^(−(j−c)/λ) = ζ^((i−j)/λ)), as within one request; scale_center='none' "
        "uses the raw positions (the paper), 'midpoint' uses c = ⌈L/2⌉ with L the current length, like "
        "torchscale. With 'midpoint' and a KV cache the centre moves as L grows, so keys cached at an earlier "
        "step carry another c and the shift no longer cancels. With raw positions float32 ζ_0^(±n/λ) "
        "overflows past n ≈ 36000 (λ = 512): such requests are refused with a 422 that names scale_center",
    },
)
def xpos(params: XposParams, ctx: RotaryContext) -> RotaryFrequencies:
    """xPos: RoPE angles plus ζ_k = (2k + 0.4d)/(1.4d), q̃_i = R(i)q ⊙ ζ^(i/λ), k̃_j = R(j)k ⊙ ζ^(−j/λ).

    Then q̃_i·k̃_j = Σ_k ζ_k^((i−j)/λ)·[rotary term]_k: since ζ_k < 1 the score decays with i − j > 0.
    """
    dim = ctx.rotary_dim
    pair_index = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64)  # (d/2,) values 2k
    zeta = (pair_index + XPOS_GAMMA * dim) / ((1 + XPOS_GAMMA) * dim)  # (d/2,) in (0.29, 1)
    return RotaryFrequencies(
        inv_freq=rope_inv_freq(params.base, dim, dtype=ctx.dtype).to(ctx.device),
        xpos_zeta=zeta.to(device=ctx.device, dtype=ctx.dtype),
        xpos_scale_base=params.scale_base,
        xpos_center=(ctx.seq_len + 1) // 2 if params.scale_center == "midpoint" else 0,  # ⌈L/2⌉
    )
