"""ALiBi family: linear distance penalties with fixed per-head slopes (Press, Smith, Lewis, ICLR 2022).

Methods: ``alibi`` (1D, causal or symmetric, optional slope interpolation) and ``alibi_2d`` (CROMA's
Euclidean-distance form over a row-major patch grid, Fuller et al., NeurIPS 2023).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from posenc.errors import InvalidInput
from posenc.pe.ops import compute_dtype
from posenc.pe.registry import MethodParams, register
from posenc.pe.types import BiasContext
from posenc.schemas.methods import Kind

ALIBI_PAPER = "Press, Smith, Lewis. Train Short, Test Long (ICLR 2022). https://arxiv.org/abs/2108.12409"
CROMA_PAPER = (
    "Fuller, Millard, Green. CROMA: Remote Sensing Representations with Contrastive Radar-Optical Masked "
    "Autoencoders (NeurIPS 2023). https://arxiv.org/abs/2311.00566"
)


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
    # Built in float32 (float64 for references) and cast once: bf16 holds integers exactly only up to 256,
    # so casting the distances themselves to bf16 would merge neighbouring keys.
    # Positions are far below 2^24, so they and their differences are exact in float32.
    work = compute_dtype(ctx.dtype)
    j_minus_i = k_pos.to(work)[None, :] - q_pos.to(work)[:, None]  # (Nq, Nk) = −(i − j); +0.0 on the diagonal
    # −|i − j| for the symmetric form; adding 0.0 turns the diagonal's −0.0 back into +0.0
    neg_distance = j_minus_i if ctx.causal else j_minus_i.abs().neg_().add_(0.0)
    slopes = slopes.to(device=neg_distance.device, dtype=work)
    bias = slopes[:, None, None] * neg_distance[None, :, :]  # (H, Nq, Nk)
    return bias.to(ctx.dtype)


class Alibi2dParams(MethodParams):
    grid_width: int | None = Field(
        default=None,
        ge=1,
        description="patches per row of the row-major grid; None: a square grid, side sqrt(key_length)",
    )
    max_bias: float = Field(default=8.0, gt=0, description="the 8 in the slopes 2^(-8(h+1)/H), as in alibi")


def _square_grid_width(ctx: BiasContext) -> int:
    """Side of the square grid the keys fill (CROMA's get_2dalibi supports square grids only)."""
    side = math.isqrt(ctx.key_length)
    if side * side != ctx.key_length:
        # key_length defaults to query_length in a request: name the field the caller actually set
        field = "query_length" if ctx.key_length == ctx.query_length else "key_length"
        raise InvalidInput(
            (field,),
            f"{ctx.key_length} tokens do not form a square grid; give params.grid_width for a rectangle",
        )
    return side


@register(
    "alibi_2d",
    axes=2,
    kind=Kind.BIAS,
    params=Alibi2dParams,
    paper=CROMA_PAPER,
    conventions={
        "layout": "positions (N, 2) are (row, col) coordinates (a request's grid); 1D positions are token indices "
        "of a row-major grid: token p at row p // W, column p mod W (W = grid_width, or a square grid)",
        "slopes": "ALiBi get_slopes(H), unchanged",
        "direction": "bidirectional by design (encoder); causal=True still applies the -inf mask to j > i",
        "scale_placement": "added after the 1/sqrt(d) scaling",
    },
)
def alibi_2d(params: Alibi2dParams, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: BiasContext) -> torch.Tensor:
    """2D ALiBi (CROMA): B[h, p, q] = −m_h·‖(r_p, c_p) − (r_q, c_q)‖₂ between patches of a row-major grid.

    Positions are (row, col) coordinates, or token indices p of a row-major grid (row r_p = p // W, column
    c_p = p mod W); m_h are ALiBi's slopes. The formula is
    bidirectional by design and ignores ctx.causal: with causal=True, bias_dense still masks keys with a
    larger index (later rows, later columns of the same row), which is a raster-order mask, not a 2D one.
    Not Toeplitz in the token index (only in the 2D offset), so only the dense form exists.
    """
    work = compute_dtype(ctx.dtype)
    if q_pos.dim() == 2:  # (row, col) coordinates
        row_offset = q_pos[:, None, 0] - k_pos[None, :, 0]  # (Nq, Nk) int64, r_p - r_q
        col_offset = q_pos[:, None, 1] - k_pos[None, :, 1]  # (Nq, Nk) int64, c_p - c_q
    else:  # token indices of a row-major grid
        width = params.grid_width if params.grid_width is not None else _square_grid_width(ctx)
        row_offset = q_pos[:, None] // width - k_pos[None, :] // width  # (Nq, Nk) int64
        col_offset = q_pos[:, None] % width - k_pos[None, :] % width  # (Nq, Nk) int64
    distance = torch.hypot(row_offset.to(work), col_offset.to(work))  # (Nq, Nk), Euclidean
    slopes = torch.tensor(alibi_slopes(ctx.num_heads, params.max_bias), dtype=work, device=distance.device)
    bias = slopes[:, None, None] * distance[None, :, :]  # (H, Nq, Nk)
    return (0.0 - bias).to(ctx.dtype)  # 0 - x rather than -x: the diagonal is 0.0, not -0.0
