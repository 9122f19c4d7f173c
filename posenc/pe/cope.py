"""CoPE, contextual position encoding: positions counted by sigmoid gates over the keys
(Golovneva, Wang, Weston, Sukhbaatar, 2024, "Contextual Position Encoding: Learning to Count What's Important",
https://arxiv.org/abs/2405.18719).

Methods: ``cope`` (kind ``score_mod``, causal only). The formula follows the authors' code
``facebookresearch/RAM:projects/cope/src/cope/context_position.py:ContextPosSelfAttn`` (gates from the attention
logits, flip-cumsum-flip, clamp, floor/ceil interpolation of q·e[p], the --cope-nodiv flag) and the copy in
``chuanyang-Zheng/DAPE:megatron/model/positional_embeddings.py:CoPE`` (npos_max = 64).
"""

from __future__ import annotations

import torch
from pydantic import Field

from posenc.pe.ops import compute_dtype, learned_tensors
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import Extent, LayerInputs, ParamCost, ScoreContext, ScoreTerms
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn

COPE_PAPER = (
    "Golovneva, Wang, Weston, Sukhbaatar. Contextual Position Encoding: Learning to Count What's Important "
    "(2024). https://arxiv.org/abs/2405.18719"
)


class CopeParams(MethodParams):
    npos: int = Field(
        default=64,
        ge=1,
        le=1 << 20,
        description="number of integer positions e[0..npos−1]; counts saturate at npos − 1. 64 as the DAPE "
        "comparison (npos_max); the paper's code defaults to block_size + 1",
    )
    table: TensorIn | None = Field(
        default=None,
        description="the position embeddings E, (head_dim, npos), shared by the heads; the initial table if absent",
    )
    init_std: float = Field(
        default=0.0,
        ge=0,
        description="std of a seeded N(0, std²) initial table when none is supplied; 0 = the paper's zeros",
    )
    seed: Seed = Field(default=0, description="seed of the initial table when init_std > 0 (zeros need none)")
    divide_position_logit: bool = Field(
        default=True,
        description="(q·k + pos)/sqrt(d) as the reference; False = q·k/sqrt(d) + pos (its --cope-nodiv)",
    )


def cope_learned_init(params: CopeParams, ctx: ScoreContext) -> dict[str, torch.Tensor]:
    """E (head_dim, npos) float32: zeros, the reference's init; with init_std > 0, N(0, init_std²) drawn on the
    CPU from torch.Generator().manual_seed(seed) [extension: breaks the symmetry of a zero table]."""
    shape = (ctx.head_dim, params.npos)
    if params.init_std == 0:
        return {"table": torch.zeros(shape, dtype=torch.float32)}
    generator = torch.Generator().manual_seed(params.seed)
    return {"table": torch.randn(shape, generator=generator, dtype=torch.float32) * params.init_std}


def cope_positions(gates: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """p_ij = Σ_{t>=j} g_it over the unmasked keys (reverse cumulative sum along the last axis): (..., Nq, Nk).

    Masked gates (``mask`` True, broadcastable to ``gates``) are zeroed before the sum, so a masked key neither
    counts nor shifts the count of earlier keys; under a causal mask the sum runs from j to i. Not clamped.
    """
    if mask is not None:
        gates = gates.masked_fill(mask, 0.0)  # (..., Nq, Nk)
    return torch.flip(torch.cumsum(torch.flip(gates, dims=(-1,)), dim=-1), dims=(-1,))  # (..., Nq, Nk)


def cope_cost(params: CopeParams, extent: Extent) -> ParamCost:
    """The initial (d, npos) table (drawn with init_std > 0, zeros otherwise; nothing when supplied), the
    (B, H, Nq, npos) products q·E with their d·npos multiply-adds per query, and the gates, counts, interpolation
    and position logits: about 16 (B, H, Nq, Nk) maps written, 8 of them live at once, beyond the route's two."""
    table = extent.dim * params.npos if params.table is None else 0
    drawn = table if params.init_std > 0 else 0
    maps = extent.batch * extent.heads * extent.pairs
    per_position = extent.batch * extent.heads * extent.queries * params.npos
    return ParamCost(
        drawn=drawn,
        elements=table - drawn + per_position + 8 * maps,
        macs=per_position * extent.dim,
        passes=drawn + 8 * maps,
        params=("npos",),
    )


@register(
    "cope",
    param_cost=cope_cost,
    kind=Kind.SCORE_MOD,
    params=CopeParams,
    paper=COPE_PAPER,
    learned=True,
    learned_init=cope_learned_init,
    per_layer=True,
    causal_only=True,
    conventions={
        "gates": "g_ij = σ(q_i·k_j/sqrt(d)) from the attention's own q and k (no --cope-sep-key/--cope-val-gates)",
        "masking": "masked keys (inputs.mask: future and padding) get gate 0 before the cumulative sum",
        "positions": "p_ij = Σ_{t=j}^{i} g_it, inclusive at both ends, clamped at npos − 1",
        "interpolation": "(1 − w)·z[floor p] + w·z[ceil p], w = p − floor p; the gradient flows through w",
        "scale": "(q·k + pos)/sqrt(d) as the reference; divide_position_logit=False is its --cope-nodiv",
        "npos": "default 64 (the DAPE comparison's npos_max); the paper's code defaults to block_size + 1",
        "table": "E (head_dim, npos) shared by the heads (the reference folds heads into the batch); one per "
        "layer (the reference's default, without --cope-shared)",
        "init": "zeros (the reference); init_std > 0 draws N(0, init_std^2) from the seed instead [extension]",
    },
)
def cope(params: CopeParams, inputs: LayerInputs, ctx: ScoreContext) -> ScoreTerms:
    """CoPE: A_ij = (q_i·k_j + (1 − w)·q_i·e[⌊p_ij⌋] + w·q_i·e[⌈p_ij⌉])/√d, p_ij = Σ_{t=j}^{i} σ(q_i·k_t/√d).

    w = p_ij − ⌊p_ij⌋; p is clamped at npos − 1 and computed by ``cope_positions`` with the masked gates
    zeroed (a masked key gets p from the keys after it, a finite logit the applier masks). z_i[p] = q_i·e[p]
    is one (Nq, d)·(d, npos) matmul per head, gathered at ⌊p⌋ and ⌈p⌉. With divide_position_logit=False the
    position logit is added after the 1/√d scaling instead. Computed in float32 (float64 for float64 contexts).
    """
    inputs.check(ctx, positions=False, mask=True)  # the positions are not read: the gates count
    dtype = compute_dtype(ctx.dtype)
    q, k = inputs.q.to(dtype), inputs.k.to(dtype)
    # E (d, npos): supplied or the initial table (zeros by default)
    table = learned_tensors(
        params,
        {"table": (ctx.head_dim, params.npos)},
        lambda: cope_learned_init(params, ctx),
        device=q.device,
        dtype=dtype,
    )["table"]

    content = torch.matmul(q, k.transpose(-1, -2))  # (B, H, Nq, Nk): q·k, unscaled
    gates = torch.sigmoid(content * ctx.default_scale)  # (B, H, Nq, Nk)
    positions = cope_positions(gates, inputs.mask).clamp(max=params.npos - 1)  # (B, H, Nq, Nk)
    floor = positions.detach().floor()  # (B, H, Nq, Nk): no gradient through ⌊·⌋ and ⌈·⌉
    ceil = positions.detach().ceil()  # (B, H, Nq, Nk)
    weight = positions - floor  # (B, H, Nq, Nk): differentiable, so the gates learn

    per_position = torch.matmul(q, table)  # (B, H, Nq, npos): z_i[p] = q_i·e[p]
    at_floor = per_position.gather(-1, floor.long())  # (B, H, Nq, Nk)
    at_ceil = per_position.gather(-1, ceil.long())  # (B, H, Nq, Nk)
    position_logit = at_ceil * weight + at_floor * (1.0 - weight)  # (B, H, Nq, Nk)

    if params.divide_position_logit:
        logits = (content + position_logit) * ctx.default_scale  # (B, H, Nq, Nk)
    else:
        logits = content * ctx.default_scale + position_logit  # (B, H, Nq, Nk)
    return ScoreTerms(logits.to(ctx.dtype))
