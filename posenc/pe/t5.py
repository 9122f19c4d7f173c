"""T5 family: one learned scalar per head and relative-position bucket (Raffel et al., JMLR 2020).

Methods: ``t5``. Buckets are exact for short distances and logarithmic up to ``max_distance``; every
longer distance shares the last bucket. T5 itself does not scale scores by 1/sqrt(d); here the bias is
added to whatever scores the caller computes (after the scaling, in the service's attention).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field, model_validator

from posenc.errors import InvalidInput
from posenc.pe.ops import relative_positions
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import BiasContext, Extent, ParamCost
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn
from posenc.tensors import to_torch

T5_PAPER = (
    "Raffel et al. Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer "
    "(JMLR 2020). https://arxiv.org/abs/1910.10683"
)


def relative_position_bucket(
    relative: torch.Tensor, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket of each n = j − i (key minus query): int64 tensor of any shape -> int64, same shape.

    Bidirectional: half the buckets per direction, keys after the query (n > 0) offset by num_buckets/2.
    Causal: only r = max(−n, 0) counts, so every future key lands in bucket 0 (it is masked anyway).
    With nb buckets for the direction and max_exact = nb // 2, r < max_exact is its own bucket; beyond,
    max_exact + trunc(ln(r / max_exact) / ln(max_distance / max_exact) · (nb − max_exact)), at most nb − 1.
    The log runs in float32 on max(r, 1), as HF and mesh-tf compute it: r = 0 would give log(0) = −inf,
    whose integer cast is undefined on some backends even though the value is discarded.
    """
    buckets_per_direction = num_buckets
    if bidirectional:
        buckets_per_direction //= 2
        offset = (relative > 0).to(torch.int64) * buckets_per_direction
        distance = relative.abs()
    else:
        offset = torch.zeros_like(relative)
        distance = (-relative).clamp(min=0)
    max_exact = buckets_per_direction // 2
    ratio = distance.clamp(min=1).to(torch.float32) / max_exact
    log_scale = math.log(max_distance / max_exact)
    # .to(int64) truncates toward zero, as the reference's int cast does; the values used here are >= 0
    log_bucket = max_exact + (torch.log(ratio) / log_scale * (buckets_per_direction - max_exact)).to(torch.int64)
    log_bucket = log_bucket.clamp(max=buckets_per_direction - 1)
    return offset + torch.where(distance < max_exact, distance, log_bucket)


def initial_table(num_buckets: int, num_heads: int, seed: int, init_std: float) -> torch.Tensor:
    """E ~ N(0, init_std²) of shape (num_buckets, H), drawn in float32 on the CPU from the seed."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn((num_buckets, num_heads), generator=generator, dtype=torch.float32) * init_std


class T5Params(MethodParams):
    num_buckets: int = Field(default=32, ge=4, le=1024, description="buckets over both directions together")
    max_distance: int = Field(default=128, ge=1, description="distances from here on share the last bucket")
    bidirectional: bool | None = Field(
        default=None,
        description="True: encoder buckets (both directions); False: decoder buckets; None: not causal",
    )
    table: TensorIn | None = Field(
        default=None, description="the learned E, shape (num_buckets, num_heads); omit to draw it from seed"
    )
    seed: Seed = Field(default=0, description="seed of the initialisation when no table is supplied")
    init_std: float = Field(
        default=1.0,
        gt=0,
        description="std of the seeded N(0, std²) table; HF T5 uses factor * d_model**-0.5",
    )

    @model_validator(mode="after")
    def _log_buckets_have_room(self) -> T5Params:
        # With bidirectional=None the direction is known only with the request (causal or not): check the
        # bound of the direction given, or the looser bidirectional one here and the causal one in ``t5``.
        if self.max_distance <= (bound := _max_exact(self.num_buckets, self.bidirectional is not False)):
            raise ValueError(f"max_distance must be larger than {bound} (the exact buckets' range)")
        return self


def _max_exact(num_buckets: int, bidirectional: bool) -> int:
    """Distances below this have a bucket of their own: half the buckets of one direction."""
    return num_buckets // 4 if bidirectional else num_buckets // 2


def _embedding_table(params: T5Params, num_heads: int) -> torch.Tensor:
    """E (num_buckets, H): the supplied table, or the seeded one."""
    if params.table is None:
        return initial_table(params.num_buckets, num_heads, params.seed, params.init_std)
    table = to_torch(params.table, ("params", "table"))
    expected = (params.num_buckets, num_heads)
    if tuple(table.shape) != expected:
        raise InvalidInput(
            ("params", "table", "shape"),
            f"expected (num_buckets, num_heads) = {list(expected)}, got {list(table.shape)}",
        )
    return table


def t5_learned_init(params: T5Params, ctx: BiasContext) -> dict[str, torch.Tensor]:
    """The paper-style initial values of the learned fields, from params.seed (see ``MethodSpec``)."""
    return {"table": initial_table(params.num_buckets, ctx.num_heads, params.seed, params.init_std)}


def t5_cost(params: T5Params, extent: Extent) -> ParamCost:
    """The seeded (num_buckets, H) table (nothing when supplied), and the buckets of the Nq·Nk pairs (a few
    float64 passes: the log bucketing) gathered to (Nq, Nk, H) before the route's (H, Nq, Nk)."""
    drawn = params.num_buckets * extent.heads if params.table is None else 0
    return ParamCost(
        drawn=drawn, elements=extent.pairs * (2 + extent.heads), passes=8 * extent.pairs, params=("num_buckets",)
    )


@register(
    "t5",
    kind=Kind.BIAS,
    params=T5Params,
    paper=T5_PAPER,
    learned=True,
    toeplitz=True,
    learned_init=t5_learned_init,
    param_cost=t5_cost,
    conventions={
        "relative_position": "n = j - i (key minus query), as in T5 and mesh-tf",
        "direction": "bidirectional=None follows the request: encoder buckets unless causal",
        "log_precision": "bucket log in float32 on max(r, 1); truncation toward zero; capped at nb - 1",
        "scale_placement": "added after the 1/sqrt(d) scaling (T5 itself has no 1/sqrt(d))",
        "init": "seeded table N(0, init_std^2), default std 1.0 (torch.nn.Embedding's default)",
    },
)
def t5(params: T5Params, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: BiasContext) -> torch.Tensor:
    """T5 relative attention bias: B[h, i, j] = E[bucket(j − i), h], E (num_buckets, H) learned.

    The bucket function is ``relative_position_bucket`` (exact below max_exact, logarithmic up to
    max_distance, constant beyond). The seeded E defaults to std 1.0, torch.nn.Embedding's default: HF's
    factor·d_model^−0.5 needs a model width that a bias request does not carry, so pass
    init_std = d_model**-0.5 for HF parity. The table is only gathered, never combined arithmetically.
    """
    bidirectional = (not ctx.causal) if params.bidirectional is None else params.bidirectional
    if params.max_distance <= (bound := _max_exact(params.num_buckets, bidirectional)):
        raise InvalidInput(
            ("params", "max_distance"),
            f"must be larger than {bound}, the range of the exact buckets in causal (one-direction) bucketing; "
            "bidirectional bucketing (causal=false or bidirectional=true) needs only more than "
            f"{_max_exact(params.num_buckets, True)}",
        )
    table = _embedding_table(params, ctx.num_heads).to(device=q_pos.device, dtype=ctx.dtype)  # (nb, H)
    key_minus_query = -relative_positions(q_pos, k_pos)  # (Nq, Nk) int64, n = j - i
    buckets = relative_position_bucket(key_minus_query, bidirectional, params.num_buckets, params.max_distance)
    per_pair = table[buckets]  # (Nq, Nk, H)
    return per_pair.permute(2, 0, 1).contiguous()  # (H, Nq, Nk)
