"""TAPE: contextualised equivariant positional encoding, a position state carried through the layers
(Zhu, Wang, Cai, Lee, Li, Wang, "Rethinking Addressing in Language Models via Contextualized Equivariant
Positional Encoding", https://arxiv.org/abs/2501.00712; ICML 2025 per the official README; some
summaries say ICLR 2025).

Methods: ``tape`` (kind ``score_mod``, model-coupled, causal only). Every formula, the shapes and the init
follow the official code ``VITA-Group/TAPE``: ``models/llama/adape.py`` (``AdaRotaryEmbedding`` for the
first state, ``apply_rotary_pos_emb`` and ``PELlamaAttention`` for the attention and A·E,
``LlamaDecoderLayer.forward`` for ``post_attention_linear`` (ρ), ``PELayer`` for the feed-forward update,
``LlamaPreTrainedModel._init_weights`` for the init) and ``config/adape.json`` (position_size 48, SiLU).

The state E = (C, S), each (B, H, N, d), enters layer 0 as RoPE's cos/sin, so layer 0 is RoPE. Each layer
rotates q and k with it, q' = q⊙C + rotate_half(q)⊙S; the attention weights A then mix it over the tokens,
E ← E + ρ(A·E), and the feed-forward sublayer mixes it over the heads with a token-dependent gate,
E ← E + W_down(SiLU(y W_x) ⊙ W_up E), y = MLP(LN(h)) the sublayer's output before its residual add (the code's
``LlamaDecoderLayer.forward`` calls ``pe`` after ``mlp``, "this order is important"). No update acts inside
the d features, and each keeps C[..., k] equal to C[..., k + d/2] (likewise S), so rotating every (C, S)
frequency pair by a fixed angle leaves the logits unchanged and commutes with both updates: the equivariance
the paper claims.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from posenc.errors import InvalidInput
from posenc.pe.ops import compute_dtype, learned_tensors, rope_inv_freq
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import Extent, LayerInputs, ParamCost, ScoreContext, ScoreTerms
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn

TAPE_PAPER = (
    "Zhu, Wang, Cai, Lee, Li, Wang. Rethinking Addressing in Language Models via Contextualized Equivariant "
    "Positional Encoding (ICML 2025). https://arxiv.org/abs/2501.00712"
)
INIT_STD = 0.02  # config/adape.json initializer_range: N(0, 0.02) for every nn.Linear weight

RhoMode = Literal["code", "mix"]


@dataclass(frozen=True)
class TapeState:
    """TAPE's position state E = (C, S): cos (B or 1, H, N, d) and sin (B or 1, H, N, d), same dtype."""

    cos: torch.Tensor
    sin: torch.Tensor


class TapeParams(MethodParams):
    base: float = Field(default=10000.0, gt=1, description="θ of the layer-0 RoPE angles n·θ^(−2k/d)")
    position_size: int = Field(
        default=48, ge=1, le=1 << 16, description="P: the hidden channels of the feed-forward state update"
    )
    rho_mode: RhoMode = Field(
        default="code",
        description="'code': E ← E + rowsum(ρ)_h·(A·E)_h, the official einsum 'bqnd,qe->bqnd' (a per-head scale); "
        "'mix': E ← E + Σ_g ρ[h, g]·(A·E)_g, ρ as an nn.Linear over the heads [extension]",
    )
    rho: TensorIn | None = Field(
        default=None, description="post_attention_linear.weight (H, H); the code initialises it to zeros"
    )
    w_x: TensorIn | None = Field(
        default=None,
        description="the gate projection (D_model, P): x_proj.weight transposed, so that the gate is x·w_x",
    )
    w_up: TensorIn | None = Field(default=None, description="up_proj.weight (P, H): heads -> P channels; zeros at init")
    w_down: TensorIn | None = Field(default=None, description="down_proj.weight (H, P): P channels -> heads")
    seed: Seed = Field(default=0, description="seed of the N(0, 0.02) draws of w_x and w_down when not supplied")


def tape_learned_init(params: TapeParams, ctx: ScoreContext) -> dict[str, torch.Tensor]:
    """The code's init, float32 on the CPU: rho (H, H) = 0, w_x (D, P) ~ N(0, 0.02), w_up (P, H) = 0,
    w_down (H, P) ~ N(0, 0.02), drawn from torch.Generator().manual_seed(seed) in the order w_x, w_down.

    ``_init_weights`` draws every nn.Linear weight from N(0, initializer_range), then zeroes
    ``pe.up_proj`` and ``post_attention_linear`` ("special zero initialization"): both state updates start
    at zero, so a fresh model is RoPE in every layer (and w_x, w_down get no gradient until w_up moves).
    """
    heads, width, size = ctx.num_heads, ctx.model_dim, params.position_size
    generator = torch.Generator().manual_seed(params.seed)
    w_x = torch.randn((width, size), generator=generator, dtype=torch.float32) * INIT_STD
    w_down = torch.randn((heads, size), generator=generator, dtype=torch.float32) * INIT_STD
    return {
        "rho": torch.zeros((heads, heads), dtype=torch.float32),
        "w_x": w_x,
        "w_up": torch.zeros((size, heads), dtype=torch.float32),
        "w_down": w_down,
    }


def _weights(
    params: TapeParams,
    shapes: Mapping[str, tuple[int, ...]],
    ctx: ScoreContext,
    dtype: torch.dtype,
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """The learned tensors named in ``shapes``, supplied (shape-checked) or seeded, in ``dtype`` on ``device``."""
    return learned_tensors(params, shapes, lambda: tape_learned_init(params, ctx), device=device, dtype=dtype)


def rope_state(
    positions: torch.Tensor, *, heads: int, head_dim: int, base: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """C = cos(cat(φ, φ)), S = sin(cat(φ, φ)) with φ[n, k] = positions[n]·base^(−2k/d): (1, H, N, d) each.

    The angles are formed in float64 (positions int64 until the multiply) and cast to ``dtype`` once; the
    halves are duplicated as the code's ``torch.cat((freqs, freqs), dim=-1)`` (rotate_half pairing).
    """
    inv_freq = rope_inv_freq(base, head_dim, dtype=torch.float64).to(positions.device)  # (d/2,)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # (N, d/2)
    doubled = torch.cat((angles, angles), dim=-1)  # (N, d)
    length = positions.shape[0]
    cos = doubled.cos().to(dtype)[None, None].expand(1, heads, length, head_dim)  # (1, H, N, d)
    sin = doubled.sin().to(dtype)[None, None].expand(1, heads, length, head_dim)  # (1, H, N, d)
    return cos, sin


def _check_head_dim(head_dim: int) -> None:
    if head_dim % 2:
        raise InvalidInput(
            ("q", "shape"), f"tape rotates feature pairs (k, k + d/2): the head dim must be even, got {head_dim}"
        )


def tape_state_init(params: TapeParams, ctx: ScoreContext, batch: int, length: int) -> TapeState:
    """The state entering layer 0: RoPE's cos/sin at positions 0..length−1, (batch, H, length, d) in ctx.dtype.

    The code's training-time random shift of the positions (k ~ U{0, …, 2·max_len}) is not reproduced.
    """
    _check_head_dim(ctx.head_dim)
    positions = torch.arange(length, dtype=torch.int64, device=ctx.device)
    cos, sin = rope_state(positions, heads=ctx.num_heads, head_dim=ctx.head_dim, base=params.base, dtype=ctx.dtype)
    shape = (batch, ctx.num_heads, length, ctx.head_dim)
    return TapeState(cos.expand(shape), sin.expand(shape))  # (B, H, N, d) each


def rotate_half(t: torch.Tensor) -> torch.Tensor:
    """(t1, t2) -> (−t2, t1) over the halves of the last axis (the code's ``rotate_half``)."""
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), dim=-1)


def _checked_state(state: Any, batch: int, heads: int, length: int, head_dim: int) -> TapeState:
    """``state`` as a TapeState of (B or 1, H, N, d) tensors, or InvalidInput at ("state", ...)."""
    if not isinstance(state, TapeState):
        raise InvalidInput(("state",), f"tape's state is a TapeState (C, S), got {type(state).__name__}")
    expected = (heads, length, head_dim)
    for name, tensor in (("cos", state.cos), ("sin", state.sin)):
        if tensor.dim() != 4 or tensor.shape[0] not in (1, batch) or tuple(tensor.shape[1:]) != expected:
            raise InvalidInput(
                ("state", name, "shape"),
                f"expected ({batch} or 1, {heads}, {length}, {head_dim}), got {list(tensor.shape)}",
            )
    return state


def _check_inputs(inputs: LayerInputs, ctx: ScoreContext) -> None:
    """q (B, H, Nq, d), k (B, H, Nk, d) with d even; positions (Nq,), (Nk,)."""
    inputs.check(ctx, head_dim=False, positions=False)
    _check_head_dim(inputs.q.shape[-1])
    inputs.check_positions()


def _layer_states(
    params: TapeParams, inputs: LayerInputs, dtype: torch.dtype
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """((C_q, S_q), (C_k, S_k)) in ``dtype`` on q's device: (B or 1, H, Nq, d) and (B or 1, H, Nk, d).

    Without a state, layer 0's at q_pos and k_pos (RoPE). With one, it covers the keys and the queries are
    its last Nq rows (q_pos must be the last Nq key positions).
    """
    batch, heads, q_len, head_dim = inputs.q.shape
    k_len, device = inputs.k.shape[2], inputs.q.device
    if inputs.state is None:
        q_cs = rope_state(inputs.q_pos.to(device), heads=heads, head_dim=head_dim, base=params.base, dtype=dtype)
        k_cs = rope_state(inputs.k_pos.to(device), heads=heads, head_dim=head_dim, base=params.base, dtype=dtype)
        return q_cs, k_cs
    state = _checked_state(inputs.state, batch, heads, k_len, head_dim)
    if q_len > k_len or not torch.equal(inputs.q_pos.cpu(), inputs.k_pos[k_len - q_len :].cpu()):
        raise InvalidInput(
            ("q_pos",), "with a state the queries are the last Nq keys: q_pos must equal k_pos[Nk − Nq:]"
        )
    cos = state.cos.to(device=device, dtype=dtype)  # (B or 1, H, Nk, d)
    sin = state.sin.to(device=device, dtype=dtype)  # (B or 1, H, Nk, d)
    return (cos[:, :, k_len - q_len :], sin[:, :, k_len - q_len :]), (cos, sin)


def _mix_heads(rho: torch.Tensor, mixed: torch.Tensor, mode: RhoMode) -> torch.Tensor:
    """ρ applied to A·E (B, H, Nq, d). 'code': the official einsum 'bqnd,qe->bqnd', i.e. head h scaled by
    Σ_e ρ[h, e]; 'mix': Σ_g ρ[h, g]·(A·E)_g (nn.Linear semantics over the head axis)."""
    if mode == "code":
        return mixed * rho.sum(dim=1)[None, :, None, None]  # (B, H, Nq, d)
    return torch.einsum("hg,bgnd->bhnd", rho, mixed)  # (B, H, Nq, d)


def tape_state_ffn(params: TapeParams, x: torch.Tensor, state: Any) -> TapeState:
    """E ← E + W_down(SiLU(x W_x) ⊙ W_up E) for C and S: the state after the feed-forward sublayer.

    x (B, N, D) is that sublayer's output before its residual add, MLP(LN(h)): the code's decoder layer runs
    ``hidden_states = self.mlp(post_attention_layernorm(h))`` and then ``self.pe(hidden_states, E)`` ("this
    order is important"; the call on the normalised input is commented out), and adds both residuals after.
    E (B or 1, H, N, d). W_up (P, H) maps the heads to P channels, SiLU(x W_x) (B, N, P) gates each channel per
    token, W_down (H, P) maps back; nothing acts on d (the code's ``PELayer``). Returned in the state's dtype.
    """
    if x.dim() != 3:
        raise InvalidInput(("x", "shape"), f"expected (B, N, D_model), got {list(x.shape)}")
    batch, length, width = x.shape
    if not isinstance(state, TapeState) or state.cos.dim() != 4:
        raise InvalidInput(("state",), "tape's state is a TapeState (C, S) of (B, H, N, d) tensors")
    heads, head_dim = state.cos.shape[1], state.cos.shape[3]
    checked = _checked_state(state, batch, heads, length, head_dim)
    out_dtype, dtype = checked.cos.dtype, compute_dtype(checked.cos.dtype)
    size = params.position_size
    ctx = ScoreContext(
        num_heads=heads,
        query_length=length,
        key_length=length,
        head_dim=head_dim,
        causal=True,
        model_dim=width,
        dtype=out_dtype,
        device=x.device,
    )
    shapes = {"w_x": (width, size), "w_up": (size, heads), "w_down": (heads, size)}
    weights = _weights(params, shapes, ctx, dtype, x.device)
    gate = F.silu(torch.matmul(x.to(dtype), weights["w_x"]))  # (B, N, P)
    gate = gate.transpose(1, 2)[..., None]  # (B, P, N, 1)

    def update(e: torch.Tensor) -> torch.Tensor:
        e = e.to(device=x.device, dtype=dtype)  # (B or 1, H, N, d)
        up = torch.einsum("ph,bhnd->bpnd", weights["w_up"], e)  # (B or 1, P, N, d)
        down = torch.einsum("hp,bpnd->bhnd", weights["w_down"], gate * up)  # (B, H, N, d)
        return (e + down).to(out_dtype)  # (B, H, N, d)

    return TapeState(update(checked.cos), update(checked.sin))


def tape_cost(params: TapeParams, extent: Extent) -> ParamCost:
    """The seeded init when a tensor is missing: w_x (D_model, P) and w_down (H, P) drawn (a draw and a scaled copy
    each), rho (H, H) and w_up (P, H) zeros; the rotated q and k and their cos/sin (about 6 (B, H, N, d) tensors per
    side); and the state update A·C, A·S: d multiply-adds per (b, h, i, j) each. D_model is ``extent.width``."""
    width = extent.width
    heads, size = extent.heads, params.position_size
    seeded = any(getattr(params, name) is None for name in ("rho", "w_x", "w_up", "w_down"))
    drawn = (width + heads) * size if seeded else 0
    zeros = (size + heads) * heads if seeded else 0
    sides = extent.batch * heads * (extent.queries + extent.keys) * extent.dim
    return ParamCost(
        drawn=drawn,
        elements=drawn + zeros + 6 * sides,
        macs=2 * extent.batch * heads * extent.pairs * extent.dim,
        params=("position_size",),
    )


@register(
    "tape",
    param_cost=tape_cost,
    kind=Kind.SCORE_MOD,
    params=TapeParams,
    paper=TAPE_PAPER,
    learned=True,
    learned_init=tape_learned_init,
    per_layer=True,
    causal_only=True,
    state_init=tape_state_init,
    state_ffn=tape_state_ffn,
    conventions={
        "state": "E = (C, S), each (B, H, N, d); layer 0: C = cos(cat(φ, φ)), S = sin(cat(φ, φ)), "
        "φ[n, k] = n·base^(−2k/d) in float64, the same for every head and batch row (the code's AdaRotaryEmbedding)",
        "rotation": "q' = q⊙C_q + rotate_half(q)⊙S_q, k' likewise (half pairing); logits q'·k'ᵀ/√d",
        "attention_update": "E ← E + ρ(A·E) with A the masked softmax weights (0 at masked keys) and the "
        "residual E the queries' own rows",
        "rho_mode": "code (default): the official einsum('bqnd,qe->bqnd', A·E, post_attention_linear.weight) "
        "sums ρ over e, so head h of A·E is scaled by the row sum Σ_e ρ[h, e] and heads never mix (the code's "
        "quirk, reproduced); mix: Σ_g ρ[h, g](A·E)_g, the nn.Linear reading [extension]",
        "ffn_update": "E ← E + W_down(SiLU(x W_x) ⊙ W_up E) over the head axis, for C and S alike; x is the "
        "feed-forward sublayer's output before its residual add (the code's mlp(post_attention_layernorm(h)), "
        "'this order is important'); hidden_act silu; "
        "w_x = x_proj.weight transposed (D, P), w_up = up_proj.weight (P, H), w_down = down_proj.weight (H, P)",
        "init": "the code's _init_weights: w_x, w_down ~ N(0, 0.02); w_up = 0 and rho = 0, so a fresh model is "
        "RoPE in every layer; w_x and w_down get zero gradient until w_up moves",
        "no_state": "without a state (/v1/attention) the layer-0 state at q_pos and k_pos: the logits are RoPE's",
        "decode": "with Nq < Nk the queries are the last Nq keys; the state returned covers only the query rows "
        "(the code has no KV-cache path: exit(-1) for seq_len == 1)",
        "shift": "the code's training-time random start position k ~ U{0, …, 2·max_len} is not reproduced",
        "last_layer": "the state leaving the last layer is discarded (as in the code): its ρ and feed-forward "
        "weights get no gradient",
        "dtype": "float64 for float64 contexts, else float32; the state is kept in the context dtype",
    },
)
def tape(params: TapeParams, inputs: LayerInputs, ctx: ScoreContext) -> ScoreTerms:
    """TAPE: logits (q⊙C_q + rotate_half(q)⊙S_q)·(k⊙C_k + rotate_half(k)⊙S_k)ᵀ/√d, then E ← E + ρ(A·E).

    E = (C, S) is ``inputs.state`` (a TapeState over the key positions, queries its last Nq rows) or, without
    one, layer 0's RoPE cos/sin at q_pos and k_pos, so that layer 0 is RoPE. ``next_state(A)`` with the
    attention weights A (B, H, Nq, Nk) returns the TapeState (B, H, Nq, d) leaving the attention sublayer:
    E_q + ρ(A·E_k) for C and S, ρ (H, H) as ``rho_mode``. The feed-forward update is ``tape_state_ffn``.
    """
    _check_inputs(inputs, ctx)
    dtype = compute_dtype(ctx.dtype)
    (cos_q, sin_q), (cos_k, sin_k) = _layer_states(params, inputs, dtype)
    q, k = inputs.q.to(dtype), inputs.k.to(dtype)
    q_rot = q * cos_q + rotate_half(q) * sin_q  # (B, H, Nq, d)
    k_rot = k * cos_k + rotate_half(k) * sin_k  # (B, H, Nk, d)
    logits = torch.matmul(q_rot, k_rot.transpose(-1, -2)) * ctx.default_scale  # (B, H, Nq, Nk)
    heads = ctx.num_heads
    rho = _weights(params, {"rho": (heads, heads)}, ctx, dtype, q.device)["rho"]  # (H, H)

    def next_state(weights: torch.Tensor) -> TapeState:
        attention = weights.to(dtype)  # (B, H, Nq, Nk)
        cos = cos_q + _mix_heads(rho, torch.matmul(attention, cos_k), params.rho_mode)  # (B, H, Nq, d)
        sin = sin_q + _mix_heads(rho, torch.matmul(attention, sin_k), params.rho_mode)  # (B, H, Nq, d)
        return TapeState(cos.to(ctx.dtype), sin.to(ctx.dtype))

    return ScoreTerms(logits.to(ctx.dtype), next_state=next_state)
