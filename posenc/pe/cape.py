"""CAPE (published first as DAPE): a per-position MLP over every head's score and base bias
(Zheng, Gao, Shi, Huang, Li, Xiong, Ren, Ng, Jiang, Li, Li, NeurIPS 2024, "DAPE: Data-Adaptive Positional
Encoding for Length Extrapolation", https://arxiv.org/abs/2405.14722).

Methods: ``cape`` (kind ``score_mod``). The formula follows ``chuanyang-Zheng/DAPE:DAPE.py`` (``AliBi_DAPE``:
``mlp2 = Linear(2H, width) → LeakyReLU → Linear(width, H)`` on concat(scores, bias), ``x + a + mlp2(...)``).
The base bias is any registered bias method (ALiBi, KERPLE and FIRE in the paper), looked up
in the registry; the convolutional "DAPE V2" variant is not implemented.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field, ValidationError

from posenc.errors import InvalidInput
from posenc.pe.kinds import bias_dense, causal_mask
from posenc.pe.ops import compute_dtype, learned_tensors
from posenc.pe.registry import MethodParams, MethodSpec, Seed, UnknownMethodError, get_method, register
from posenc.pe.types import BiasContext, Extent, LayerInputs, ParamCost, ScoreContext, ScoreTerms
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn

CAPE_PAPER = (
    "Zheng, Gao, Shi, Huang, Li, Xiong, Ren, Ng, Jiang, Li, Li. DAPE: Data-Adaptive Positional Encoding for "
    "Length Extrapolation (NeurIPS 2024). https://arxiv.org/abs/2405.14722"
)
NEGATIVE_SLOPE = 0.01  # torch.nn.LeakyReLU's default, which the reference uses


class CapeParams(MethodParams):
    base: str = Field(
        default="alibi", description="the base bias B: any registered bias method (alibi, kerple_log, fire, ...)"
    )
    base_params: dict[str, Any] = Field(
        default_factory=dict, description="params of the base method, validated by its own model"
    )
    mlp_width: int = Field(default=32, ge=1, le=4096, description="hidden width D_mlp of the MLP R^2H -> R^H")
    w1: TensorIn | None = Field(default=None, description="Linear(2H, width).weight, (mlp_width, 2H)")
    b1: TensorIn | None = Field(default=None, description="Linear(2H, width).bias, (mlp_width,)")
    w2: TensorIn | None = Field(default=None, description="Linear(width, H).weight, (H, mlp_width)")
    b2: TensorIn | None = Field(default=None, description="Linear(width, H).bias, (H,)")
    seed: Seed = Field(default=0, description="seed of the MLP initialisation for the tensors not supplied")


def _expected_shapes(params: CapeParams, num_heads: int) -> dict[str, tuple[int, ...]]:
    width = params.mlp_width
    return {"w1": (width, 2 * num_heads), "b1": (width,), "w2": (num_heads, width), "b2": (num_heads,)}


def cape_learned_init(params: CapeParams, ctx: ScoreContext) -> dict[str, torch.Tensor]:
    """torch.nn.Linear's default init for Linear(2H, width) and Linear(width, H), from a seeded generator.

    Weight and bias from U(−1/√fan_in, 1/√fan_in), drawn in float32 on the CPU from
    torch.Generator().manual_seed(seed) in the order w1, b1, w2, b2: nn.Linear's distribution, not its numbers
    under torch.manual_seed. The base method's own learned tensors are not included (see the conventions).
    """
    generator = torch.Generator().manual_seed(params.seed)
    fan_in = {"w1": 2 * ctx.num_heads, "b1": 2 * ctx.num_heads, "w2": params.mlp_width, "b2": params.mlp_width}
    weights = {}
    for name, shape in _expected_shapes(params, ctx.num_heads).items():
        bound = 1.0 / math.sqrt(fan_in[name])
        weights[name] = (torch.rand(shape, generator=generator, dtype=torch.float32) * 2.0 - 1.0) * bound
    return weights


def _weights(params: CapeParams, ctx: ScoreContext, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """w1, b1, w2, b2 in ``dtype`` on the context's device: supplied (shape-checked) or seeded.

    A partial set is completed from the seeded draw, which always draws all four in order, so a seeded tensor
    does not depend on which of the others were supplied.
    """
    expected = _expected_shapes(params, ctx.num_heads)
    return learned_tensors(params, expected, lambda: cape_learned_init(params, ctx), device=ctx.device, dtype=dtype)


def _base_method(params: CapeParams) -> tuple[MethodSpec, MethodParams]:
    """The base bias method and its validated params; errors name ("params", "base") or
    ("params", "base_params", ...)."""
    try:
        spec = get_method(params.base)
    except UnknownMethodError as exc:
        raise InvalidInput(("params", "base"), str(exc)) from None
    if spec.kind is not Kind.BIAS:
        raise InvalidInput(
            ("params", "base"), f"{spec.name!r} is a {spec.kind.value} method; the base must be a bias method"
        )
    try:
        base_params = spec.parse_params(params.base_params)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InvalidInput(("params", "base_params", *first["loc"]), f"{spec.name}: {first['msg']}{more}") from None
    return spec, base_params


def cape_base_bias(params: CapeParams, inputs: LayerInputs, ctx: ScoreContext, dtype: torch.dtype) -> torch.Tensor:
    """B (H, Nq, Nk) in ``dtype``: the base method at the layer's positions, finite everywhere.

    Built with the layer's direction (``ctx.causal``: T5 picks its causal buckets, ALiBi its one-sided
    distance); in a causal layer the future entries, which ``bias_dense`` sets to −inf, are 0 (the
    reference's ``tril``) so that the MLP sees finite features; the applier masks them afterwards.
    """
    spec, base_params = _base_method(params)
    bias_ctx = BiasContext(
        num_heads=ctx.num_heads,
        query_length=inputs.q_pos.shape[0],
        key_length=inputs.k_pos.shape[0],
        causal=ctx.causal,
        dtype=dtype,
        query_offset=ctx.query_offset,
        device=ctx.device,
    )
    try:
        bias = bias_dense(spec, base_params, bias_ctx, inputs.q_pos, inputs.k_pos)  # (H, Nq, Nk)
    except InvalidInput as exc:
        raise exc.relocated(("params",), ("params", "base_params")) from None
    if ctx.causal:
        bias = bias.masked_fill(causal_mask(inputs.q_pos, inputs.k_pos), 0.0)  # (H, Nq, Nk)
    return bias


def cape_workspace(params: CapeParams, ctx: ScoreContext, batch: int) -> int:
    """Elements beyond the attention maps: the (B, Nq, Nk, 2H) MLP input and its (B, Nq, Nk, width) hidden layer
    with its activation."""
    return batch * ctx.query_length * ctx.key_length * (2 * ctx.num_heads + 2 * params.mlp_width)


def cape_cost(params: CapeParams, extent: Extent) -> ParamCost:
    """Beyond ``cape_workspace``: the seeded MLP (width·(3H + 1) + H values), its width·3H multiply-adds per (b, i, j)
    with a pass over the hidden layer (its bias), the base bias (H, Nq, Nk) with its causal copy, the features'
    contiguous copy (2H per pair) and one more map, and the base method's own cost at the extent."""
    spec, base_params = _base_method(params)
    width, heads = params.mlp_width, extent.heads
    seeded = any(getattr(params, name) is None for name in ("w1", "b1", "w2", "b2"))
    points = extent.batch * extent.pairs  # (b, i, j)
    own = ParamCost(
        drawn=width * (3 * heads + 1) + heads if seeded else 0,
        elements=points * 3 * heads + 2 * heads * extent.pairs,
        macs=points * 3 * heads * width,
        passes=points * width,
        params=("mlp_width",),
    )
    base = spec.cost_of(base_params, Extent(extent.queries, extent.keys, heads, 1))
    return own.plus(
        ParamCost(base.drawn, base.elements, base.macs, ("base_params",) if base.params else (), base.passes)
    )


@register(
    "cape",
    workspace=lambda params, ctx, batch: cape_workspace(params, ctx, batch),
    param_cost=cape_cost,
    kind=Kind.SCORE_MOD,
    params=CapeParams,
    paper=CAPE_PAPER,
    learned=True,
    learned_init=cape_learned_init,
    per_layer=True,
    conventions={
        "scores": "S = q·k/sqrt(d) of all H heads; the MLP input is concat(S[:, i, j], B[:, i, j]) (2H features)",
        "mlp": "f = W2·LeakyReLU(W1 z + b1) + b2 (negative slope 0.01, nn.LeakyReLU's default), point-wise in (i, j)",
        "output": "A = S + B + f(S, B), unmasked; the applier masks A",
        "base": "any registered bias method with its own params (base_params); built with the layer's direction",
        "masked_base": "causal layers: the base's future entries enter the MLP as 0 (the reference's tril of the "
        "ALiBi matrix)",
        "base_learning": "only the MLP is learned here; the base's own tensors stay at their given or seeded values",
        "init": "MLP drawn like torch.nn.Linear's default, U(+-1/sqrt(fan_in)), from the seed",
    },
)
def cape(params: CapeParams, inputs: LayerInputs, ctx: ScoreContext) -> ScoreTerms:
    """CAPE: A[:, i, j] = S[:, i, j] + B[:, i, j] + W2·LeakyReLU(W1·[S[:, i, j]; B[:, i, j]] + b1) + b2.

    S = q·k/√d for all H heads, B the base bias (``cape_base_bias``), z_ij = concat(S, B) over heads (2H
    features); W1 (width, 2H), W2 (H, width). The MLP acts on each (i, j) alone, so no score leaks between
    positions. Computed in float32 (float64 for float64 contexts); the (B, Nq, Nk, width) hidden layer is
    materialised.
    """
    inputs.check(ctx, head_dim=False)
    dtype = compute_dtype(ctx.dtype)
    q, k = inputs.q.to(dtype), inputs.k.to(dtype)
    weights = _weights(params, ctx, dtype)
    scores = torch.matmul(q, k.transpose(-1, -2)) * ctx.default_scale  # (B, H, Nq, Nk): S
    bias = cape_base_bias(params, inputs, ctx, dtype).to(q.device)  # (H, Nq, Nk): B

    features = torch.cat((scores, bias[None].expand(scores.shape[0], -1, -1, -1)), dim=1).permute(
        0, 2, 3, 1
    )  # (B, Nq, Nk, 2H): z_ij
    hidden = F.leaky_relu(F.linear(features, weights["w1"], weights["b1"]), NEGATIVE_SLOPE)  # (B, Nq, Nk, width)
    adaptive = F.linear(hidden, weights["w2"], weights["b2"]).permute(0, 3, 1, 2)  # (B, H, Nq, Nk): f(z)
    logits = scores + bias[None] + adaptive  # (B, H, Nq, Nk)
    return ScoreTerms(logits.to(ctx.dtype))
