"""Sandwich family: the position-position cross term of sinusoidal PE as a parameter-free bias
(Chi, Fan, Rudnicky, Ramadge, ACL 2023).

Methods: ``sandwich``. Two public ports differ in where the frequency index starts ([unverified]
against the authors' code): k_start = 0 is attention-gym's form, the default; k_start = 1 is
NeMo's, which also subtracts d̄/2. Both apply the per-head compression H/(8(h+1)).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from posenc.pe.ops import compute_dtype, relative_positions
from posenc.pe.registry import MethodParams, register
from posenc.pe.types import BiasContext, Extent, ParamCost
from posenc.schemas.methods import Kind

SANDWICH_PAPER = (
    "Chi, Fan, Rudnicky, Ramadge. Dissecting Transformer Length Extrapolation via the Lens of Receptive "
    "Field Analysis (ACL 2023). https://arxiv.org/abs/2212.10356"
)


class SandwichParams(MethodParams):
    d_bar: int = Field(
        default=128,
        ge=2,
        le=65536,
        multiple_of=2,
        description="width of the sinusoid whose cross term is used (d̄/2 frequencies; paper 128)",
    )
    k_start: Literal[0, 1] = Field(
        default=0,
        description="0: Σ_{k=0}^{d̄/2-1} (attention-gym); 1: Σ_{k=1}^{d̄/2} minus d̄/2 (NeMo)",
    )
    base: float = Field(default=10000.0, gt=1, description="sinusoid base")


def sandwich_profile(distance: torch.Tensor, d_bar: int, k_start: int, base: float) -> torch.Tensor:
    """b(Δ) = Σ_k cos(Δ·base^(−2k/d̄)) for k = k_start … k_start + d̄/2 − 1, minus d̄/2 when k_start = 1.

    distance: int64 (M,) -> float64 (M,). Always float64: the table is one value per distinct distance,
    so the precision is cheap, and a float32 angle Δ·ω would lose digits at long distances.
    """
    k = torch.arange(k_start, k_start + d_bar // 2, dtype=torch.int64, device=distance.device)  # (d̄/2,)
    frequencies = float(base) ** (-2.0 * k.to(torch.float64) / d_bar)  # (d̄/2,)
    angles = distance.to(torch.float64)[:, None] * frequencies[None, :]  # (M, d̄/2)
    profile = torch.cos(angles).sum(dim=-1)  # (M,)
    # NeMo's form subtracts d̄/2 so that b(0) = 0; softmax ignores this per-head constant.
    return profile - d_bar // 2 if k_start == 1 else profile


def sandwich_cost(params: SandwichParams, extent: Extent) -> ParamCost:
    """The profile over the distinct distances (at most Nq + Nk − 1): a (M, d̄/2) float64 angle matrix, its
    cosines and their sum; the distances' sort (torch.unique) and gather over the Nq·Nk pairs."""
    angles = extent.distances * (params.d_bar // 2)
    return ParamCost(elements=2 * angles + 4 * extent.pairs, passes=8 * angles, params=("d_bar",))


@register(
    "sandwich",
    kind=Kind.BIAS,
    params=SandwichParams,
    paper=SANDWICH_PAPER,
    toeplitz=True,
    param_cost=sandwich_cost,
    conventions={
        "frequency_origin": "k_start=0: k = 0..d̄/2-1 (attention-gym, default); "
        "k_start=1: k = 1..d̄/2, minus d̄/2 (NeMo) [unverified against the authors' code]",
        "head_scale": "b(|i - j|) * H / (8 (h + 1)), h 0-based (NeMo writes h*8/H with h 1-based)",
        "distance": "|i - j| in both directions (causal: NeMo's tril under the mask)",
        "scale_placement": "added after the 1/sqrt(d) scaling",
    },
)
def sandwich(params: SandwichParams, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: BiasContext) -> torch.Tensor:
    """Sandwich: B[h, i, j] = b(|i − j|)·H/(8(h+1)), b(Δ) = Σ_k cos(Δ·base^(−2k/d̄)) (``sandwich_profile``).

    b is the inner product p_iᵀp_j of two sinusoidal encodings of width d̄: parameter-free, roughly
    logarithmic decay with oscillations. The profile is computed once per distinct distance, then gathered.
    """
    distance = relative_positions(q_pos, k_pos).abs()  # (Nq, Nk) int64
    distinct, index = torch.unique(distance, return_inverse=True)  # (M,), (Nq, Nk)
    profile = sandwich_profile(distinct, params.d_bar, params.k_start, params.base)  # (M,) float64
    heads = torch.arange(ctx.num_heads, dtype=torch.float64, device=distance.device)  # (H,)
    head_scale = ctx.num_heads / (8.0 * (heads + 1.0))  # (H,)
    work = compute_dtype(ctx.dtype)
    per_head = (head_scale[:, None] * profile[None, :]).to(work)  # (H, M)
    return per_head[:, index].to(ctx.dtype)  # (H, Nq, Nk)
