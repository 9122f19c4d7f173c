"""FIRE family: a learned MLP of the log-compressed, query-normalised distance
(Li et al., ICLR 2024, "Functional Interpolation for Relative Positions Improves Long Context Transformers").

Methods: ``fire``. There is no official code; the formula follows the paper-appendix code as copied in
``mcleish7/arithmetic`` and ``chuanyang-Zheng/DAPE``. The normaliser depends on the query
position, so the bias is Toeplitz only while i <= L and the dense form is the only one offered.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field, model_validator

from posenc.pe.ops import compute_dtype, learned_tensors, relative_positions
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import BiasContext, Extent, ParamCost
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import INT64_MAX, TensorIn

FIRE_PAPER = (
    "Li et al. Functional Interpolation for Relative Positions Improves Long Context Transformers "
    "(ICLR 2024). https://arxiv.org/abs/2310.04418"
)
MLP_FIELDS = ("mlp_w1", "mlp_b1", "mlp_w2", "mlp_b2")
# Distinct inputs per MLP call: bounds the (chunk, width) float64 hidden activations to a few MiB when
# i > L makes almost every (i, j) pair distinct.
MLP_CHUNK = 1 << 16


def fire_normalized_distance(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    *,
    c: float | torch.Tensor = 0.1,
    threshold: float | torch.Tensor = 512.0,
    eps: float = 1e-6,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """FIRE's MLP input x[i, j] = log(|c·(i − j)| + 1) / (log(|c·max(i, thr)| + 1) + eps): (Nq, Nk) in dtype.

    thr = |L_mult·L_init|. The absolute value makes the causal form (i − j >= 0 under the mask) and the
    copies' bidirectional form (|i − j| with the same normaliser, [unverified]: the paper defines none)
    one formula. For i > thr the inputs stay in [0, 1]: the "progressive interpolation" of the paper.
    """
    scale = torch.as_tensor(c, dtype=dtype, device=q_pos.device)
    delta = relative_positions(q_pos, k_pos).to(dtype)  # (Nq, Nk), i - j
    query = q_pos.to(dtype)  # (Nq,)
    normaliser = torch.maximum(query, torch.as_tensor(threshold, dtype=dtype, device=q_pos.device))  # (Nq,)
    numerator = torch.log1p((scale * delta).abs())  # (Nq, Nk)
    denominator = torch.log1p((scale * normaliser).abs()) + eps  # (Nq,)
    return numerator / denominator[:, None]  # (Nq, Nk)


def initial_mlp(width: int, num_heads: int, seed: int) -> dict[str, torch.Tensor]:
    """torch.nn.Linear's default init for Linear(1, width) and Linear(width, H), from a seeded generator.

    nn.Linear draws weight and bias from U(−1/√fan_in, 1/√fan_in) (kaiming_uniform with a = √5 reduces to
    that bound). Here they are drawn in float32 on the CPU from torch.Generator().manual_seed(seed) in the
    order w1, b1, w2, b2: the same distribution as nn.Linear, not the same numbers as nn.Linear under
    torch.manual_seed. Layouts follow nn.Linear: w1 (width, 1), b1 (width,), w2 (H, width), b2 (H,).
    """
    generator = torch.Generator().manual_seed(seed)

    def uniform(shape: tuple[int, ...], fan_in: int) -> torch.Tensor:
        bound = 1.0 / math.sqrt(fan_in)
        return (torch.rand(shape, generator=generator, dtype=torch.float32) * 2.0 - 1.0) * bound

    w1 = uniform((width, 1), fan_in=1)
    b1 = uniform((width,), fan_in=1)
    w2 = uniform((num_heads, width), fan_in=width)
    b2 = uniform((num_heads,), fan_in=width)
    return {"mlp_w1": w1, "mlp_b1": b1, "mlp_w2": w2, "mlp_b2": b2}


class FireParams(MethodParams):
    mlp_width: int = Field(default=32, ge=1, le=4096, description="hidden width of the MLP R -> R^H")
    c: float = Field(default=0.1, gt=0, description="log compression ψ(x) = log(c·x + 1); learnable, init 0.1")
    L_init: int = Field(default=512, ge=0, le=INT64_MAX, description="the training length L (non-trainable)")
    L_mult: float = Field(default=1.0, description="learnable multiplier of L_init; thr = |L_mult·L_init|")
    eps: float = Field(default=1e-6, gt=0, description="keeps the normaliser positive when c·max(i, thr) = 0")
    mlp_w1: TensorIn | None = Field(default=None, description="Linear(1, width).weight, (mlp_width, 1)")
    mlp_b1: TensorIn | None = Field(default=None, description="Linear(1, width).bias, (mlp_width,)")
    mlp_w2: TensorIn | None = Field(default=None, description="Linear(width, H).weight, (num_heads, mlp_width)")
    mlp_b2: TensorIn | None = Field(default=None, description="Linear(width, H).bias, (num_heads,)")
    seed: Seed = Field(default=0, description="seed of the MLP initialisation when no weights are supplied")

    @model_validator(mode="after")
    def _all_or_no_weights(self) -> FireParams:
        supplied = [name for name in MLP_FIELDS if getattr(self, name) is not None]
        if supplied and len(supplied) != len(MLP_FIELDS):
            raise ValueError(f"give all of {', '.join(MLP_FIELDS)} or none of them (got {', '.join(supplied)})")
        return self


def _mlp_weights(params: FireParams, ctx: BiasContext) -> dict[str, torch.Tensor]:
    """The four MLP tensors in float64: supplied (shape-checked) or seeded."""
    expected = {
        "mlp_w1": (params.mlp_width, 1),
        "mlp_b1": (params.mlp_width,),
        "mlp_w2": (ctx.num_heads, params.mlp_width),
        "mlp_b2": (ctx.num_heads,),
    }
    # all four or none (the params validator), so a seeded set never mixes with supplied tensors
    return learned_tensors(
        params,
        expected,
        lambda: initial_mlp(params.mlp_width, ctx.num_heads, params.seed),
        device=ctx.device,
        dtype=torch.float64,
    )


def _mlp(inputs: torch.Tensor, weights: dict[str, torch.Tensor]) -> torch.Tensor:
    """Linear(1, width) → ReLU → Linear(width, H) on scalar inputs: (M,) -> (M, H)."""
    hidden = torch.relu(inputs[:, None] * weights["mlp_w1"][:, 0][None, :] + weights["mlp_b1"])  # (M, width)
    return torch.addmm(weights["mlp_b2"], hidden, weights["mlp_w2"].T)  # (M, H): b2 + hidden·W2ᵀ


def fire_cost(params: FireParams, extent: Extent) -> ParamCost:
    """The MLP's work: its seeded weights (width·(H + 2) + H values), and the MLP on every distinct input, M of
    them: Nq + Nk − 1 while every query is within thr, else up to every (i, j) pair (the normaliser then differs
    per query). Per input: width hidden values (kept for MLP_CHUNK inputs at a time, float64) and width·H
    multiply-adds; the inputs' sort (torch.unique) and gather over the Nq·Nk pairs."""
    threshold = abs(params.L_mult * params.L_init)
    distinct = extent.distances if threshold >= extent.queries + extent.keys else extent.pairs
    width, heads = params.mlp_width, extent.heads
    seeded = params.mlp_w1 is None
    return ParamCost(
        drawn=width * (heads + 2) + heads if seeded else 0,
        elements=min(distinct, MLP_CHUNK) * width + distinct * heads + 4 * extent.pairs,
        macs=distinct * width * heads,
        passes=3 * distinct * width,
        params=("mlp_width",) if threshold >= extent.queries + extent.keys else ("mlp_width", "L_init"),
    )


def fire_learned_init(params: FireParams, ctx: BiasContext) -> dict[str, torch.Tensor]:
    """The seeded MLP weights (see ``MethodSpec.learned_init``). The paper also learns c and L_mult; they
    are plain params here, so training that wants them learned substitutes tensors for them too."""
    return initial_mlp(params.mlp_width, ctx.num_heads, params.seed)


@register(
    "fire",
    kind=Kind.BIAS,
    params=FireParams,
    paper=FIRE_PAPER,
    learned=True,
    learned_init=fire_learned_init,
    param_cost=fire_cost,
    conventions={
        "distance": "i - j inside |c (i - j)|: causal as in the paper; bidirectional = |i - j| [unverified]",
        "normaliser": "max(i, |L_mult L_init|) with the query position i; L_init = the training length",
        "init": "MLP drawn like torch.nn.Linear's default, U(+-1/sqrt(fan_in)), from the seed",
        "scale_placement": "added after the 1/sqrt(d) scaling",
    },
)
def fire(params: FireParams, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: BiasContext) -> torch.Tensor:
    """FIRE: B[:, i, j] = MLP(log(|c(i − j)| + 1) / (log(|c·max(i, thr)| + 1) + eps)), thr = |L_mult·L_init|.

    MLP = Linear(1, width) → ReLU → Linear(width, H); its input is ``fire_normalized_distance``. The MLP
    maps a scalar to H values, so it runs once per distinct input (at most Nq + Nk − 1 of them while
    i <= thr), in chunks, and the result is gathered back instead of running on all Nq·Nk pairs. Inputs and
    MLP run in float64 and are rounded at the end, so a value never depends on where it sits in the tensor
    (vectorised and scalar float32 kernels can differ in the last bit).
    """
    threshold = (torch.as_tensor(params.L_mult, dtype=torch.float64) * params.L_init).abs()
    inputs = fire_normalized_distance(
        q_pos, k_pos, c=params.c, threshold=threshold, eps=params.eps, dtype=torch.float64
    )  # (Nq, Nk)
    distinct, index = torch.unique(inputs, return_inverse=True)  # (M,), (Nq, Nk)
    weights = _mlp_weights(params, ctx)
    per_input = torch.cat([_mlp(chunk, weights) for chunk in distinct.split(MLP_CHUNK)])  # (M, H)
    per_head = per_input.to(compute_dtype(ctx.dtype)).T.contiguous()  # (H, M): rows contiguous for the gather
    return per_head[:, index].to(ctx.dtype)  # (H, Nq, Nk)
