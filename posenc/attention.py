"""Reference attention that applies any positional encoding by its kind, and statistics of the maps.

Pure torch, written for clarity (it is a test oracle and the engine of ``POST /v1/attention``):

    scores[b, h, i, j] = scale · ⟨q'[b, h, i], k'[b, h, j]⟩ + B[h, i, j]
    weights            = softmax_j(scores with masked keys set to −inf)

How each kind enters:
    bias      B from ``posenc.pe.bias_dense`` is added AFTER the 1/sqrt(D) scale (the ALiBi/T5 convention);
    rotary    q' and k' are q and k rotated by their positions (xPos: q scaled by ζ^(n/λ), k by its inverse);
    absolute  P (N, D) is added to q and k of every head (the DETR-style "add the encoding to queries and
              keys" reading: there is no token embedding here, so P goes where x + P would have gone);
    nope      nothing (it is an absolute method whose P is zero).

Key j sits at position j and query i at i + query_offset (the caller's alignment; bottom-right, Nk − Nq, is
what a KV-cache decode step means), the same positions ``bias_dense`` uses, so the causal mask is
j > i + query_offset. Softmax runs in float32 (float64 for float64 inputs). A row whose every key is
masked gives zeros rather than NaN; such rows are counted and left out of the statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc.errors import InvalidInput
from posenc.pe.kinds import (
    apply_rotary,
    bias_dense,
    encoding,
    rotary_frequencies,
    rotary_tables,
    xpos_scale,
)
from posenc.pe.ops import Pairing
from posenc.pe.registry import MethodParams, MethodSpec
from posenc.pe.types import AbsoluteContext, BiasContext, RotaryContext
from posenc.schemas.methods import Kind

SUPPORTED_KINDS = (Kind.ABSOLUTE, Kind.BIAS, Kind.ROTARY)


@dataclass(frozen=True)
class AttentionMaps:
    weights: torch.Tensor  # (B, H, Nq, Nk) post-softmax, compute dtype; fully masked rows are zero
    fully_masked: torch.Tensor  # (B, H, Nq) bool: rows where every key was masked


@dataclass(frozen=True)
class AttentionStatistics:
    entropy: torch.Tensor  # (H,) mean over valid rows of −Σ_j a_ij ln a_ij (nats)
    mean_distance: torch.Tensor  # (H,) mean over valid rows of Σ_j a_ij |i + offset − j|
    mass_by_distance: torch.Tensor  # (H, max(Nq + offset, Nk)) mean over valid rows of Σ_{j:|i+offset−j|=Δ} a_ij


def compute_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64 (references); every other float dtype is computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def attention_maps(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    spec: MethodSpec,
    params: MethodParams,
    causal: bool,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    pairing: Pairing = "half",
    query_offset: int = 0,
) -> AttentionMaps:
    """Post-softmax attention of q (B, H, Nq, D) against k (B, H, Nk, D) with ``spec`` applied by its kind.

    Query i is at position i + ``query_offset``, key j at j. ``key_padding_mask`` (B, Nk) bool marks padding
    keys (True = never attended). ``scale`` defaults to 1/sqrt(D). Errors name request fields (``body.q``...)
    because the gateway passes them on as 422s.
    """
    _check_shapes(q, k, key_padding_mask)
    dtype = compute_dtype_for(q.dtype)
    _, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    q, k = q.to(dtype), k.to(dtype)
    logit_scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    q_pos = torch.arange(q_len, dtype=torch.int64) + query_offset  # (Nq,)
    k_pos = torch.arange(k_len, dtype=torch.int64)  # (Nk,)

    bias: torch.Tensor | None = None
    if spec.kind is Kind.BIAS:
        ctx = BiasContext(
            num_heads=heads,
            query_length=q_len,
            key_length=k_len,
            causal=causal,
            dtype=dtype,
            query_offset=query_offset,
        )
        bias = bias_dense(spec, params, ctx)  # (H, Nq, Nk), −inf for future keys when causal
    elif spec.kind is Kind.ROTARY:
        q, k = _rotate(q, k, q_pos, k_pos, max(q_len + query_offset, k_len), spec, params, pairing, dtype)
    elif spec.kind is Kind.ABSOLUTE:
        ctx_abs = AbsoluteContext(grid=(max(q_len + query_offset, k_len),), dim=head_dim, dtype=dtype)
        table = encoding(spec, params, ctx_abs).to(dtype)  # (N, D) over every position either side uses
        q = q + table[q_pos]  # broadcast over (B, H)
        k = k + table[k_pos]
    else:
        raise InvalidInput(
            ("body", "method"),
            f"{spec.name!r} is a {spec.kind.value} method; attention maps support "
            f"{', '.join(kind.value for kind in SUPPORTED_KINDS)} methods",
        )

    scores = torch.matmul(q, k.transpose(-1, -2)) * logit_scale  # (B, H, Nq, Nk)
    if bias is not None:
        scores = scores + bias  # after the scale: the bias is not divided by sqrt(D)

    masked = torch.zeros(q_len, k_len, dtype=torch.bool)  # (Nq, Nk)
    if causal:
        masked = k_pos[None, :] > q_pos[:, None]
    full_mask = masked[None, None]  # (1, 1, Nq, Nk)
    if key_padding_mask is not None:
        full_mask = full_mask | key_padding_mask[:, None, None, :]  # (B, 1, Nq, Nk)
    scores = scores.masked_fill(full_mask, float("-inf"))

    # A bias can also be −inf on its own (a causal table), so a row is empty when all its scores are −inf.
    fully_masked = torch.isneginf(scores).all(dim=-1)  # (B, H, Nq)
    weights = torch.softmax(scores, dim=-1)
    weights = weights.masked_fill(fully_masked[..., None], 0.0)  # softmax of all −inf is NaN
    return AttentionMaps(weights=weights, fully_masked=fully_masked)


def attention_statistics(
    weights: torch.Tensor, fully_masked: torch.Tensor | None = None, *, query_offset: int = 0
) -> AttentionStatistics:
    """Per-head entropy, mean attention distance and attention mass by distance (evaluation.md §6.1-6.3).

    Averages run over batch and queries, leaving out rows in ``fully_masked`` (B, H, Nq); a head without
    a single valid row gets zeros. Distances are |(i + query_offset) − j| between query and key positions.
    """
    batch, heads, q_len, k_len = weights.shape
    width = max(q_len + query_offset, k_len)
    valid = (~fully_masked if fully_masked is not None else torch.ones(batch, heads, q_len, dtype=torch.bool)).to(
        weights.dtype
    )  # (B, H, Nq)
    rows_per_head = valid.sum(dim=(0, 2)).clamp_min(1.0)  # (H,)

    q_pos = torch.arange(q_len) + query_offset  # (Nq,)
    distance = (q_pos[:, None] - torch.arange(k_len)[None, :]).abs()  # (Nq, Nk) int64

    row_entropy = -torch.special.xlogy(weights, weights).sum(dim=-1)  # (B, H, Nq); 0·ln 0 = 0
    row_distance = (weights * distance.to(weights.dtype)).sum(dim=-1)  # (B, H, Nq)
    row_mass = torch.zeros(batch, heads, q_len, width, dtype=weights.dtype)
    row_mass.scatter_add_(-1, distance.expand(batch, heads, q_len, k_len), weights)  # (B, H, Nq, width)

    def head_mean(per_row: torch.Tensor) -> torch.Tensor:
        return (per_row * valid).sum(dim=(0, 2)) / rows_per_head

    return AttentionStatistics(
        entropy=head_mean(row_entropy),
        mean_distance=head_mean(row_distance),
        mass_by_distance=(row_mass * valid[..., None]).sum(dim=(0, 2)) / rows_per_head[:, None],
    )


def _rotate(
    q: torch.Tensor,
    k: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    seq_len: int,
    spec: MethodSpec,
    params: MethodParams,
    pairing: Pairing,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q by its positions (Nq,) and k by its (Nk,) over the whole head dim; positions < seq_len."""
    head_dim = q.shape[-1]
    if head_dim % 2:
        raise InvalidInput(
            ("body", "q", "shape"),
            f"rotary methods rotate pairs of features, so the head dim must be even; got D={head_dim}",
        )
    # one context for both sides: dynamic scalings and xPos's centre see every position either side has
    ctx = RotaryContext(rotary_dim=head_dim, seq_len=seq_len)
    freqs = rotary_frequencies(spec, params, ctx)
    q_cos, q_sin = rotary_tables(freqs, q_pos, dtype)
    k_cos, k_sin = rotary_tables(freqs, k_pos, dtype)
    q_scale = xpos_scale(freqs, q_pos, dtype)
    k_scale = xpos_scale(freqs, k_pos, dtype)
    q = apply_rotary(q, q_cos, q_sin, pairing=pairing, scale=q_scale)
    k = apply_rotary(k, k_cos, k_sin, pairing=pairing, scale=None if k_scale is None else 1.0 / k_scale)
    return q, k


def _check_shapes(q: torch.Tensor, k: torch.Tensor, key_padding_mask: torch.Tensor | None) -> None:
    if q.dim() != 4:
        raise InvalidInput(("body", "q", "shape"), f"q must be 4-D (B, H, Nq, D), got {list(q.shape)}")
    if k.dim() != 4:
        raise InvalidInput(("body", "k", "shape"), f"k must be 4-D (B, H, Nk, D), got {list(k.shape)}")
    if (k.shape[0], k.shape[1], k.shape[3]) != (q.shape[0], q.shape[1], q.shape[3]):
        raise InvalidInput(
            ("body", "k", "shape"),
            f"k {list(k.shape)} must share B, H and D with q {list(q.shape)}",
        )
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (q.shape[0], k.shape[2]):
        raise InvalidInput(
            ("body", "key_padding_mask"),
            f"must be (B, Nk) = {[q.shape[0], k.shape[2]]}, got {list(key_padding_mask.shape)}",
        )
