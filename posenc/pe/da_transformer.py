"""DA-Transformer: ReLU attention re-scaled by a learnable sigmoid of the real token distance
(Wu, Wu, Huang, NAACL 2021, "DA-Transformer: Distance-aware Transformer", https://arxiv.org/abs/2010.06925).

Methods: ``da_transformer`` (kind ``attention``: row normalisation replaces the softmax). No public code was
found; the formula follows the paper. The initial values of w and v and the causal use are not given
there and are marked [unverified].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field

from posenc.pe.ops import compute_dtype, learned_tensors
from posenc.pe.registry import MethodParams, register
from posenc.pe.types import AttentionWeights, Extent, LayerInputs, ParamCost, ScoreContext
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn

DA_TRANSFORMER_PAPER = (
    "Wu, Wu, Huang. DA-Transformer: Distance-aware Transformer (NAACL 2021). https://arxiv.org/abs/2010.06925"
)


class DaTransformerParams(MethodParams):
    w: TensorIn | None = Field(
        default=None, description="per-head distance weight w_h, (num_heads,); learned; default w_init everywhere"
    )
    v: TensorIn | None = Field(
        default=None, description="per-head sigmoid offset v_h, (num_heads,); learned; default v_init everywhere"
    )
    w_init: float = Field(default=1.0, description="initial w_h of every head [unverified: the paper gives no init]")
    v_init: float = Field(default=0.0, description="initial v_h of every head [unverified: the paper gives no init]")
    eps: float = Field(
        default=0.0,
        ge=0,
        description="added to each row sum Σ_j Â_ij; the paper has none (0: every row with a positive score sums "
        "to 1; a row without one is 0 either way)",
    )


def _per_head(params: DaTransformerParams, ctx: ScoreContext, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """w and v, (H,) each in ``dtype``: the supplied tensor (shape-checked) or its init value on every head.

    The init values are filled in float64 and rounded once to ``dtype`` (as filling in ``dtype`` would).
    """

    def initial() -> dict[str, torch.Tensor]:
        return {
            "w": torch.full((ctx.num_heads,), params.w_init, dtype=torch.float64),
            "v": torch.full((ctx.num_heads,), params.v_init, dtype=torch.float64),
        }

    expected = {"w": (ctx.num_heads,), "v": (ctx.num_heads,)}
    return learned_tensors(params, expected, initial, device=ctx.device, dtype=dtype)


def da_transformer_learned_init(params: DaTransformerParams, ctx: ScoreContext) -> dict[str, torch.Tensor]:
    """w = w_init and v = v_init on every head, float32 (see ``MethodSpec.learned_init``) [unverified]."""
    return {
        "w": torch.full((ctx.num_heads,), params.w_init, dtype=torch.float32),
        "v": torch.full((ctx.num_heads,), params.v_init, dtype=torch.float32),
    }


def log_rescale(distance: torch.Tensor, w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """log R̂ = log((1 + e^v)·σ(w·R − v)) = softplus(v) + log σ(w·R − v): (Nq, Nk), (H,), (H,) -> (H, Nq, Nk).

    R̂ = (1 + e^v) / (1 + e^(v − w·R)) is 1 at R = 0 and lies in (0, 1 + e^v); kept in log space, it neither
    overflows for large v (e^v) nor for large w·R.
    """
    scaled = w[:, None, None] * distance[None]  # (H, Nq, Nk): R^(h) = w_h · R
    offset = v[:, None, None]  # (H, 1, 1)
    # softplus(v) = −log σ(−v): exact for every v (F.softplus turns linear past its threshold, off by e^−20)
    return -F.logsigmoid(-offset) + F.logsigmoid(scaled - offset)  # (H, Nq, Nk)


def da_transformer_cost(params: DaTransformerParams, extent: Extent) -> ParamCost:
    """w and v (H,) filled when not supplied; the (Nq, Nk) distances, the (H, Nq, Nk) log rescale (about four maps
    written) and the masks, log scores, shifted exponentials and quotient: about 14 (B, H, Nq, Nk) maps written, 4 of
    them live at once beyond the route's two."""
    maps = extent.batch * extent.heads * extent.pairs
    return ParamCost(
        elements=2 * extent.heads + 2 * extent.pairs + 4 * extent.heads * extent.pairs + 4 * maps,
        passes=10 * maps,
    )


@register(
    "da_transformer",
    param_cost=da_transformer_cost,
    kind=Kind.ATTENTION,
    params=DaTransformerParams,
    paper=DA_TRANSFORMER_PAPER,
    learned=True,
    learned_init=da_transformer_learned_init,
    per_layer=True,
    conventions={
        "distance": "R_ij = |q_pos[i] − k_pos[j]| (real token distance)",
        "scale": "Â = ReLU(q·k)·R̂/sqrt(d), as the paper; the 1/sqrt(d) only matters against eps",
        "normalisation": "A = Â / (Σ_j Â + eps), masked keys 0 before the sum; a row with no positive score is 0",
        "eps": "0 by default, as the paper (no eps): rows without a positive score are set to 0 instead; "
        "an eps > 0 shrinks rows whose Σ Â is comparable to it",
        "init": "w_h = w_init = 1, v_h = v_init = 0 on every head [unverified: the paper gives no init]",
        "causal": "allowed (the mask removes the future) [unverified: the paper uses bidirectional encoders]",
    },
)
def da_transformer(params: DaTransformerParams, inputs: LayerInputs, ctx: ScoreContext) -> AttentionWeights:
    """DA-Transformer: A = Â / (Σ_j Â + eps), Â_ij = ReLU(q_i·k_j)·(1 + e^v_h)·σ(w_h·|i − j| − v_h)/√d.

    Masked keys have Â = 0. The product is formed in log space, log Â = log(q·k) + log R̂ − log √d, and each
    row is shifted by its largest log Â before the exponential, with the eps term shifted alike:
    A = e^(l − m) / (Σ e^(l − m) + eps·e^(−m)), which equals the formula exactly and overflows for no v, w or
    score size. A row whose scores are all <= 0 or masked has zero weights (not NaN). Computed in float32
    (float64 for float64 contexts), differentiable in w and v.
    """
    inputs.check(ctx, head_dim=False, mask=True)
    dtype = compute_dtype(ctx.dtype)
    q, k = inputs.q.to(dtype), inputs.k.to(dtype)
    scores = torch.matmul(q, k.transpose(-1, -2))  # (B, H, Nq, Nk): q_i·k_j
    per_head = _per_head(params, ctx, dtype)
    w, v = per_head["w"], per_head["v"]  # (H,) each
    distance = (inputs.q_pos[:, None] - inputs.k_pos[None, :]).abs().to(dtype)  # (Nq, Nk): R_ij
    kept = (scores > 0) & ~inputs.mask  # (B, H, Nq, Nk): ReLU(q·k) > 0 and the key attended
    log_scores = torch.where(kept, scores, torch.ones_like(scores)).log()  # (B, H, Nq, Nk), 0 where not kept
    log_scale = torch.log(torch.tensor(ctx.default_scale, dtype=dtype))
    log_hat = log_scores + log_rescale(distance, w, v)[None] + log_scale  # (B, H, Nq, Nk): log Â
    log_hat = log_hat.masked_fill(~kept, float("-inf"))
    # the row shift m cancels exactly, so it carries no gradient; rows with nothing kept shift by 0
    shift = log_hat.detach().amax(dim=-1, keepdim=True)  # (B, H, Nq, 1)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    numerators = torch.exp(log_hat - shift)  # (B, H, Nq, Nk): Â · e^(−m)
    denominators = numerators.sum(dim=-1, keepdim=True)  # (B, H, Nq, 1)
    if params.eps > 0:
        denominators = denominators + params.eps * torch.exp(-shift)
    weights = numerators / torch.where(denominators > 0, denominators, torch.ones_like(denominators))
    return AttentionWeights(weights=weights.to(ctx.dtype))
