"""Forgetting Transformer: a data-dependent decay bias from per-head forget gates
(Lin, Nikishin, He, Courville, ICLR 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate",
https://arxiv.org/abs/2503.02130).

Methods: ``fox`` (kind ``score_mod``, causal only). The formula, the gate types and the init follow
``zhixuan-lin/forgetting-transformer``: ``src/forgetting_transformer/model/forgetting_transformer/
modeling_forgetting_transformer.py`` (``ForgettingAttentionLayer``: ``fgate_proj``, ``fgate_type``,
``fgate_bias_init``, ``_initialize_weights``) and the reference of ``ops/forgetting_attention.py``.
Only the decay bias is PE; "FoX (Pro)"'s QK-norm, output gate and shifts are not here.

The params' defaults are the authors' (b_f = 0). Training jobs default to the decay-time init with times 4..64
instead (``TRAINING_DEFAULTS``, posenc's choice, registered as the method's ``training_defaults``); a job that
gives ``fgate_bias_init: false`` trains from the authors' init.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from posenc.errors import ContiguousPositionsRequired, InvalidInput
from posenc.pe.ops import compute_dtype, learned_tensors
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import Extent, LayerInputs, ParamCost, ScoreContext, ScoreTerms
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn

FOX_PAPER = (
    "Lin, Nikishin, He, Courville. Forgetting Transformer: Softmax Attention with a Forget Gate (ICLR 2025). "
    "https://arxiv.org/abs/2503.02130"
)
INIT_STD = 0.02  # initializer_range: N(0, 0.02) for fgate_proj.weight, its bias zeros
# posenc's training default, not the paper's: the authors' b_f = 0 gives σ(0) = 0.5 on every head, ln 2 of logit per
# token of distance, and a tiny model then fails to fit copy in distribution; decay times 4..64 let it fit
# (measured on the copy task). The authors' init is one param away: fgate_bias_init=false.
TRAINING_DEFAULTS: dict[str, Any] = {"fgate_bias_init": True, "decay_time_min": 4.0, "decay_time_max": 64.0}
TRAINING_NOTE = (
    "fgate_bias_init with decay times 4..64: posenc's training default (the authors' init: fgate_bias_init=false)"
)

FgateType = Literal["full", "bias_only", "fixed", "none"]


class FoxParams(MethodParams):
    fgate_type: FgateType = Field(
        default="full",
        description="'full': f_t = σ(w_f·x_t + b_f) (data-dependent, the paper's FoX); 'bias_only': f = σ(b_f), "
        "a learned data-independent gate per head; 'fixed': f = σ(b_f) with b_f fixed (not learned) at the "
        "fgate_bias_init values or as given; 'none': no decay (f = 1)",
    )
    fgate_bias_init: bool = Field(
        default=False,
        description="initialise b_f = −log(expm1(1/τ_h)), τ_h log-spaced over [decay_time_min, decay_time_max] "
        "across heads (so that τ = −1/log σ(b)); required by 'fixed' unless b_f is given. Training jobs default "
        "to true with decay times 4..64 (posenc's choice); false there gives the authors' b_f = 0",
    )
    decay_time_min: float | None = Field(default=None, gt=0, description="T_min of fgate_bias_init")
    decay_time_max: float | None = Field(default=None, gt=0, description="T_max of fgate_bias_init")
    w_f: TensorIn | None = Field(
        default=None, description="fgate_proj: Linear(D, H).weight, (H, D) with D = model_dim; 'full' only"
    )
    b_f: TensorIn | None = Field(default=None, description="the gate bias (H,): fgate_proj.bias or fgate_bias")
    seed: Seed = Field(default=0, description="seed of the N(0, 0.02) draw of w_f when it is not supplied")

    @model_validator(mode="after")
    def _consistent(self) -> FoxParams:
        if self.fgate_bias_init and (self.decay_time_min is None or self.decay_time_max is None):
            raise ValueError("fgate_bias_init needs decay_time_min and decay_time_max")
        if not self.fgate_bias_init and (self.decay_time_min is not None or self.decay_time_max is not None):
            raise ValueError("decay_time_min and decay_time_max are read only with fgate_bias_init=True")
        if self.fgate_type == "fixed" and not self.fgate_bias_init and self.b_f is None:
            raise ValueError("fgate_type='fixed' needs fgate_bias_init=True (with the decay times) or b_f")
        if self.fgate_type == "none" and (self.fgate_bias_init or self.b_f is not None):
            raise ValueError("fgate_type='none' has no gate bias; leave out b_f and fgate_bias_init")
        if self.fgate_type != "full" and self.w_f is not None:
            raise ValueError(f"w_f is read only with fgate_type='full' (got {self.fgate_type!r})")
        return self


def decay_bias_init(num_heads: int, decay_time_min: float, decay_time_max: float) -> torch.Tensor:
    """b_h = −log(expm1(1/τ_h)), τ_h = exp(linspace(log T_min, log T_max, H))_h: (H,) float64.

    Then σ(b_h) = exp(−1/τ_h): t steps of distance decay by e^(−t/τ_h). Formed stably as
    −y − log(−expm1(−y)) with y = 1/τ (expm1(y) itself overflows for τ < 1/709).
    """
    log_tau = torch.linspace(math.log(decay_time_min), math.log(decay_time_max), num_heads, dtype=torch.float64)
    y = torch.exp(-log_tau)  # (H,): 1/τ
    return -y - torch.log(-torch.expm1(-y))  # (H,)


def _gate_bias_init(params: FoxParams, num_heads: int) -> torch.Tensor:
    """The initial b_f (H,) float64: the decay-time init, or zeros (nn.Linear bias / fgate_bias default)."""
    if params.fgate_bias_init:
        assert params.decay_time_min is not None  # the validator's
        assert params.decay_time_max is not None
        return decay_bias_init(num_heads, params.decay_time_min, params.decay_time_max)
    return torch.zeros(num_heads, dtype=torch.float64)


def fox_learned_init(params: FoxParams, ctx: ScoreContext) -> dict[str, torch.Tensor]:
    """The learned gate tensors of the gate type, float32 on the CPU (see ``MethodSpec.learned_init``).

    'full': w_f ~ N(0, 0.02) from torch.Generator().manual_seed(seed) (the reference's distribution, not its
    numbers) and b_f (zeros, or the decay-time init); 'bias_only': b_f; 'fixed' and 'none': nothing is learned.
    """
    if params.fgate_type == "full":
        generator = torch.Generator().manual_seed(params.seed)
        w_f = torch.randn((ctx.num_heads, ctx.model_dim), generator=generator, dtype=torch.float32) * INIT_STD
        return {"w_f": w_f, "b_f": _gate_bias_init(params, ctx.num_heads).to(torch.float32)}
    if params.fgate_type == "bias_only":
        return {"b_f": _gate_bias_init(params, ctx.num_heads).to(torch.float32)}
    return {}


def _gate_log_cumsum(
    params: FoxParams, inputs: LayerInputs, ctx: ScoreContext, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """'full' gates: c (B, H, Nk) = cumsum_t log σ(w_f·x_t + b_f) over the key positions, and the key index
    (Nq,) int64 of each query's own position (query i is key q_pos[i])."""
    x = inputs.x
    if x is None:
        raise InvalidInput(("x",), "fox with fgate_type='full' needs the layer input x")
    inputs.check_x(ctx)
    k_len = inputs.k.shape[2]
    if not torch.equal(inputs.k_pos, torch.arange(k_len, dtype=inputs.k_pos.dtype, device=inputs.k_pos.device)):
        raise ContiguousPositionsRequired(
            ("k_pos",), f"the gate sums run over x's positions: k_pos must be arange({k_len})"
        )
    q_pos = inputs.q_pos
    if q_pos.numel() and (int(q_pos.min()) < 0 or int(q_pos.max()) >= k_len):
        raise InvalidInput(("q_pos",), f"each query must sit at one of the {k_len} key positions x covers")

    expected = {"w_f": (ctx.num_heads, ctx.model_dim), "b_f": (ctx.num_heads,)}
    gate = learned_tensors(params, expected, lambda: fox_learned_init(params, ctx), device=x.device, dtype=dtype)
    gate_logit = F.linear(x.to(dtype), gate["w_f"], gate["b_f"])  # (B, Nk, H): w_f·x_t + b_f, w_f (H, D), b_f (H,)
    log_gate = F.logsigmoid(gate_logit).transpose(1, 2)  # (B, H, Nk): log f_t, stable for large |logit|
    return torch.cumsum(log_gate, dim=-1), q_pos  # (B, H, Nk), (Nq,)


def fox_decay_bias(params: FoxParams, inputs: LayerInputs, ctx: ScoreContext) -> torch.Tensor | None:
    """D (B or 1, H, Nq, Nk) in float32 (float64 for float64 contexts), unmasked; None for 'none'.

    'full': D[h, i, j] = c[q_pos[i]] − c[j], c the inclusive cumulative sum of log f over the keys; for j <= i
    it is Σ_{l=j+1}^{i} log f_l and depends on x_{j+1..i} only. 'bias_only' and 'fixed' (one gate per head
    for every position): D = (q_pos[i] − k_pos[j])·log σ(b_f), the same sum without forming it.
    """
    dtype = compute_dtype(ctx.dtype)
    if params.fgate_type == "none":
        return None
    if params.fgate_type == "full":
        c, query_index = _gate_log_cumsum(params, inputs, ctx, dtype)
        return c[:, :, query_index, None] - c[:, :, None, :]  # (B, H, Nq, Nk)
    b_f = learned_tensors(
        params,
        {"b_f": (ctx.num_heads,)},
        lambda: {"b_f": _gate_bias_init(params, ctx.num_heads)},
        device=inputs.q.device,
        dtype=dtype,
    )["b_f"]  # (H,)
    log_gate = F.logsigmoid(b_f)  # (H,)
    distance = (inputs.q_pos[:, None] - inputs.k_pos[None, :]).to(dtype)  # (Nq, Nk): i − j, exact below 2^24
    return (log_gate[:, None, None] * distance[None])[None]  # (1, H, Nq, Nk)


def fox_cost(params: FoxParams, extent: Extent) -> ParamCost:
    """'full': the seeded w_f (H, D_model) when not supplied (a draw and a scaled copy each), the gate logits
    (B, Nk, H) with D_model multiply-adds each; every gate type: the decay (B or 1, H, Nq, Nk) and its sum with the
    logits, one map beyond the route's two. D_model is ``extent.width``."""
    width = extent.width
    maps = extent.batch * extent.heads * extent.pairs
    if params.fgate_type != "full":
        return ParamCost(elements=maps + 2 * extent.pairs)
    gates = extent.batch * extent.keys * extent.heads
    drawn = extent.heads * width if params.w_f is None else 0
    return ParamCost(drawn=drawn, elements=drawn + maps + 4 * gates, macs=gates * width)


@register(
    "fox",
    param_cost=fox_cost,
    kind=Kind.SCORE_MOD,
    params=FoxParams,
    paper=FOX_PAPER,
    learned=True,
    learned_init=fox_learned_init,
    per_layer=True,
    needs=frozenset({"x"}),
    causal_only=True,
    conventions={
        "scale": "q·k/sqrt(d) + D: the decay is added after the scaling (the kernel's sm_scale)",
        "cumsum": "c_t = Σ_{l<=t} log f_l (inclusive), D_ij = c_i − c_j = Σ_{l=j+1}^{i} log f_l; D_ii = 0",
        "dtype": "log σ and the cumulative sum in float32 (float64 for float64 contexts), as the kernel asserts",
        "gates": "x covers the key positions (B, Nk, D); query i is the key at q_pos[i] (the last Nq for a cache)",
        "fgate_type": "full = σ(w_f·x + b_f); bias_only = σ(b_f) learned per head; fixed = σ(b_f) not learned "
        "(fgate_bias_init values or a given b_f); none = no decay (the reference's Transformer (Pro) baseline)",
        "init": "w_f ~ N(0, 0.02), b_f = 0 (initializer_range); fgate_bias_init: b = −log(expm1(1/τ)), τ "
        "log-spaced over [T_min, T_max]; the reference forbids it with 'full', allowed here [extension]",
        "needs_x": "declared for every gate type (needs is static); only 'full' reads x and refuses its absence",
        "rope": "FoX uses no RoPE in the paper's configs (use_rope: false); combine with a rotary method if wanted",
    },
    training_defaults=TRAINING_DEFAULTS,
    training_note=TRAINING_NOTE,
)
def fox(params: FoxParams, inputs: LayerInputs, ctx: ScoreContext) -> ScoreTerms:
    """FoX: A_ij = q_i·k_j/√d + Σ_{l=j+1}^{i} log f_l, f_t = σ(w_f·x_t + b_f) per head (forget gates).

    D[h, i, j] = c_i − c_j with c_t = Σ_{l<=t} log f_l the inclusive cumulative sum over the key positions
    (``fox_decay_bias``), in float32 (float64 for float64 contexts); log f = logsigmoid. The future entries
    (j > i) are finite (c_i − c_j > 0) and masked by the applier. w_f: (H, D), D = model_dim; b_f: (H,).
    Gate types as ``FoxParams.fgate_type``; 'none' leaves the scaled dot product alone.
    """
    inputs.check(ctx, head_dim=False)
    dtype = compute_dtype(ctx.dtype)
    q, k = inputs.q.to(dtype), inputs.k.to(dtype)
    logits = torch.matmul(q, k.transpose(-1, -2)) * ctx.default_scale  # (B, H, Nq, Nk)
    decay = fox_decay_bias(params, inputs, ctx)
    if decay is not None:
        logits = logits + decay  # (B, H, Nq, Nk)
    return ScoreTerms(logits.to(ctx.dtype))
