"""ALiBi family: linear distance penalties with fixed per-head slopes (Press, Smith, Lewis, ICLR 2022).

Methods: ``alibi`` (1D, causal or symmetric, optional slope interpolation).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from posenc.pe.ops import relative_positions
from posenc.pe.registry import MethodParams, register
from posenc.pe.types import BiasContext
from posenc.schemas.methods import Kind

ALIBI_PAPER = "Press, Smith, Lewis. Train Short, Test Long (ICLR 2022). https://arxiv.org/abs/2108.12409"


def alibi_slopes(num_heads: int, max_bias: float = 8.0) -> list[float]:
    """The reference ``get_slopes``: geometric 2^(−max_bias·(h+1)/H) for power-of-two H; otherwise the
    slopes of the largest power of two c < H, then every other slope of the 2c set (not monotone)."""

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-max_bias * (h + 1) / n) for h in range(n)]

    if num_heads & (num_heads - 1) == 0:
        return power_of_two(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_two(closest) + alibi_slopes(2 * closest, max_bias)[0::2][: num_heads - closest]


class AlibiParams(MethodParams):
    max_bias: float = Field(default=8.0, gt=0, description="the 8 in 2^(-8(h+1)/H) (MPT: alibi_bias_max)")
    train_length: int | None = Field(
        default=None,
        ge=1,
        description="slope interpolation (Al-Khateeb et al. 2023): training length L; None disables it",
    )
    eval_length: int | None = Field(
        default=None, ge=1, description="target length L' for interpolation; default max(Nq, Nk)"
    )


@register(
    "alibi",
    kind=Kind.BIAS,
    params=AlibiParams,
    paper=ALIBI_PAPER,
    toeplitz=True,
    conventions={
        "slopes": "paper get_slopes: geometric for power-of-two H, interleaved extension otherwise",
        "direction": "causal: -m_h (i - j) for j <= i; bidirectional: symmetric -m_h |i - j|",
        "scale_placement": "added after the 1/sqrt(d) scaling",
        "interpolation": "with train_length L and L' > L, m_h -> m_h L / L' (Al-Khateeb et al. 2023)",
    },
)
def alibi(params: AlibiParams, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: BiasContext) -> torch.Tensor:
    """ALiBi: B[h, i, j] = −m_h·(i − j) (causal) or −m_h·|i − j| (bidirectional).

    Slopes m_h from the paper's ``get_slopes``; with ``train_length`` L and target L' > L the slopes are
    interpolated, m_h ← m_h·L/L' (equal to interpolating the distance). The relative form is used, never
    the causal shortcut m_h·j, which is wrong without a causal mask and collapses in bf16.
    """
    slopes = torch.tensor(alibi_slopes(ctx.num_heads, params.max_bias), dtype=torch.float64)  # (H,)
    if params.train_length is not None:
        target = params.eval_length or max(ctx.query_length, ctx.key_length)
        if target > params.train_length:
            slopes = slopes * (params.train_length / target)
    distance = relative_positions(q_pos, k_pos)  # (Nq, Nk) int64, i - j
    if not ctx.causal:
        distance = distance.abs()
    slopes = slopes.to(device=distance.device, dtype=ctx.dtype)
    return slopes[:, None, None] * (-distance).to(ctx.dtype)[None, :, :]  # (H, Nq, Nk); -d avoids -0.0
