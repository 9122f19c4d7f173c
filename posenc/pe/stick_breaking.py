"""Stick-breaking attention: each key, from the nearest back, breaks off a share of what is left of the stick
(Tan, Shen, Peng, Courville, Panda, 2024, "Scaling Stick-Breaking Attention: An Efficient Implementation and
In-depth Study", https://arxiv.org/abs/2410.17980).

Methods: ``stick_breaking`` (kind ``attention``: it replaces the softmax). The formula follows the authors'
PyTorch reference ``shawntan/stickbreaking-attention:stickbreaking_attention/sb_ref.py:stickbreaking`` and the
reference forward of its tests: log-space weights, masked keys neither attended nor breaking
the stick, and the mass no key takes given to the query's own value.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from posenc.errors import InvalidInput
from posenc.pe.ops import compute_dtype
from posenc.pe.registry import MethodParams, register
from posenc.pe.types import AttentionWeights, Extent, LayerInputs, ParamCost, ScoreContext
from posenc.schemas.methods import Kind

STICK_BREAKING_PAPER = (
    "Tan, Shen, Peng, Courville, Panda. Scaling Stick-Breaking Attention: An Efficient Implementation and "
    "In-depth Study (ICLR 2025). https://arxiv.org/abs/2410.17980"
)

Leftover = Literal["current", "drop"]


class StickBreakingParams(MethodParams):
    attend_current: bool = Field(
        default=False,
        description="let query i attend its own key (j <= i, the product then runs to k <= i); the paper's "
        "default is j < i",
    )
    leftover: Leftover = Field(
        default="current",
        description="the mass 1 − Σ_j A_ij no key takes: 'current' adds it times the query's own value "
        "(the reference tests), 'drop' leaves it out of the output",
    )


def stick_breaking_cost(params: StickBreakingParams, extent: Extent) -> ParamCost:
    """No params drive it; the method's own (B, H, Nq, Nk) intermediates: the exclusion mask, log β, log(1 − β), the
    flipped reverse cumulative sum and its shift, the weights and the applier's empty-row test: about 12 maps written, 5
    of them live at once beyond the route's two."""
    maps = extent.batch * extent.heads * extent.pairs
    return ParamCost(elements=5 * maps, passes=12 * maps)


@register(
    "stick_breaking",
    param_cost=stick_breaking_cost,
    kind=Kind.ATTENTION,
    params=StickBreakingParams,
    paper=STICK_BREAKING_PAPER,
    causal_only=True,
    conventions={
        "scale": "z_ij = q_i·k_j / sqrt(d), as the reference",
        "order": "keys sorted by position; the nearest earlier key breaks the stick first",
        "current": "j < i by default (the paper); attend_current=True allows j = i",
        "masked_keys": "a masked key gets weight 0 and leaves the stick whole (log(1 − β) = 0), as the reference",
        "leftover": "1 − Σ_j A_ij = Π_k (1 − β_ik), added times v_i by default (reference tests); 'drop' omits it",
    },
)
def stick_breaking(params: StickBreakingParams, inputs: LayerInputs, ctx: ScoreContext) -> AttentionWeights:
    """Stick-breaking: A_ij = β_ij · Π_{j<k<i} (1 − β_ik), β = σ(q_i·k_j / √d), leftover = Π_{k<i} (1 − β_ik).

    In log space: log A_ij = log σ(z_ij) − Σ_{k=j+1}^{i−1} softplus(z_ik), the sum a reverse cumulative sum
    along keys (no N×N matmul). "k < i" compares positions, k_pos[k] < q_pos[i] (<= with attend_current);
    masked keys, and keys at or after the query, have log σ = −inf and log(1 − β) = 0. Sums run in float32
    (float64 for float64 contexts). The leftover is formed as the product of the row's (1 − β), which equals
    1 − Σ_j A_ij (the sum telescopes) without the cancellation of 1 − Σ. A row with no key gets zeros and
    leftover 1. With ``leftover="current"`` the applier adds leftover · v_i to the output.
    """
    inputs.check(ctx, head_dim=False, mask=True)
    k_pos = inputs.k_pos
    if k_pos.numel() > 1 and not bool((k_pos[1:] > k_pos[:-1]).all()):
        raise InvalidInput(("k_pos",), "stick-breaking needs the keys in increasing position order")
    dtype = compute_dtype(ctx.dtype)
    q, k = inputs.q.to(dtype), inputs.k.to(dtype)
    logits = torch.matmul(q, k.transpose(-1, -2)) * ctx.default_scale  # (B, H, Nq, Nk): z_ij

    before = inputs.k_pos[None, :] < inputs.q_pos[:, None]  # (Nq, Nk): key j precedes query i
    if params.attend_current:
        before = inputs.k_pos[None, :] <= inputs.q_pos[:, None]  # (Nq, Nk)
    excluded = inputs.mask | ~before[None, None]  # (B or 1, 1, Nq, Nk)

    log_beta = F.logsigmoid(logits).masked_fill(excluded, float("-inf"))  # (B, H, Nq, Nk): log β_ij
    log_rest = F.logsigmoid(-logits).masked_fill(excluded, 0.0)  # (B, H, Nq, Nk): log(1 − β_ij) = −softplus(z)
    # Σ_{k >= j} log(1 − β_ik), accumulated from the query backwards: flip, cumsum, flip
    through = torch.flip(torch.cumsum(torch.flip(log_rest, dims=(-1,)), dim=-1), dims=(-1,))  # (B, H, Nq, Nk)
    # Σ_{k > j}: the same sums shifted one key left (exact, no total − prefix cancellation)
    after = F.pad(through[..., 1:], (0, 1))  # (B, H, Nq, Nk)
    weights = torch.exp(log_beta + after)  # (B, H, Nq, Nk), 0 where excluded
    if through.shape[-1] > 0:
        leftover = torch.exp(through[..., 0])  # (B, H, Nq): Π over the row's keys of (1 − β)
    else:
        leftover = torch.ones(through.shape[:-1], dtype=dtype, device=through.device)  # (B, H, Nq)
    return AttentionWeights(
        weights=weights.to(ctx.dtype),
        leftover=leftover.to(ctx.dtype),
        leftover_to_current=params.leftover == "current",
    )
