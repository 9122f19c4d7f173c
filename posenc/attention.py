"""Reference attention that applies any positional encoding through its kind's applier, and statistics of
the maps.

Pure torch, written for clarity (it is a test oracle and the engine of ``POST /v1/attention``):

    scores[b, h, i, j] = scale · ⟨q'[b, h, i], k'[b, h, j]⟩ + B[h, i, j]     (or the method's own logits)
    weights            = softmax_j(scores with masked keys set to −inf)   (or the method's own weights)
    output             = Σ_j weights[i, j] · (v_j + value_table[i, j]) (+ leftover · v_i)

How each kind enters is ``posenc.pe.appliers``'s business (one applier per kind): bias methods add B after
the 1/sqrt(D) scale (the ALiBi/T5 convention); rotary methods rotate q and k by their positions; absolute
methods add P to q and k of every head (the DETR-style reading: there is no token embedding here, so P goes
where x + P would have gone); score_mod methods compute the logits from q, k and the layer input x;
attention methods replace the softmax.

Key j sits at position j and query i at i + query_offset (the caller's alignment; bottom-right, Nk − Nq, is
what a KV-cache decode step means), so the causal mask is j > i + query_offset. Softmax runs in float32
(float64 for float64 inputs). A row whose every key is masked gives zeros rather than NaN; such rows are
counted and left out of the statistics. Errors name the inputs (``q``, ``k``, ``v``, ``x``, ``params``...);
the caller adds its prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc.errors import InvalidInput
from posenc.pe.appliers import Layer, build_applier, future_mask
from posenc.pe.ops import Pairing, compute_dtype
from posenc.pe.registry import MethodParams, MethodSpec
from posenc.pe.types import Graph


@dataclass(frozen=True)
class AttentionMaps:
    weights: torch.Tensor  # (B, H, Nq, Nk) post-softmax, compute dtype; fully masked rows are zero
    fully_masked: torch.Tensor  # (B, H, Nq) bool: rows where every key was masked
    output: torch.Tensor | None = None  # (B, H, Nq, Dv) when v was given
    leftover: torch.Tensor | None = None  # (B, H, Nq) mass given to no key (stick-breaking), else None
    state: dict[str, torch.Tensor] | None = None  # model-coupled methods: the state leaving the layer, by name


@dataclass(frozen=True)
class AttentionStatistics:
    entropy: torch.Tensor  # (H,) mean over valid rows of −Σ_j a_ij ln a_ij (nats)
    mean_distance: torch.Tensor  # (H,) mean over valid rows of Σ_j a_ij |i + offset − j|
    mass_by_distance: torch.Tensor  # (H, max(Nq + offset, Nk)) mean over valid rows of Σ_{j:|i+offset−j|=Δ} a_ij


def compute_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64 (references); every other float dtype is computed in float32."""
    return compute_dtype(dtype)


def attention_maps(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    spec: MethodSpec,
    params: MethodParams,
    causal: bool,
    v: torch.Tensor | None = None,
    x: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    pairing: Pairing | None = None,
    query_offset: int = 0,
    state: dict[str, torch.Tensor] | None = None,
    positions: torch.Tensor | None = None,
    graph: Graph | None = None,
) -> AttentionMaps:
    """Attention of q (B, H, Nq, D) against k (B, H, Nk, D) with ``spec`` applied through its applier.

    Query i is at position i + ``query_offset``, key j at j. ``v`` (B, H, Nk, Dv) gives the output too; ``x``
    (B, Nk, D_model) is the layer input, for methods that read it (FoX's gates). ``key_padding_mask`` (B, Nk)
    bool marks padding keys (True = never attended). ``scale`` defaults to 1/sqrt(D). ``state``: a
    model-coupled method's position state entering the layer (default: the first layer's), by tensor name.
    ``positions`` (Nk,) or (Nk, A): the keys' positions (grid coordinates, node ids, negative for prefix
    tokens), the queries being the last Nq keys; default arange as above. Masks (causal) follow token order.
    ``graph``: the graph of a graph method (positions are then its node ids).
    """
    _check_shapes(q, k, v, x, key_padding_mask)
    dtype = compute_dtype_for(q.dtype)
    _, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    layer = Layer(
        num_heads=heads,
        head_dim=head_dim,
        causal=causal,
        model_dim=None if x is None else x.shape[-1],
        pairing=pairing,
        dtype=dtype,
        graph=graph,
    )
    applier = build_applier(spec, params, layer)
    applier.check(has_x=x is not None, has_v=v is not None)
    q_index = torch.arange(q_len, dtype=torch.int64) + query_offset  # (Nq,) token order of the queries
    k_index = torch.arange(k_len, dtype=torch.int64)  # (Nk,)
    if positions is None:
        q_pos, k_pos = q_index, k_index
    else:
        k_pos = positions
        q_pos = positions[query_offset : query_offset + q_len]  # (Nq,) or (Nq, A)
    mask = future_mask(q_index, k_index) if causal else torch.zeros(1, 1, q_len, k_len, dtype=torch.bool)
    if key_padding_mask is not None:
        mask = mask | key_padding_mask[:, None, None, :]  # (B, 1, Nq, Nk)
    attended = applier.attend(
        q.to(dtype),
        k.to(dtype),
        None if v is None else v.to(dtype),
        q_pos=q_pos,
        k_pos=k_pos,
        mask=mask,
        x=None if x is None else x.to(dtype),
        scale=scale,
        state=None if state is None else applier.state_from_tensors({n: t.to(dtype) for n, t in state.items()}),
    )
    leaving = applier.state_tensors(attended.state) if applier.state_fields else None
    return AttentionMaps(attended.weights, attended.fully_masked, attended.output, attended.leftover, leaving)


def attention_statistics(
    weights: torch.Tensor,
    fully_masked: torch.Tensor | None = None,
    *,
    query_offset: int = 0,
    grid_coordinates: torch.Tensor | None = None,
) -> AttentionStatistics:
    """Per-head entropy, mean attention distance and attention mass by distance.

    Averages run over batch and queries, leaving out rows in ``fully_masked`` (B, H, Nq); a head without
    a single valid row gets zeros. Distances are |(i + query_offset) − j| between query and key indices (token
    order), or with ``grid_coordinates`` (Nk, A) int64 (the keys' grid coordinates, the queries being keys
    query_offset … query_offset + Nq − 1; negative rows are prefix tokens) the grid distance Σ_a |p_a − p'_a|
    between their cells, 0 to and from a prefix token. Either way a distance is below max(Nq + query_offset, Nk).
    """
    batch, heads, q_len, k_len = weights.shape
    width = max(q_len + query_offset, k_len)
    q_pos = torch.arange(q_len) + query_offset  # (Nq,)
    if grid_coordinates is None:
        distance = (q_pos[:, None] - torch.arange(k_len)[None, :]).abs()  # (Nq, Nk) int64
    else:
        cells = grid_coordinates.reshape(k_len, -1)  # (Nk, A)
        prefix = (cells < 0).any(dim=-1)  # (Nk,)
        distance = (cells[q_pos][:, None, :] - cells[None, :, :]).abs().sum(dim=-1)  # (Nq, Nk)
        distance = distance.masked_fill(prefix[q_pos][:, None] | prefix[None, :], 0)  # (Nq, Nk)
    valid = (~fully_masked if fully_masked is not None else torch.ones(batch, heads, q_len, dtype=torch.bool)).to(
        weights.dtype
    )  # (B, H, Nq)
    rows_per_head = valid.sum(dim=(0, 2)).clamp_min(1.0)  # (H,)

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


def _check_shapes(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor | None,
    x: torch.Tensor | None,
    key_padding_mask: torch.Tensor | None,
) -> None:
    if q.dim() != 4:
        raise InvalidInput(("q", "shape"), f"q must be 4-D (B, H, Nq, D), got {list(q.shape)}")
    if k.dim() != 4:
        raise InvalidInput(("k", "shape"), f"k must be 4-D (B, H, Nk, D), got {list(k.shape)}")
    if (k.shape[0], k.shape[1], k.shape[3]) != (q.shape[0], q.shape[1], q.shape[3]):
        raise InvalidInput(("k", "shape"), f"k {list(k.shape)} must share B, H and D with q {list(q.shape)}")
    if v is not None and (v.dim() != 4 or tuple(v.shape[:3]) != tuple(k.shape[:3])):
        raise InvalidInput(
            ("v", "shape"), f"v must be (B, H, Nk, Dv) = {list(k.shape[:3])} + [Dv], got {list(v.shape)}"
        )
    if x is not None and (x.dim() != 3 or tuple(x.shape[:2]) != (q.shape[0], k.shape[2])):
        raise InvalidInput(
            ("x", "shape"), f"x must be (B, Nk, D_model) = {[q.shape[0], k.shape[2]]} + [D_model], got {list(x.shape)}"
        )
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (q.shape[0], k.shape[2]):
        raise InvalidInput(
            ("key_padding_mask",),
            f"must be (B, Nk) = {[q.shape[0], k.shape[2]]}, got {list(key_padding_mask.shape)}",
        )
