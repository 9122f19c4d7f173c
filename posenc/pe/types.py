"""The one signature of each kind of method, and the legend for shapes.

Shape legend (used in every docstring and shape comment):
    B batch, H heads, N / Nq / Nk sequence lengths (queries, keys), D model or head width,
    d_rot rotated width (even), G grid dims (e.g. (Hh, Ww) or (T, Hh, Ww)).

Signatures (``P`` is the method's params model):
    absolute:  fn(params: P, ctx: AbsoluteContext) -> Tensor (*grid, D)           (1D: grid = (N,))
    bias:      fn(params: P, q_pos: Tensor (Nq,) int64, k_pos: Tensor (Nk,) int64, ctx: BiasContext)
                   -> Tensor (H, Nq, Nk), UNMASKED (the causal mask is applied by posenc.pe.bias_dense)
               A Toeplitz method's value must depend on q_pos[:, None] - k_pos[None, :] only.
    rotary:    fn(params: P, ctx: RotaryContext) -> RotaryFrequencies
    score_mod: fn(params: P, inputs: LayerInputs, ctx: ScoreContext) -> ScoreTerms
               The full pre-softmax logits (content term included, scaled by the paper's own convention),
               UNMASKED; the applier masks them (inputs.mask) and takes the softmax. A method that must not see
               masked entries (CoPE's gates) reads inputs.mask itself.
    attention: fn(params: P, inputs: LayerInputs, ctx: ScoreContext) -> AttentionWeights
               Replaces the softmax: weights with masked entries 0, and the mass left to no key.

Positions. 1D methods take (N,) int64 positions. Multi-axis methods (registry ``axes`` = A > 1) take (N, A)
int64 coordinates whose columns follow the grid's axes: (row, col) for a (rows, cols) grid, (frame, row, col)
for a (frames, rows, cols) grid; tokens of a grid are numbered in C order over it (row-major per frame).
Graph methods take node ids (N,). Prefix tokens (CLS, registers, a graph's virtual token) have NEGATIVE
positions: prefix token p (0-based) is −(p + 1) on every axis. Appliers give them the identity rotation, a zero
bias and a zero encoding unless the method registers ``prefix_bias`` or ``prefix_encoding``; methods themselves
only ever see the non-negative positions of the other tokens.

A model-coupled method (TAPE) also registers ``state_init(params, ctx, batch, length) -> state`` (the state
entering the first layer) and ``state_ffn(params, x, state) -> state`` (its update in each feed-forward
sublayer); it reads ``inputs.state`` and returns ``ScoreTerms.next_state``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from posenc.errors import InvalidInput


def prefix_index(positions: torch.Tensor) -> torch.Tensor:
    """Which tokens are prefix tokens: (N,) bool from positions (N,) or (N, A) (negative coordinates)."""
    return positions.reshape(positions.shape[0], -1)[:, 0] < 0


@dataclass(frozen=True)
class Graph:
    """A graph for graph methods: node ids 0 … num_nodes − 1, edges (E, 2) int64 (u, v), undirected unless
    ``directed``; edge_features (E,) or (E, F) int64 categorical ids, or None."""

    num_nodes: int
    edges: torch.Tensor
    edge_features: torch.Tensor | None = None
    directed: bool = False


@dataclass(frozen=True)
class AbsoluteContext:
    grid: tuple[int, ...]  # (N,) for 1D methods, (Hh, Ww) for 2D, (T, Hh, Ww) for 3D; (num_nodes,) for graphs
    dim: int
    dtype: torch.dtype = torch.float32  # table dtype: float32, or float64 for references
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    graph: Graph | None = None  # graph methods (Laplacian PE, centrality)


@dataclass(frozen=True)
class BiasContext:
    num_heads: int
    query_length: int
    key_length: int
    causal: bool
    dtype: torch.dtype = torch.float32
    # Query i sits at position i + query_offset, key j at j (bottom-right alignment is Nk − Nq).
    query_offset: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    graph: Graph | None = None  # graph methods (Graphormer's shortest paths)


@dataclass(frozen=True)
class RotaryContext:
    rotary_dim: int  # even; frequencies are computed with d = rotary_dim
    seq_len: int  # current length (max position + 1); dynamic methods depend on it
    # Frequencies stay float64 by default: the angle n·ω is formed in float64 (``rotary_angles``), and a
    # float32-rounded ω would already be off by n·2^-24 rad at position n. float32 is for tests of that rounding.
    dtype: torch.dtype = torch.float64
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    num_heads: int = 1  # methods with per-head rotations (RoPE-Mixed, LieRE) return one per head


@dataclass(frozen=True)
class RotaryGenerators:
    """What a rotary method returns when its rotations are not one angle per pair and axis: block rotations

        R(p) = expm( Σ_a u_a · G_a ),   u_a = (p_a + position_offset[a]) · position_scale[a]

    applied to consecutive blocks of b features (block j = features j·b … j·b + b − 1 of the rotated part),
    q' = R(p_i) q_i and k' = R(p_j) k_j. ``generators`` (Hg, A, m, b, b) skew-symmetric with Hg = 1 (shared by
    the heads) or H, m·b = d_rot. With b = 2 the block [[0, −f], [f, 0]] is the rotation by u·f (RoPE-Mixed
    is this case and is computed in closed form); for b > 2 ``torch.linalg.matrix_exp`` in float32 or wider.
    ``commuting``: the generators commute block-wise, so R(p)ᵀR(p') = R(p' − p) exactly (ComRoPE; LieRE in
    general not).
    """

    generators: torch.Tensor
    position_scale: torch.Tensor  # (A,) float64
    position_offset: torch.Tensor  # (A,) float64
    commuting: bool = False

    @property
    def block_size(self) -> int:
        return int(self.generators.shape[-1])

    @property
    def num_axes(self) -> int:
        return int(self.generators.shape[1])


@dataclass(frozen=True)
class RotaryFrequencies:
    """What a rotary method returns; ``posenc.pe.rotary_tables`` turns it into cos/sin.

    angle[n, k] = positions[n, pair_axis[k]] * inv_freq[k]           (positions int64 until this multiply)
    cos, sin    = cos(angle) * attention_scale, sin(angle) * attention_scale
    xPos only: q is further scaled by zeta[k] ** ((n - center) / scale_base) and k by its reciprocal.
    """

    inv_freq: torch.Tensor  # (d_rot/2,) in the context dtype (float64 unless a caller asks otherwise)
    attention_scale: float = 1.0  # multiplies cos and sin (YaRN mscale, LongRoPE factor): logits x scale**2
    pair_axis: torch.Tensor | None = None  # (d_rot/2,) int64 axis of each pair for 2D methods; None = axis 0
    num_axes: int = 1  # positions have this many coordinates
    xpos_zeta: torch.Tensor | None = None  # (d_rot/2,) xPos per-pair decay base
    xpos_scale_base: float | None = None  # xPos lambda
    xpos_center: int = 0  # xPos: scale positions are n − center (cancels in q·k; keeps ζ^(±n/λ) in range)
    # FoPE: the first K pairs' cos and sin become Fourier series over their K frequencies,
    # cos'_k(n) = Σ_u cos(angle_u(n))·fourier_cos[u, k], sin'_k(n) = Σ_u sin(angle_u(n))·fourier_sin[u, k]
    fourier_cos: torch.Tensor | None = None  # (K, K) float64
    fourier_sin: torch.Tensor | None = None  # (K, K) float64


@dataclass(frozen=True)
class ScoreContext:
    """What a content-dependent method knows about the layer besides the tensors themselves."""

    num_heads: int
    query_length: int
    key_length: int
    head_dim: int
    causal: bool
    # The model width the layer input x has (FoX's gate projection, XL's W_R read it): H · head_dim unless given.
    model_dim: int
    dtype: torch.dtype = torch.float32
    # Query i sits at position i + query_offset, key j at j (bottom-right alignment is Nk − Nq).
    query_offset: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def default_scale(self) -> float:
        """1/sqrt(head_dim), the scaled dot product; each method's docstring says whether it uses it."""
        return 1.0 / math.sqrt(self.head_dim)


@dataclass(frozen=True)
class LayerInputs:
    """One attention layer's tensors, as a content-dependent method sees them.

    q (B, H, Nq, D), k (B, H, Nk, D); q_pos (Nq,) and k_pos (Nk,) int64 positions; mask (B or 1, 1, Nq, Nk)
    bool, True where key j is never attended (causal future, padding); x (B, Nk, D_model) the layer input at
    the key positions or None (self-attention: the queries are the last Nq of them).
    """

    q: torch.Tensor
    k: torch.Tensor
    q_pos: torch.Tensor
    k_pos: torch.Tensor
    mask: torch.Tensor
    x: torch.Tensor | None = None
    # A model-coupled method's position state entering this layer (TAPE's (C, S)); None for every other method.
    state: Any = None

    def check(self, ctx: ScoreContext, *, head_dim: bool = True, positions: bool = True, mask: bool = False) -> None:
        """Refuse tensors whose shapes disagree with each other or with ``ctx``: InvalidInput at ("q", "shape"),
        ("k", "shape"), then ("q_pos", "shape") and ("k_pos", "shape") (``positions``), then ("mask", "shape")
        (``mask``), the first that fails.

        q (B, H, Nq, D) with H = ctx.num_heads, and D = ctx.head_dim with ``head_dim`` (any D otherwise); k
        (B, H, Nk, D) like q; positions as ``check_positions``; mask (B or 1, 1, Nq, Nk). What a method needs
        beyond the shapes (contiguous positions, an even D, x) it checks itself.
        """
        q, k = self.q, self.k
        if q.dim() != 4 or q.shape[1] != ctx.num_heads or (head_dim and q.shape[-1] != ctx.head_dim):
            width = ctx.head_dim if head_dim else "D"
            raise InvalidInput(("q", "shape"), f"expected (B, {ctx.num_heads}, Nq, {width}), got {list(q.shape)}")
        if k.dim() != 4 or k.shape[:2] != q.shape[:2] or k.shape[-1] != q.shape[-1]:
            raise InvalidInput(
                ("k", "shape"), f"expected ({q.shape[0]}, {q.shape[1]}, Nk, {q.shape[-1]}), got {list(k.shape)}"
            )
        if positions:
            self.check_positions()
        if mask:
            m, q_len, k_len = self.mask, q.shape[2], k.shape[2]
            if m.dim() != 4 or m.shape[0] not in (1, q.shape[0]) or m.shape[1:] != (1, q_len, k_len):
                raise InvalidInput(("mask", "shape"), f"expected (B or 1, 1, {q_len}, {k_len}), got {list(m.shape)}")

    def check_positions(self) -> None:
        """q_pos (Nq,) and k_pos (Nk,) for q (B, H, Nq, D), k (B, H, Nk, D): else InvalidInput at
        ("q_pos", "shape") or ("k_pos", "shape")."""
        q_len, k_len = self.q.shape[2], self.k.shape[2]
        if self.q_pos.shape != (q_len,):
            raise InvalidInput(("q_pos", "shape"), f"expected ({q_len},), got {list(self.q_pos.shape)}")
        if self.k_pos.shape != (k_len,):
            raise InvalidInput(("k_pos", "shape"), f"expected ({k_len},), got {list(self.k_pos.shape)}")

    def check_x(self, ctx: ScoreContext) -> None:
        """x (B or 1, Nk, ctx.model_dim) when given, B and Nk those of q and k: else InvalidInput at ("x", "shape")."""
        x = self.x
        if x is None:
            return
        batch, k_len = self.q.shape[0], self.k.shape[2]
        if x.dim() != 3 or x.shape[0] not in (1, batch) or x.shape[1:] != (k_len, ctx.model_dim):
            raise InvalidInput(("x", "shape"), f"expected ({batch}, {k_len}, {ctx.model_dim}), got {list(x.shape)}")


@dataclass(frozen=True)
class ScoreTerms:
    """What a score_mod method returns.

    logits (B, H, Nq, Nk) unmasked pre-softmax scores; value_table (Nq, Nk, Dv) or (H, Nq, Nk, Dv) or None:
    a per-(i, j) term added to the values, so the output is Σ_j a_ij (v_j + value_table[i, j]) (Shaw's a^V).
    """

    logits: torch.Tensor
    value_table: torch.Tensor | None = None
    # Model-coupled methods: the position state leaving the layer, from the attention weights (B, H, Nq, Nk).
    next_state: Callable[[torch.Tensor], Any] | None = None


@dataclass(frozen=True)
class AttentionWeights:
    """What an attention method returns in place of the softmax.

    weights (B, H, Nq, Nk), 0 at masked entries; leftover (B, H, Nq) or None (none: every row sums to 1 or
    is empty): the mass no key received (stick-breaking). With ``leftover_to_current`` the output gives it to
    the query's own value (v at the query's position); otherwise it is dropped.
    """

    weights: torch.Tensor
    leftover: torch.Tensor | None = None
    leftover_to_current: bool = False


# ------------------------------------------------------------------------------------------- param costs
@dataclass(frozen=True)
class Extent:
    """The sizes a method is applied at, known before any work: ``queries`` and ``keys`` positions (an absolute
    method's tokens are its queries), ``heads`` and ``dim`` (the head's width), ``batch`` sequences (score terms run
    per sequence), ``model_dim`` the width of the layer input x (0: H·dim). An absolute method's encodings are
    ``width`` wide.
    """

    queries: int
    keys: int
    heads: int
    dim: int
    batch: int = 1
    model_dim: int = 0

    @property
    def width(self) -> int:
        """The layer input's width D_model: ``model_dim``, or H·dim where the caller gives none."""
        return self.model_dim or self.heads * self.dim

    @property
    def distances(self) -> int:
        """The distinct relative distances between a query and a key: Nq + Nk − 1."""
        return self.queries + self.keys - 1

    @property
    def pairs(self) -> int:
        """Query-key pairs of one head of one sequence: Nq · Nk."""
        return self.queries * self.keys


@dataclass(frozen=True)
class ParamCost:
    """What a method's params make it compute beyond the caller's own tensors, from the params and an ``Extent``
    alone: ``drawn`` values drawn from the seed's generator (learned tables, their inits), ``elements`` other values
    it allocates (an MLP's activations over distances, angle matrices, per-head tables), ``passes`` elementwise
    operations over values without allocating (a truncated normal's transform of its draws), ``macs``
    multiply-adds (MLP layers, matrix exponentials), and the ``params`` whose values drive them (what a refusal
    names).

    A method registers ``param_cost(params, extent) -> ParamCost`` where its params drive work: the gateway and the
    job checks charge it before anything is allocated (``posenc.compute.common.method_cost``)."""

    drawn: int = 0
    elements: int = 0
    macs: int = 0
    params: tuple[str, ...] = ()
    passes: int = 0

    def plus(self, other: ParamCost) -> ParamCost:
        return ParamCost(
            self.drawn + other.drawn,
            self.elements + other.elements,
            self.macs + other.macs,
            tuple(dict.fromkeys((*self.params, *other.params))),
            self.passes + other.passes,
        )

    def times(self, count: int) -> ParamCost:
        """``count`` times the work (one per layer, per head, per arm)."""
        return ParamCost(self.drawn * count, self.elements * count, self.macs * count, self.params, self.passes * count)
