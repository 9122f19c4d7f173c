"""Huang et al. relative position embeddings: a learned table of the signed distance i − j that interacts with
both the query and the key (Huang, Liang, Xu, Xiang, Findings of EMNLP 2020, "Improve Transformer Models with
Better Relative Position Embeddings", https://arxiv.org/abs/2009.13658).

Methods: ``huang`` (kind ``score_mod``, bidirectional or causal). ``variant="m4"`` is the paper's method 4 as
Hugging Face BERT implements it (``position_embedding_type="relative_key_query"``, whose documentation cites
method 4): ``huggingface/transformers:src/transformers/models/bert/modeling_bert.py:BertSelfAttention.forward``
in transformers 4.57.6, the last release that has it. It is checked against that code through the golden file
``tests/data/huang_hf_golden.safetensors`` (``tests/data/generate_huang_golden.py``). ``variant="m1"`` is method 1,
the trilinear product, as secondary summaries of the paper give it: the paper text was not reachable, so
it is [unverified]. Methods 2 and 3 are not offered: their formulas could not be confirmed.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from posenc.errors import InvalidInput
from posenc.pe.ops import compute_dtype, learned_tensors, relative_positions
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import Extent, LayerInputs, ParamCost, ScoreContext, ScoreTerms
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn

HUANG_PAPER = (
    "Huang, Liang, Xu, Xiang. Improve Transformer Models with Better Relative Position Embeddings "
    "(Findings of EMNLP 2020). https://arxiv.org/abs/2009.13658"
)
MAX_POSITION = 1 << 16  # the table holds 2·max_position − 1 rows; bounds what a request can allocate
INIT_STD = 0.02  # BertPreTrainedModel._init_weights: nn.Embedding ~ N(0, initializer_range = 0.02)

HuangVariant = Literal["m1", "m4"]
M1_CHUNK_ELEMENTS = 1 << 22  # elements of m1's per-chunk (B, H, chunk, Nk, d) product


class HuangParams(MethodParams):
    variant: HuangVariant = Field(
        default="m4",
        description="'m4': e_ij = (q_i·k_j + q_i·a_ij + k_j·a_ij)/sqrt(d) (HF BERT relative_key_query); "
        "'m1': e_ij = Σ_c q_ic·k_jc·a_ij,c/sqrt(d), the trilinear product [unverified]",
    )
    max_position: int = Field(
        default=512,
        ge=1,
        le=MAX_POSITION,
        description="HF's max_position_embeddings: the table covers |i − j| <= max_position − 1, no clipping",
    )
    table: TensorIn | None = Field(
        default=None,
        description="a rows for i − j = −(max_position − 1) .. max_position − 1 (HF's distance_embedding.weight), "
        "(2·max_position − 1, head_dim), shared by the heads; seeded if absent",
    )
    seed: Seed = Field(default=0, description="seed of the N(0, 0.02) initialisation when no table is supplied")


def huang_learned_init(params: HuangParams, ctx: ScoreContext) -> dict[str, torch.Tensor]:
    """The table (2·max_position − 1, d) drawn from N(0, 0.02) in float32 on the CPU from
    torch.Generator().manual_seed(seed): BERT's init of an nn.Embedding (initializer_range 0.02), its
    distribution, not its numbers."""
    generator = torch.Generator().manual_seed(params.seed)
    rows = 2 * params.max_position - 1
    return {"table": torch.randn((rows, ctx.head_dim), generator=generator, dtype=torch.float32) * INIT_STD}


def _table(params: HuangParams, ctx: ScoreContext, dtype: torch.dtype) -> torch.Tensor:
    """The table in ``dtype`` on the context's device: supplied (shape-checked) or seeded."""
    return learned_tensors(
        params,
        {"table": (2 * params.max_position - 1, ctx.head_dim)},
        lambda: huang_learned_init(params, ctx),
        device=ctx.device,
        dtype=dtype,
        labels={"table": "[2·max_position − 1, head_dim]"},
    )["table"]


def huang_distance_index(q_pos: torch.Tensor, k_pos: torch.Tensor, max_position: int) -> torch.Tensor:
    """HF's row index (i − j) + max_position − 1: (Nq,), (Nk,) -> (Nq, Nk) int64.

    Raises InvalidInput on ("params", "max_position") when some |i − j| >= max_position (the table has no row
    for it; HF's nn.Embedding would fail with an index error).
    """
    distance = relative_positions(q_pos, k_pos)  # (Nq, Nk), i − j
    if distance.numel():
        furthest = int(distance.abs().max())
        if furthest >= max_position:
            raise InvalidInput(
                ("params", "max_position"),
                f"the table covers |i − j| <= max_position − 1 = {max_position - 1}, but these positions reach "
                f"|i − j| = {furthest}; raise max_position to at least {furthest + 1}",
            )
    return distance + (max_position - 1)  # (Nq, Nk)


def huang_cost(params: HuangParams, extent: Extent) -> ParamCost:
    """The seeded (2·max_position − 1, d) table (N(0, 0.02): a draw and a scaled copy each), the (Nq, Nk) int64 row
    index with its checks, and per variant: m4 the q·A and k·A products against the table's W rows (explicit
    positions may reach all of them: (B, H, Nq + Nk, W), d multiply-adds each) and three (B, H, Nq, Nk) maps beyond
    the route's two (and two passes); m1 the trilinear product's B·H·Nq·Nk·d terms (multiply-adds and two passes
    each), formed in chunks of about M1_CHUNK_ELEMENTS with the gathered rows alongside."""
    drawn = (2 * params.max_position - 1) * extent.dim if params.table is None else 0
    maps = extent.batch * extent.heads * extent.pairs
    index = 4 * extent.pairs
    if params.variant == "m1":
        terms = maps * extent.dim
        chunk = min(terms, max(M1_CHUNK_ELEMENTS, extent.batch * extent.heads * extent.keys * extent.dim))
        return ParamCost(
            drawn=drawn,
            elements=drawn + index + 2 * chunk + 2 * maps,
            macs=terms,
            passes=2 * terms,
            params=("max_position",),
        )
    rows = 2 * params.max_position - 1  # explicit positions may reach every row, whatever Nq and Nk
    products = extent.batch * extent.heads * (extent.queries + extent.keys) * rows
    return ParamCost(
        drawn=drawn,
        elements=drawn + index + products + 3 * maps,
        macs=products * extent.dim,
        passes=2 * maps,
        params=("max_position",),
    )


@register(
    "huang",
    param_cost=huang_cost,
    kind=Kind.SCORE_MOD,
    params=HuangParams,
    paper=HUANG_PAPER,
    learned=True,
    learned_init=huang_learned_init,
    per_layer=True,
    conventions={
        "variants": "m4: checked against HF BERT 4.57.6 BertSelfAttention(position_embedding_type="
        "'relative_key_query') (the HF docs cite it as the paper's method 4), attention probabilities equal to "
        "1e-12 in float64 (tests/data/huang_hf_golden.safetensors); m1: the trilinear product as secondary "
        "summaries give it, [unverified] (the paper text was not reachable); m2 and m3: not offered, their "
        "formulas could not be confirmed",
        "distance": "i − j (query minus key, HF's position_ids_l − position_ids_r) from q_pos and k_pos",
        "table": "(2·max_position − 1, head_dim), row (i − j) + max_position − 1, shared by the heads, one per "
        "layer; no clipping: |i − j| >= max_position is an InvalidInput on params.max_position",
        "scale": "the relative terms are added before the division by sqrt(head_dim) (HF)",
        "init": "N(0, 0.02) (BERT's initializer_range for nn.Embedding), drawn from the seed",
    },
)
def huang(params: HuangParams, inputs: LayerInputs, ctx: ScoreContext) -> ScoreTerms:
    """Huang et al.: m4 e_ij = (q_i·k_j + q_i·a_ij + k_j·a_ij)/√d, m1 e_ij = Σ_c q_ic k_jc a_ij,c/√d, a_ij = A[i − j].

    A = the (2·max_position − 1, d) table, row (i − j) + max_position − 1. m4 forms q·A and k·A against only
    the rows the positions use ((B, H, Nq, W) and (B, H, Nk, W), W <= Nq + Nk − 1 for contiguous positions)
    and gathers them to (B, H, Nq, Nk), as HF's two einsums over the gathered (Nq, Nk, d) table compute them.
    m1 gathers the table rows of a chunk of queries and contracts them with q and k: O(B·H·Nq·Nk·d) time, in
    chunks of about ``M1_CHUNK_ELEMENTS`` elements. Computed in float32 (float64 for float64 contexts).
    """
    inputs.check(ctx)
    dtype = compute_dtype(ctx.dtype)
    table = _table(params, ctx, dtype)
    q, k = inputs.q.to(dtype), inputs.k.to(dtype)
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[2]
    index = huang_distance_index(inputs.q_pos, inputs.k_pos, params.max_position)  # (Nq, Nk), positions' device
    if index.numel() == 0:
        return ScoreTerms(torch.zeros(batch, heads, q_len, k_len, dtype=ctx.dtype, device=q.device))

    # only the rows the positions reach: [lo, hi] of the table, read where the positions are
    lo, hi = int(index.min()), int(index.max())
    index = index.to(q.device)  # (Nq, Nk)
    rows = table[lo : hi + 1]  # (W, d)
    local = index - lo  # (Nq, Nk) into rows

    if params.variant == "m1":
        # query rows in chunks: the trilinear product's (B, H, chunk, Nk, d) intermediate stays near
        # M1_CHUNK_ELEMENTS instead of growing to B·H·Nq·Nk·d (the gateway budgets (B, H, Nq, Nk) maps only)
        chunk = max(1, M1_CHUNK_ELEMENTS // max(1, batch * heads * k_len * q.shape[-1]))
        parts = [
            torch.einsum("bhid,bhjd,ijd->bhij", q[:, :, start : start + chunk], k, rows[local[start : start + chunk]])
            for start in range(0, q_len, chunk)
        ]  # each (B, H, chunk, Nk)
        logits = torch.cat(parts, dim=2)  # (B, H, Nq, Nk)
    else:
        content = torch.matmul(q, k.transpose(-1, -2))  # (B, H, Nq, Nk)
        query_rows = torch.matmul(q, rows.T)  # (B, H, Nq, W): q_i·A_r
        key_rows = torch.matmul(k, rows.T)  # (B, H, Nk, W): k_j·A_r
        query_term = torch.gather(query_rows, -1, local.expand(batch, heads, q_len, k_len))  # (B, H, Nq, Nk)
        key_term = torch.gather(key_rows, -1, local.T.expand(batch, heads, k_len, q_len))  # (B, H, Nk, Nq)
        logits = content + query_term + key_term.transpose(-1, -2)  # (B, H, Nq, Nk)
    return ScoreTerms((logits * ctx.default_scale).to(ctx.dtype))
