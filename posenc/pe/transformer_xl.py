"""Transformer-XL relative attention: content and a projected sinusoid of i − j, with global biases u and v
(Dai, Yang, Yang, Carbonell, Le, Salakhutdinov, ACL 2019, "Transformer-XL: Attentive Language Models beyond a
Fixed-Length Context", https://arxiv.org/abs/1901.02860).

Methods: ``transformer_xl`` (kind ``score_mod``, causal only). The formula, the sinusoid layout, the
rel_shift and the init follow ``kimiyoung/transformer-xl:pytorch/mem_transformer.py``
(``PositionalEmbedding``, ``RelPartialLearnableMultiHeadAttn``, ``RelMultiHeadAttn._rel_shift``) and
``pytorch/train.py`` (``init_std`` = 0.02).
"""

from __future__ import annotations

import torch
from pydantic import Field

from posenc.pe.ops import check_shift_positions, compute_dtype, learned_tensors, rel_shift, sinusoid_halves
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import Extent, LayerInputs, ParamCost, ScoreContext, ScoreTerms
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import INT64_MAX, TensorIn

TRANSFORMER_XL_PAPER = (
    "Dai, Yang, Yang, Carbonell, Le, Salakhutdinov. Transformer-XL: Attentive Language Models beyond a "
    "Fixed-Length Context (ACL 2019). https://arxiv.org/abs/1901.02860"
)
INIT_STD = 0.02  # pytorch/train.py --init_std: N(0, 0.02) for r_w_bias, r_r_bias and every Linear weight


class TransformerXLParams(MethodParams):
    u: TensorIn | None = Field(
        default=None, description="global content bias (the reference's r_w_bias), (H, d_head); seeded if absent"
    )
    v: TensorIn | None = Field(
        default=None, description="global position bias (the reference's r_r_bias), (H, d_head); seeded if absent"
    )
    w_r: TensorIn | None = Field(
        default=None,
        description="W_R = r_net: Linear(D, H·d_head, bias=False).weight, (H·d_head, D) with D = model_dim",
    )
    clamp_len: int | None = Field(
        default=None,
        ge=1,
        le=INT64_MAX,
        description="distances above clamp_len use R_clamp_len; None = no clamp (the reference's clamp_len <= 0)",
    )
    base: float = Field(default=10000.0, gt=0, description="sinusoid base: ω_k = base^(−2k/D)")
    seed: Seed = Field(default=0, description="seed of the N(0, 0.02) initialisation of the tensors not supplied")


def _expected_shapes(ctx: ScoreContext) -> dict[str, tuple[int, ...]]:
    return {
        "u": (ctx.num_heads, ctx.head_dim),
        "v": (ctx.num_heads, ctx.head_dim),
        "w_r": (ctx.num_heads * ctx.head_dim, ctx.model_dim),
    }


def transformer_xl_learned_init(params: TransformerXLParams, ctx: ScoreContext) -> dict[str, torch.Tensor]:
    """u, v and W_R drawn from N(0, 0.02) (the reference's init_std) in float32 on the CPU, in that order, from
    torch.Generator().manual_seed(seed): the reference's distribution, not its numbers under torch.manual_seed."""
    generator = torch.Generator().manual_seed(params.seed)
    return {
        name: torch.randn(shape, generator=generator, dtype=torch.float32) * INIT_STD
        for name, shape in _expected_shapes(ctx).items()
    }


def _weights(params: TransformerXLParams, ctx: ScoreContext, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """u, v, W_R in ``dtype`` on the context's device: supplied (shape-checked) or seeded.

    A partial set is completed from the seeded draw, which always draws all three in order, so a seeded
    tensor does not depend on which of the others were supplied.
    """
    return learned_tensors(
        params, _expected_shapes(ctx), lambda: transformer_xl_learned_init(params, ctx), device=ctx.device, dtype=dtype
    )


def sinusoid_concat(distances: torch.Tensor, dim: int, base: float, dtype: torch.dtype) -> torch.Tensor:
    """R_s = [sin(s·ω_0), …, sin(s·ω_{D/2−1}), cos(s·ω_0), …, cos(s·ω_{D/2−1})], ω_k = base^(−2k/D): (S,) -> (S, D).

    Concatenated halves (``PositionalEmbedding``). An odd D gets a zero last column (the reference needs an
    even D). ``distances`` int64; s·ω, sin and cos in float64, rounded once to ``dtype``.
    """
    # exponents 2k/D, k < D//2, from an integer arange in float64 (the reference's arange(0, D, 2) / D)
    exponents = torch.arange(0, 2 * (dim // 2), 2, dtype=torch.int64).to(torch.float64) / dim  # (D//2,)
    inv_freq = 1.0 / (float(base) ** exponents)  # (D//2,)
    return sinusoid_halves(distances, inv_freq, dim, dtype)  # (S, D)


def transformer_xl_cost(params: TransformerXLParams, extent: Extent) -> ParamCost:
    """u, v (H, d) and W_R (H·d, D_model) seeded when a tensor is missing (a draw and a scaled copy each); R over the
    W <= Nq + Nk − 1 distances (about 4·W·D_model values in float64, sin and cos 4 passes each) projected by W_R
    (D_model·H·d multiply-adds per distance); the biased q and the (B, H, Nq, W) logits against W_R R, d multiply-adds
    each, with rel_shift's padded copy; and one (B, H, Nq, Nk) map beyond the route's two. D_model is
    ``extent.width``."""
    model_dim = extent.width
    projected = extent.heads * extent.dim
    seeded = params.u is None or params.v is None or params.w_r is None
    drawn = projected * (2 + model_dim) if seeded else 0
    width = extent.distances
    logits = extent.batch * extent.heads * extent.queries * width
    return ParamCost(
        drawn=drawn,
        elements=drawn
        + 4 * width * model_dim
        + width * projected
        + extent.batch * extent.heads * extent.queries * extent.dim
        + 2 * logits
        + extent.batch * extent.heads * extent.pairs,
        macs=width * model_dim * projected + logits * extent.dim,
        passes=4 * width * model_dim,
    )


@register(
    "transformer_xl",
    param_cost=transformer_xl_cost,
    kind=Kind.SCORE_MOD,
    params=TransformerXLParams,
    paper=TRANSFORMER_XL_PAPER,
    learned=True,
    learned_init=transformer_xl_learned_init,
    per_layer=True,
    causal_only=True,
    conventions={
        "distance": "R_{i−j}, i − j = q_pos[i] − k_pos[j] >= 0 under the causal mask (memory: query_offset = mlen)",
        "sinusoid": "R_s = concat(sin(s ω), cos(s ω)), ω_k = base^(−2k/D), D = model_dim (not interleaved); "
        "odd D: a zero last column (extension, the reference needs an even D)",
        "scale": "(AC + BD)/sqrt(d_head): the 1/sqrt(d) multiplies all four terms, as the reference",
        "bias_names": "u = r_w_bias (content bias, with k_j), v = r_r_bias (position bias, with W_R R_{i−j})",
        "per_layer": "u, v and W_R per layer; the reference (attn_type=0) shares u, v across layers",
        "init": "N(0, 0.02) (init_std) for u, v and W_R, drawn from the seed",
        "clamp_len": "None = no clamp; otherwise R_min(i−j, clamp_len) (the reference's clamp_len > 0)",
        "masked_entries": "the rel_shift leaves unrelated finite values above the causal diagonal; the applier "
        "masks them",
    },
)
def transformer_xl(params: TransformerXLParams, inputs: LayerInputs, ctx: ScoreContext) -> ScoreTerms:
    """Transformer-XL: A_ij = [(q_i + u)·k_j + (q_i + v)·W_R R_{i−j}] / √d_head, R_s = [sin(sω), cos(sω)].

    The four terms of the paper, (a) q·k, (b) q·W_R R, (c) u·k, (d) v·W_R R, grouped as AC + BD. BD is
    computed against R for W distances from q_pos[0] + Nq − 1 down (W = max(Nk, min(Nq + query_offset,
    Nq + Nk − 1)): klen − 1, …, 0 in the memory form query_offset = Nk − Nq), each R projected once
    by W_R (shared by the queries, O(W·D·H·d) and O(B·H·Nq·W·d)), then moved into place with the paper's
    rel_shift. Every causal entry (j <= i + query_offset) is exact; the entries above it are unrelated finite
    values that the applier masks (the method is causal only). u, v: (H, d_head); W_R: (H·d_head, D),
    D = model_dim. Computed in float32 (float64 for float64 contexts).
    """
    inputs.check(ctx, positions=False)
    check_shift_positions(inputs, ctx.query_offset)  # q_pos = arange(Nq) + offset, k_pos = arange(Nk)
    dtype = compute_dtype(ctx.dtype)
    weights = _weights(params, ctx, dtype)
    q, k = inputs.q.to(dtype), inputs.k.to(dtype)
    q_len, k_len = q.shape[2], k.shape[2]
    heads, head_dim = ctx.num_heads, ctx.head_dim

    content = torch.matmul(q + weights["u"][None, :, None, :], k.transpose(-1, -2))  # (B, H, Nq, Nk): AC
    # exact for j − i <= W − Nq: W = Nq + query_offset covers the causal entries, Nq + Nk − 1 every entry
    width = max(k_len, min(q_len + ctx.query_offset, q_len + k_len - 1))
    # column c of BD holds distance s = query_offset + Nq − 1 − c (largest first, as the reference's pos_seq)
    distances = ctx.query_offset + q_len - 1 - torch.arange(width, dtype=torch.int64, device=q.device)  # (W,)
    if params.clamp_len is not None:
        distances = distances.clamp(max=params.clamp_len)  # (W,)
    r = sinusoid_concat(distances, ctx.model_dim, params.base, dtype)  # (W, D)
    r_head = torch.matmul(r, weights["w_r"].T).reshape(width, heads, head_dim)  # (W, H, d): W_R R_s per head
    position = torch.einsum(
        "bhid,whd->bhiw", q + weights["v"][None, :, None, :], r_head
    )  # (B, H, Nq, W): BD before the shift
    position = rel_shift(position)[..., :k_len]  # (B, H, Nq, Nk): entry (i, j) holds distance i + offset − j
    logits = (content + position) * ctx.default_scale  # (B, H, Nq, Nk)
    return ScoreTerms(logits.to(ctx.dtype))
