"""Shaw relative position representations: learned key and value tables of the clipped distance j − i
(Shaw, Uszkoreit, Vaswani, NAACL 2018, "Self-Attention with Relative Position Representations",
https://arxiv.org/abs/1803.02155).

Methods: ``shaw`` (kind ``score_mod``, bidirectional or causal). The index, the two tables shared by the heads
and the two-term efficient form follow ``tensorflow/tensor2tensor:tensor2tensor/layers/common_attention.py``
(``_generate_relative_positions_matrix``, ``_generate_relative_positions_embeddings``,
``_relative_attention_inner``, ``dot_product_attention_relative``). The value table goes back
to the applier as ``ScoreTerms.value_table``: out_i = Σ_j α_ij (v_j + a^V_ij).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from posenc.pe.ops import compute_dtype, learned_tensors, relative_positions
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import Extent, LayerInputs, ParamCost, ScoreContext, ScoreTerms
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn

SHAW_PAPER = (
    "Shaw, Uszkoreit, Vaswani. Self-Attention with Relative Position Representations (NAACL 2018). "
    "https://arxiv.org/abs/1803.02155"
)
SHAW_FIELDS = ("key_table", "value_table")
MAX_CLIP = 1 << 16  # the tables hold 2k + 1 rows; bounds what a request can make the service allocate


class ShawParams(MethodParams):
    clip: int = Field(
        default=16,
        ge=1,
        le=MAX_CLIP,
        description="clipping distance k: distances beyond ±k share the edge rows (the paper's experiments use "
        "16; tensor2tensor's transformer_relative hparams use max_relative_position = 20)",
    )
    key_table: TensorIn | None = Field(
        default=None, description="a^K rows w^K_{-k..k}, (2·clip + 1, head_dim), shared by the heads; seeded if absent"
    )
    value_table: TensorIn | None = Field(
        default=None, description="a^V rows w^V_{-k..k}, (2·clip + 1, head_dim), shared by the heads; seeded if absent"
    )
    seed: Seed = Field(default=0, description="seed of the initialisation of the tables not supplied")


def shaw_learned_init(params: ShawParams, ctx: ScoreContext) -> dict[str, torch.Tensor]:
    """key_table then value_table, each (2k + 1, d), drawn from U(±√(6 / (2k + 1 + d))) in float32 on the CPU from
    torch.Generator().manual_seed(seed).

    That is tensor2tensor's transformer_base initializer ("uniform_unit_scaling", gain 1 =
    variance_scaling(fan_avg, uniform)) on a (2k + 1, d) variable: its distribution, not its numbers.
    """
    generator = torch.Generator().manual_seed(params.seed)
    rows = 2 * params.clip + 1
    bound = math.sqrt(6.0 / (rows + ctx.head_dim))
    return {
        name: (torch.rand((rows, ctx.head_dim), generator=generator, dtype=torch.float32) * 2.0 - 1.0) * bound
        for name in SHAW_FIELDS
    }


def _tables(params: ShawParams, ctx: ScoreContext, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """key_table, value_table in ``dtype`` on the context's device: supplied (shape-checked) or seeded.

    A missing table comes from the full seeded draw (both tables, in order), so it does not depend on whether
    the other one was supplied.
    """
    expected = (2 * params.clip + 1, ctx.head_dim)
    return learned_tensors(
        params,
        dict.fromkeys(SHAW_FIELDS, expected),
        lambda: shaw_learned_init(params, ctx),
        device=ctx.device,
        dtype=dtype,
        labels=dict.fromkeys(SHAW_FIELDS, "[2·clip + 1, head_dim]"),
    )


def shaw_relative_index(q_pos: torch.Tensor, k_pos: torch.Tensor, clip: int) -> torch.Tensor:
    """rel(i, j) = clip(j − i, −k, k) + k ∈ [0, 2k] (key minus query, t2t's final_mat): (Nq,), (Nk,) -> (Nq, Nk)."""
    return (-relative_positions(q_pos, k_pos)).clamp(-clip, clip) + clip  # (Nq, Nk) int64


def shaw_workspace(ctx: ScoreContext) -> int:
    """Elements beyond the attention maps: the value table gathered to (Nq, Nk, d)."""
    return ctx.query_length * ctx.key_length * ctx.head_dim


def shaw_cost(params: ShawParams, extent: Extent) -> ParamCost:
    """Beyond ``shaw_workspace``: the two seeded (2k + 1, d) tables (a draw and two passes each), the q·a^K products
    against every row ((B, H, Nq, 2k + 1), d multiply-adds each), the (Nq, Nk) int64 index, one
    (B, H, Nq, Nk) map beyond the route's two, and the applier's Σ_j α_ij a^V_ij (d multiply-adds per (b, h, i, j),
    its weights copied once)."""
    rows = 2 * params.clip + 1
    seeded = params.key_table is None or params.value_table is None
    drawn = 2 * rows * extent.dim if seeded else 0
    maps = extent.batch * extent.heads * extent.pairs
    per_row = extent.batch * extent.heads * extent.queries * rows
    return ParamCost(
        drawn=drawn,
        elements=per_row + 3 * extent.pairs + 2 * maps,
        macs=(per_row + maps) * extent.dim,
        passes=2 * drawn,
        params=("clip",),
    )


@register(
    "shaw",
    workspace=lambda params, ctx, batch: shaw_workspace(ctx),
    param_cost=shaw_cost,
    kind=Kind.SCORE_MOD,
    params=ShawParams,
    paper=SHAW_PAPER,
    learned=True,
    learned_init=shaw_learned_init,
    per_layer=True,
    value_term=True,
    conventions={
        "distance": "j − i (key minus query, as the paper and tensor2tensor), clipped to [−k, k]; row index "
        "clip(j − i, −k, k) + k",
        "clip": "default k = 16 (the paper's experiments; not re-confirmed from the paper text); tensor2tensor's "
        "transformer_relative uses max_relative_position = 20",
        "tables": "a^K and a^V, (2k + 1, head_dim) each, shared by the heads, one pair per layer (t2t)",
        "scale": "e_ij = q_i·(k_j + a^K_ij)/sqrt(head_dim): the table term inside the 1/sqrt(d)",
        "value_term": "ScoreTerms.value_table = a^V gathered to (Nq, Nk, head_dim): out_i = Σ_j α_ij (v_j + a^V_ij); "
        "the values' width must equal head_dim",
        "init": "U(±sqrt(6/(2k + 1 + head_dim))) for both tables (t2t transformer_base 'uniform_unit_scaling' = "
        "variance_scaling fan_avg uniform, gain 1), drawn from the seed",
    },
)
def shaw(params: ShawParams, inputs: LayerInputs, ctx: ScoreContext) -> ScoreTerms:
    """Shaw RPR: e_ij = q_i·(k_j + a^K_ij)/√d, out_i = Σ_j α_ij (v_j + a^V_ij), a_ij = w[clip(j − i, −k, k) + k].

    The key term is computed as t2t's ``_relative_attention_inner`` splits it, q·kᵀ + q·a^K, with q·a^K formed
    against the 2k + 1 table rows once ((B, H, Nq, 2k + 1)) and gathered to (B, H, Nq, Nk) instead of
    gathering a (Nq, Nk, d) key table. The value table is returned gathered, (Nq, Nk, d), for the applier's
    Σ_j α_ij a^V_ij. Positions come from q_pos and k_pos as given (any offset). Computed in float32 (float64
    for float64 contexts).
    """
    inputs.check(ctx)
    dtype = compute_dtype(ctx.dtype)
    tables = _tables(params, ctx, dtype)
    q, k = inputs.q.to(dtype), inputs.k.to(dtype)
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[2]
    index = shaw_relative_index(inputs.q_pos, inputs.k_pos, params.clip).to(q.device)  # (Nq, Nk)

    content = torch.matmul(q, k.transpose(-1, -2))  # (B, H, Nq, Nk)
    per_row = torch.matmul(q, tables["key_table"].T)  # (B, H, Nq, 2k+1): q_i·w^K_r for every row r
    position = torch.gather(per_row, -1, index.expand(batch, heads, q_len, k_len))  # (B, H, Nq, Nk): q_i·a^K_ij
    logits = (content + position) * ctx.default_scale  # (B, H, Nq, Nk)
    value_table = tables["value_table"][index]  # (Nq, Nk, d): a^V_ij
    return ScoreTerms(logits.to(ctx.dtype), value_table=value_table.to(ctx.dtype))
