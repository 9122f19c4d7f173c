"""xPos: RoPE with a per-pair exponential decay (Sun et al., 2022, "A Length-Extrapolatable Transformer").

Methods: ``xpos``. The angles are RoPE's; the method also returns ζ and λ, from which
``posenc.pe.kinds.xpos_scale`` builds ζ^(n/λ). The caller multiplies rotated queries by it and rotated keys by
its reciprocal (``apply_rotary(..., scale=...)``), so that q̃_i·k̃_j = Σ_k ζ_k^((i−j)/λ)·[rotary term]_k.
"""

from __future__ import annotations

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
        "centring": "a constant shift n → n − c of the scale positions cancels in q·k "
        "(ζ^((i−c)/λ)·ζ^(−(j−c)/λ) = ζ^((i−j)/λ)); "
        "torchscale centres them around 0 (n − ⌊N/2⌋) to keep ζ^(±n/λ) in range. Shift q and k positions by "
        "the same c; with raw positions, float32 ζ_0^(±n/λ) under/overflows for n ≳ 35000",
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
    )
