"""2D rotary embeddings for images (Heo et al., ECCV 2024, "Rotary Position Embedding for Vision
Transformer").

Methods: ``rope_2d_axial``. Positions are (N, 2) integer (row, col) coordinates (posenc.pe.types), so the
paper's x is the column (axis 1) and y the row (axis 0); each rotated pair declares which coordinate it turns by
(``pair_axis``), and the shared apply does the rest.
"""

from __future__ import annotations

import torch
from pydantic import Field

from posenc.errors import InvalidInput
from posenc.pe.ops import rope_inv_freq
from posenc.pe.registry import MethodParams, register
from posenc.pe.types import RotaryContext, RotaryFrequencies
from posenc.schemas.methods import Kind

Y_AXIS, X_AXIS = 0, 1  # the (N, 2) positions are (row, col): y is column 0, x column 1


class Rope2dAxialParams(MethodParams):
    base: float = Field(default=100.0, gt=1, description="θ in ω_k = θ^(−4k/d) (RoPE-Axial: 100; RoPE-Mixed init: 10)")


@register(
    "rope_2d_axial",
    axes=2,
    kind=Kind.ROTARY,
    params=Rope2dAxialParams,
    paper="Heo, Park, Han, Yun. Rotary Position Embedding for Vision Transformer (ECCV 2024). "
    "https://arxiv.org/abs/2403.13298",
    conventions={
        "pairing": "request option; the reference (naver-ai/rope-vit compute_axial_cis) uses interleaved",
        "positions": "(N, 2) int (row, col) = (y, x): x = t mod W (column), y = t div W (row) for patch token t",
        "axes": "pairs 0 … d/4−1 rotate by x, pairs d/4 … d/2−1 by y, with the same d/4 frequencies",
        "cls": "the reference does not rotate CLS: send patch tokens only",
        "resolution": "a new grid reuses the same frequencies (extrapolation in position, no rescaling)",
    },
)
def rope_2d_axial(params: Rope2dAxialParams, ctx: RotaryContext) -> RotaryFrequencies:
    """RoPE-Axial: ω_k = θ^(−4k/d), k ∈ [0, d/4); pair k turns by x·ω_k, pair d/4 + k by y·ω_k.

    Per axis the score depends only on the offset along that axis: ⟨R(x,y)q, R(x',y')k⟩ is a function of
    x' − x and y' − y (Heo et al., 2024).
    """
    if ctx.rotary_dim % 4:
        raise InvalidInput(
            ("rotary_dim",),
            f"axial RoPE splits pairs over 2 axes: rotary_dim must be divisible by 4, got {ctx.rotary_dim}",
        )
    quarter = ctx.rotary_dim // 4
    # θ^(−2k/(d/2)) = θ^(−4k/d): the 1D table for half the width gives the per-axis frequencies
    per_axis = rope_inv_freq(params.base, ctx.rotary_dim // 2, dtype=ctx.dtype)  # (d/4,)
    inv_freq = torch.cat((per_axis, per_axis))  # (d/2,): x pairs, then y pairs
    pair_axis = torch.cat(
        (torch.full((quarter,), X_AXIS, dtype=torch.int64), torch.full((quarter,), Y_AXIS, dtype=torch.int64))
    )  # (d/2,)
    return RotaryFrequencies(inv_freq=inv_freq.to(ctx.device), pair_axis=pair_axis.to(ctx.device), num_axes=2)
