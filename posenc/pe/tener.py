"""TENER: un-scaled relative attention with a direction-aware sinusoid of the signed distance t − j
(Yan, Deng, Li, Qiu, 2019, "TENER: Adapting Transformer Encoder for Named Entity Recognition",
https://arxiv.org/abs/1911.04474).

Methods: ``tener`` (kind ``score_mod``, bidirectional or causal). ``variant="paper"`` is the paper's
equation; ``variant="code"`` reproduces ``fastnlp/TENER:modules/relative_transformer.py``
(``RelativeSinusoidalPositionalEmbedding``, ``RelativeMultiHeadAttn``, commit d2614d5), checked by running it:
the t2t frequencies, R_{j−t} in the query and v terms (``_shift``), and an extra key term
K_j·R_{t−j} (``_transpose_shift``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field

from posenc.errors import InvalidInput
from posenc.pe.ops import check_shift_positions, compute_dtype, learned_tensors, rel_shift, sinusoid_halves
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import Extent, LayerInputs, ParamCost, ScoreContext, ScoreTerms
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn

TENER_PAPER = (
    "Yan, Deng, Li, Qiu. TENER: Adapting Transformer Encoder for Named Entity Recognition (2019). "
    "https://arxiv.org/abs/1911.04474"
)
TENER_FIELDS = ("u", "v")

TenerVariant = Literal["paper", "code"]


class TenerParams(MethodParams):
    variant: TenerVariant = Field(
        default="paper",
        description="'paper': A = Q_t·K_j + Q_t·R_{t−j} + u·K_j + v·R_{t−j}, c_i = base^(−2i/d); 'code' "
        "(fastnlp/TENER): c_i = exp(−i·ln(base)/(d/2 − 1)), (Q_t + v)·R_{j−t}, plus K_j·R_{t−j}",
    )
    scaled: bool = Field(default=False, description="divide the logits by sqrt(d) (the code's scale=True)")
    u: TensorIn | None = Field(
        default=None, description="content bias with K_j (the code's r_r_bias), (H, d); seeded if absent"
    )
    v: TensorIn | None = Field(
        default=None, description="position bias with R (the code's r_w_bias), (H, d); seeded if absent"
    )
    base: float = Field(default=10000.0, gt=0, description="sinusoid base (10000 in paper and code)")
    seed: Seed = Field(default=0, description="seed of the xavier_normal initialisation of u and v")


def tener_learned_init(params: TenerParams, ctx: ScoreContext) -> dict[str, torch.Tensor]:
    """u, v drawn like nn.init.xavier_normal_ on an (H, d) tensor, N(0, 2/(H + d)), in float32 on the CPU, in
    that order, from torch.Generator().manual_seed(seed) (the code's distribution, not its numbers)."""
    generator = torch.Generator().manual_seed(params.seed)
    std = math.sqrt(2.0 / (ctx.num_heads + ctx.head_dim))
    shape = (ctx.num_heads, ctx.head_dim)
    return {name: torch.randn(shape, generator=generator, dtype=torch.float32) * std for name in TENER_FIELDS}


def _biases(params: TenerParams, ctx: ScoreContext, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """u, v in ``dtype`` on the context's device: supplied (shape-checked) or seeded (a missing one comes from
    the full seeded draw, so it does not depend on whether the other was supplied)."""
    expected = dict.fromkeys(TENER_FIELDS, (ctx.num_heads, ctx.head_dim))
    return learned_tensors(params, expected, lambda: tener_learned_init(params, ctx), device=ctx.device, dtype=dtype)


def tener_frequencies(dim: int, base: float, variant: TenerVariant) -> torch.Tensor:
    """c_i, i < d//2, float64: paper base^(−2i/d); code exp(−i·ln(base)/(d//2 − 1)) (the t2t denominator)."""
    half = dim // 2
    index = torch.arange(half, dtype=torch.int64).to(torch.float64)  # (d//2,)
    if variant == "paper":
        return 1.0 / (float(base) ** (2.0 * index / dim))  # (d//2,)
    if half < 2:
        raise InvalidInput(
            ("params", "variant"), f"the code's c_i divides by d/2 − 1: it needs head_dim >= 4, got {dim}"
        )
    return torch.exp(index * -(math.log(base) / (half - 1)))  # (d//2,)


def tener_sinusoid(distances: torch.Tensor, frequencies: torch.Tensor, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """R_s = [sin(s·c_0), …, sin(s·c_{d/2−1}), cos(s·c_0), …, cos(s·c_{d/2−1})] for signed s: (S,) -> (S, d).

    sin is odd, so R_s != R_{−s} (direction-aware). An odd d gets a zero last column, as the code. Built in
    float64 and rounded once to ``dtype``.
    """
    return sinusoid_halves(distances, frequencies, dim, dtype)  # (S, d)


def tener_cost(params: TenerParams, extent: Extent) -> ParamCost:
    """u and v (H, d) seeded when not supplied; per position table (one, two for 'code'): R over W = Nq + Nk − 1
    distances (about 4·W·d values in float64), the biased q or k (B, H, N, d) and the (B, H, N, W) logits against
    R, d multiply-adds each, with rel_shift's padded copy; and two (B, H, Nq, Nk) maps beyond the route's two."""
    batch_heads = extent.batch * extent.heads
    tables = 2 if params.variant == "code" else 1
    width = extent.distances
    per_table = (
        4 * width * extent.dim + batch_heads * extent.queries * extent.dim + 2 * batch_heads * extent.queries * width
    )
    seeded = params.u is None or params.v is None
    return ParamCost(
        drawn=2 * extent.heads * extent.dim if seeded else 0,
        elements=tables * per_table + 2 * batch_heads * extent.pairs,
        macs=tables * batch_heads * extent.queries * width * extent.dim,
    )


@register(
    "tener",
    param_cost=tener_cost,
    kind=Kind.SCORE_MOD,
    params=TenerParams,
    paper=TENER_PAPER,
    learned=True,
    learned_init=tener_learned_init,
    per_layer=True,
    conventions={
        "distance": "signed s = t − j = q_pos[t] − k_pos[j]; R_s != R_{−s}",
        "sinusoid": "R_s = [sin(s c_0..), cos(s c_0..)] (halves), width d = head_dim, shared by the heads; "
        "odd d: a zero last column (as the code)",
        "variant_paper": "c_i = base^(−2i/d); A = Q_t·K_j + Q_t·R_{t−j} + u·K_j + v·R_{t−j} (the paper's equation)",
        "variant_code": "fastnlp/TENER RelativeMultiHeadAttn, checked by running it: c_i = exp(−i ln(base)/(d/2 − 1)); "
        "A = (Q_t + u)·K_j + (Q_t + v)·R_{j−t} + K_j·R_{t−j}: _shift reads R at key − query, the extra key "
        "term (_transpose_shift) at query − key",
        "scale": "none by default (the paper's un-scaled attention, the code's scale=False); scaled=True divides "
        "all terms by sqrt(d)",
        "bias_names": "u = content bias with K_j (the code's r_r_bias), v = position bias with R (the code's r_w_bias)",
        "init": "xavier_normal on (H, d) for u and v, N(0, 2/(H + d)), drawn from the seed",
        "projection": "no W_R on R (unlike Transformer-XL); k is the layer's key as given (the code projects it)",
    },
)
def tener(params: TenerParams, inputs: LayerInputs, ctx: ScoreContext) -> ScoreTerms:
    """TENER: A_tj = Q_t·K_j + Q_t·R_{t−j} + u·K_j + v·R_{t−j}, no W_R, no 1/√d; R_s direction-aware sinusoid.

    ``variant="code"`` computes the code's (Q_t + u)·K_j + (Q_t + v)·R_{j−t} + K_j·R_{t−j} with the t2t
    frequencies. Position logits are formed against R over the Nq + Nk − 1 signed distances, once per query
    (and once per key for the code's key term), and moved into place with Transformer-XL's rel_shift: every
    entry is exact, nothing is masked here. u, v: (H, d), d = head_dim. ``scaled`` divides by √d.
    Computed in float32 (float64 for float64 contexts).
    """
    inputs.check(ctx, positions=False)
    check_shift_positions(inputs, ctx.query_offset)  # q_pos = arange(Nq) + offset, k_pos = arange(Nk)
    dtype = compute_dtype(ctx.dtype)
    q, k = inputs.q.to(dtype), inputs.k.to(dtype)
    q_len, k_len = q.shape[2], k.shape[2]
    frequencies = tener_frequencies(ctx.head_dim, params.base, params.variant)
    biases = _biases(params, ctx, dtype)

    logits = torch.matmul(q + biases["u"][None, :, None, :], k.transpose(-1, -2))  # (B, H, Nq, Nk): (Q + u)·K
    if q_len > 0 and k_len > 0:
        width = q_len + k_len - 1
        steps = torch.arange(width, dtype=torch.int64, device=q.device)  # (W,)
        # query table: column c <-> s = t − j = query_offset + Nq − 1 − c (largest first)
        s_query = ctx.query_offset + q_len - 1 - steps  # (W,)
        # the paper reads R_{t−j}; the code's _shift reads R_{j−t}
        r_query = tener_sinusoid(s_query if params.variant == "paper" else -s_query, frequencies, ctx.head_dim, dtype)
        table = torch.einsum("bhid,wd->bhiw", q + biases["v"][None, :, None, :], r_query)  # (B, H, Nq, W)
        logits = logits + rel_shift(table)[..., :k_len]  # (B, H, Nq, Nk): (Q_t + v)·R at t − j (or j − t)
        if params.variant == "code":
            # key table: column c <-> s = t − j = query_offset − (Nk − 1) + c (smallest first)
            s_key = ctx.query_offset - (k_len - 1) + steps  # (W,)
            r_key = tener_sinusoid(s_key, frequencies, ctx.head_dim, dtype)  # (W, d)
            key_table = torch.einsum("bhjd,wd->bhjw", k, r_key)  # (B, H, Nk, W)
            key_term = rel_shift(key_table)[..., :q_len].transpose(-1, -2)  # (B, H, Nq, Nk): K_j·R_{t−j}
            logits = logits + key_term
    if params.scaled:
        logits = logits * ctx.default_scale
    return ScoreTerms(logits.to(ctx.dtype))
