"""One applier per kind: how a method enters an attention layer, and the only place that branches on kind.

``build_applier(spec, params, layer)`` returns the applier of the method's kind. Every caller (the reference
attention behind ``POST /v1/attention``, the training model, the compute routes' and the jobs' checks) goes
through these hooks, in this order, and never looks at the kind itself:

    embed(t, positions)        absolute: t + P[positions]; the others return t unchanged
    rotate(q, k, q_pos, k_pos) rotary: q and k rotated by their positions (xPos scales them too)
    score_terms(inputs, scale) the pre-softmax logits: scale·q·kᵀ (+ B for bias methods); score_mod methods
                               compute them from q, k and the layer input x, and may add a value-side table
    normalise(logits, mask)    softmax over the unmasked keys; attention methods replace it
    attend(...)                all of the above, then the output Σ_j a_ij (v_j + value_table[i, j]) plus the
                               leftover mass times the query's own value (stick-breaking)

``fast_attend`` (and ``span_attend`` for windows and chunks) is the training model's entry: each layer takes the
path ``training_path`` reads off the measured table in ``posenc.pe.paths`` for its kind, device and length:
``scaled_dot_product_attention`` plain or with the method's term as a dense mask, ``flex_attention``
(``flex_attend``: the term as its score_mod, the layer's reach as its block mask), or the materialised ``attend``.
Every path gives the same output (tested).

Errors are reported relative to the method's own inputs, ``("params", "base")``, ``("q", "shape")``,
``("x",)``; each caller adds its prefix (``body`` in the gateway, ``spec.methods[i]`` in jobs).
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, cast

import torch
import torch.nn.functional as F

from posenc.errors import ContiguousPositionsRequired, InvalidInput
from posenc.pe.kinds import (
    apply_block_rotation,
    apply_rotary,
    bias_dense,
    bias_toeplitz,
    block_rotations,
    encoding,
    rotary_frequencies,
    rotary_tables,
    xpos_scale,
)
from posenc.pe.ops import Pairing
from posenc.pe.paths import AttentionPath, attention_path
from posenc.pe.registry import MethodParams, MethodSpec
from posenc.pe.types import (
    AbsoluteContext,
    AttentionWeights,
    BiasContext,
    Graph,
    LayerInputs,
    RotaryContext,
    RotaryFrequencies,
    RotaryGenerators,
    ScoreContext,
    ScoreTerms,
    prefix_index,
)
from posenc.schemas.methods import Kind


@dataclass(frozen=True)
class Layer:
    """The attention layer a method is applied to."""

    num_heads: int
    head_dim: int
    causal: bool
    model_dim: int | None = None  # the layer input's width; H · head_dim unless given
    pairing: Pairing | None = None  # rotary methods: which features form a pair (None: the method's own)
    rotary_dim: int | None = None  # rotary methods: rotate the first rotary_dim features (default: all)
    dtype: torch.dtype = torch.float32  # the compute dtype of tables and scores
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    graph: Graph | None = None  # graph methods: the graph whose nodes the tokens are (positions = node ids)
    window: int | None = None  # causal layers: a sliding window, query i attends to keys i − w + 1 .. i
    chunk: int | None = None  # causal layers: chunked attention, query i attends to keys c·⌊i/c⌋ .. i

    @property
    def width(self) -> int:
        return self.model_dim if self.model_dim is not None else self.num_heads * self.head_dim

    @property
    def limited_span(self) -> bool:
        """Whether a query sees less than its whole past (a window or a chunk)."""
        return self.window is not None or self.chunk is not None


@dataclass(frozen=True)
class Attended:
    """What ``Applier.attend`` returns."""

    weights: torch.Tensor  # (B, H, Nq, Nk), 0 at masked keys; fully masked rows are all 0
    fully_masked: torch.Tensor  # (B, H, Nq) bool: rows where no key could be attended
    output: torch.Tensor | None  # (B, H, Nq, Dv) when values were given
    leftover: torch.Tensor | None = None  # (B, H, Nq): mass given to no key (attention methods that keep it)
    state: Any = None  # a model-coupled method's position state leaving the layer (TAPE)


def positions(length: int, device: torch.device, offset: int = 0) -> torch.Tensor:
    """0-based positions arange(length) + offset: (length,) int64."""
    return torch.arange(length, dtype=torch.int64, device=device) + offset


def grid_positions(grid: tuple[int, ...], prefix_tokens: int = 0, device: torch.device | None = None) -> torch.Tensor:
    """Positions of ``prefix_tokens`` prefix tokens, then a grid's tokens in C order: (P + prod(grid), A) int64.

    Prefix token p is −(p + 1) on every axis; grid token t has its coordinates (row, col) for a (rows, cols)
    grid, (frame, row, col) for (frames, rows, cols).
    """
    axes = torch.meshgrid(*(torch.arange(size, dtype=torch.int64, device=device) for size in grid), indexing="ij")
    coords = torch.stack(axes, dim=-1).reshape(-1, len(grid))  # (prod(grid), A)
    prefix = -torch.arange(1, prefix_tokens + 1, dtype=torch.int64, device=device)[:, None].expand(-1, len(grid))
    return torch.cat((prefix, coords))  # (P + prod(grid), A)


def future_mask(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """True where key j is in the future of query i (k_pos[j] > q_pos[i]): (1, 1, Nq, Nk) bool."""
    return (k_pos[None, :] > q_pos[:, None])[None, None]


def span_mask(layer: Layer, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """True where key j is out of query i's reach in a causal layer: its future, and for a sliding window
    i − j >= w, for chunked attention ⌊i/c⌋ ≠ ⌊j/c⌋ (positions as given): (1, 1, Nq, Nk) bool."""
    mask = future_mask(q_pos, k_pos)
    if layer.window is not None:
        mask = mask | ((q_pos[:, None] - k_pos[None, :]) >= layer.window)[None, None]
    if layer.chunk is not None:
        mask = mask | ((q_pos[:, None] // layer.chunk) != (k_pos[None, :] // layer.chunk))[None, None]
    return mask


META = torch.device("meta")
DRY_RUN_KEYS = 64  # keys at each end of the sequence a dry run attends to (see Applier.dry_run)


class Applier:
    """The hooks every kind shares; each kind's subclass overrides the ones its methods change.

    ``fast_attend`` (positions arange(T)) keeps its fixed tensors in ``cache`` when the caller passes one (the
    training model does, per layer); learned methods rebuild them every call, so gradients reach the weights.
    """

    def __init__(self, spec: MethodSpec, params: MethodParams, layer: Layer, cache: dict[Any, Any] | None = None):
        self.spec = spec
        self.params = params
        self.layer = layer
        self._cache = cache if cache is not None and not spec.learned else None

    # ---- checks (before anything is allocated)
    def check(self, *, has_x: bool = True, has_v: bool = True) -> None:
        """Refuse a layer this method cannot run on: causal-only methods without causal attention, missing
        inputs the method reads. Kinds add their own (rotary: an even head dim)."""
        if self.spec.causal_only and not self.layer.causal:
            raise InvalidInput(("causal",), f"{self.spec.name!r} is defined for causal attention only")
        if "graph" in self.spec.needs and self.layer.graph is None:
            raise InvalidInput(("graph",), f"{self.spec.name!r} encodes the nodes of a graph; give the graph")

        missing = [name for name, given in (("x", has_x), ("v", has_v)) if name in self.spec.needs and not given]
        if missing:
            raise InvalidInput(
                (missing[0],),
                f"{self.spec.name!r} reads the layer input {missing[0]!r}; give it",
            )

    @property
    def pairing(self) -> Pairing | None:
        """The features that rotate together (rotary methods); None for the others."""
        return None

    def check_pairing(self) -> None:
        """Refuse a pairing the method cannot rotate in (block rotations have one layout), never ignore it."""
        if self.pairing is not None and self.pairing not in self.spec.pairings:
            raise InvalidInput(
                ("pairing",),
                f"{self.spec.name!r} rotates in {' or '.join(self.spec.pairings)} pairing only (its rotations act "
                f"on blocks of adjacent features); got {self.pairing!r}",
            )

    def check_axes(self, axes: int, loc: tuple[str, ...] = ("grid",)) -> None:
        """Refuse positions with ``axes`` coordinates for a method that encodes another number of axes (0: the
        positions are the node ids of a graph)."""
        wanted = self.spec.axes
        if axes == wanted:
            return
        if wanted == 0:
            raise InvalidInput(loc, f"{self.spec.name!r} encodes the nodes of a graph: give graph")
        if axes == 0:
            raise InvalidInput(("graph",), f"{self.spec.name!r} is not a graph method; leave out the graph")
        if wanted == 1:
            raise InvalidInput(loc, f"{self.spec.name!r} encodes 1D positions; leave out the grid (got {axes} axes)")
        raise InvalidInput(
            loc,
            f"{self.spec.name!r} encodes {wanted}D positions: give a grid of {wanted} sizes "
            f"({'rows, cols' if wanted == 2 else 'frames, rows, cols'}) or positions (N, {wanted}); got {axes} axes",
        )

    @property
    def materialises_scores(self) -> bool:
        """Whether the method needs the (B, H, Nq, Nk) scores in memory (no fused kernel path)."""
        return False

    @property
    def keeps_leftover(self) -> bool:
        """Whether ``attend`` reports a leftover (B, H, Nq): the mass of each row given to no key."""
        return False

    @property
    def inside_attention(self) -> bool:
        """Whether the method acts inside each attention layer only (not on the embeddings, no state carried
        between layers): what one layer of a layer pattern can take."""
        return self.spec.state_init is None

    @property
    def rotates(self) -> bool:
        """Whether the method rotates q and k (so a layer may rotate only part of each head)."""
        return False

    def extra_workspace_elements(self, batch: int, q_len: int, k_len: int) -> int:
        """Elements the method allocates beyond q, k, scores and weights (counted against the budget)."""
        return 0

    # ---- the hooks, in the order a layer calls them
    def embed(self, t: torch.Tensor, pos: torch.Tensor, seq_len: int | None = None) -> torch.Tensor:
        """t (..., N, D) with the method's absolute encoding at ``pos`` (N,) or (N, A) added, the encoding
        built for a sequence of ``seq_len`` (default max(pos) + 1) or the grid the positions span; unchanged
        by default."""
        return t

    def fast_embed(self, t: torch.Tensor) -> torch.Tensor:
        """t (B, T, D) at positions arange(T): the training decoders' call, ``embed(t, arange(T), T)``."""
        length = t.shape[-2]
        return self.embed(t, positions(length, t.device), length)

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k

    def score_terms(self, inputs: LayerInputs, scale: float) -> ScoreTerms:
        """scale · q·kᵀ: (B, H, Nq, Nk), unmasked."""
        return ScoreTerms(torch.matmul(inputs.q, inputs.k.transpose(-1, -2)) * scale)

    def normalise(self, logits: torch.Tensor, inputs: LayerInputs) -> AttentionWeights:
        """Softmax over keys of the masked logits; a row with every key masked is all zeros, not NaN."""
        masked = logits.masked_fill(inputs.mask, float("-inf"))
        empty = torch.isneginf(masked).all(dim=-1, keepdim=True)  # (B, H, Nq, 1)
        weights = torch.softmax(masked, dim=-1).masked_fill(empty, 0.0)
        return AttentionWeights(weights)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor | None = None,
        *,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        mask: torch.Tensor,
        x: torch.Tensor | None = None,
        scale: float | None = None,
        state: Any = None,
        embedded: bool = False,
    ) -> Attended:
        """Materialised attention of q (B, H, Nq, D) over k (B, H, Nk, D) with every hook applied.

        ``mask`` (B or 1, 1, Nq, Nk) bool, True = never attended (the causal future included: build it with
        ``future_mask``). ``x`` (B, Nk, D_model) is the layer input for methods that read it. ``embedded``: the
        absolute encoding is already in the tokens q and k were projected from (a model), so it is not added.
        """
        if not embedded:
            seq_len = _sequence_length(q_pos, k_pos)
            q, k = self.embed(q, q_pos, seq_len), self.embed(k, k_pos, seq_len)
        q, k = self.rotate(q, k, q_pos, k_pos)
        inputs = LayerInputs(q=q, k=k, q_pos=q_pos, k_pos=k_pos, mask=mask, x=x, state=state)
        terms = self.score_terms(inputs, scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
        attention = self.normalise(terms.logits, inputs)
        weights = attention.weights
        if terms.next_state is not None:
            state = terms.next_state(weights)
        # a row is empty when the mask, or a −inf bias (a causal table), leaves it no key
        fully_masked = torch.isneginf(terms.logits.masked_fill(mask, float("-inf"))).all(dim=-1)  # (B, H, Nq)
        if v is None:
            return Attended(weights, fully_masked, None, attention.leftover, state)
        output = torch.matmul(weights, v.to(weights.dtype))  # (B, H, Nq, Dv)
        if terms.value_table is not None:
            if terms.value_table.shape[-1] != v.shape[-1]:
                raise InvalidInput(
                    ("v", "shape"),
                    f"{self.spec.name!r} adds a value table of width {terms.value_table.shape[-1]} to the values: "
                    f"v must have Dv = {terms.value_table.shape[-1]}, got {v.shape[-1]}",
                )
            table = terms.value_table.to(weights.dtype)
            # Σ_j a_ij · table[i, j]: (Nq, Nk, Dv) shared by the heads, or (H, Nq, Nk, Dv) per head
            pattern = "bhij,ijd->bhid" if table.dim() == 3 else "bhij,hijd->bhid"
            output = output + torch.einsum(pattern, weights, table)
        if attention.leftover is not None and attention.leftover_to_current:
            output = output + attention.leftover[..., None] * _own_values(v, q_pos, k_pos).to(weights.dtype)
        return Attended(weights, fully_masked, output, attention.leftover, state)

    def training_path(self, length: int, device: torch.device) -> AttentionPath:
        """The path this layer's training attention takes at T = ``length`` on ``device`` (``layer_attend`` at
        positions arange(T)): the measured table's (``posenc.pe.paths``); a model-coupled method's layers
        (their state read from the weights) are materialised."""
        if self.spec.state_init is not None:
            return "materialised"
        kind = self.spec.kind
        span = self.layer.limited_span
        return attention_path(kind, device.type, length, span=span, additive=not self.spec.value_term)

    def fast_attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        x: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Causal self-attention output (B, H, T, d) for training: a fused kernel when the kind allows it."""
        length = q.shape[-2]
        pos = positions(length, q.device)
        out = self.attend(q, k, v, q_pos=pos, k_pos=pos, mask=future_mask(pos, pos), x=x).output
        assert out is not None
        return out.to(v.dtype)

    def dry_run(self, longest: int) -> None:
        """Apply the method once on zeros, so its own checks fire before a job is queued, at a cost that does not
        grow with ``longest``: first on a short contiguous sequence (every code path), then one query at position
        ``longest`` − 1 against the keys at the first and the last ``DRY_RUN_KEYS`` positions, so it sees distance
        0, the longest distance and every short one (a learned table or bucket range shorter than the job's
        longest sequence is refused here). A method that takes positions only as token order (it raises
        ``ContiguousPositionsRequired``) has no table to outrun and is checked by the first run alone."""
        device = torch.device("cpu")
        self._attend_zeros(positions(min(longest, 2 * DRY_RUN_KEYS), device))
        if longest <= 2 * DRY_RUN_KEYS:
            return
        near = positions(DRY_RUN_KEYS, device)  # (K,)
        far = positions(DRY_RUN_KEYS, device, offset=longest - DRY_RUN_KEYS)  # (K,)
        with contextlib.suppress(ContiguousPositionsRequired):
            self._attend_zeros(torch.cat((near, far)))  # (2K,)

    def _attend_zeros(self, k_pos: torch.Tensor) -> None:
        """One query at the last of ``k_pos`` (T,) against every key, on zeros."""
        q_pos = k_pos[-1:]  # (1,): the last position
        heads, head_dim, keys = self.layer.num_heads, self.layer.head_dim, k_pos.shape[0]
        q = torch.zeros(1, heads, 1, head_dim, dtype=self.layer.dtype)  # (1, H, 1, d)
        k = torch.zeros(1, heads, keys, head_dim, dtype=self.layer.dtype)  # (1, H, T, d)
        x = torch.zeros(1, keys, self.layer.width, dtype=self.layer.dtype)  # (1, T, D_model)
        mask = future_mask(q_pos, k_pos)  # (1, 1, 1, T): nothing is in the last query's future
        state = self.initial_state(1, keys, k_pos.device)
        self.attend(q, k, k, q_pos=q_pos, k_pos=k_pos, mask=mask, x=x, state=state)

    # ---- model-coupled methods: a position state threaded through the layers (TAPE); None for the others
    def initial_state(self, batch: int, length: int, device: torch.device) -> Any:
        """The state entering the first layer for a batch of ``length`` tokens, or None."""
        if self.spec.state_init is None:
            return None
        ctx = self._score_context(length, length, 0, device)
        return self.spec.state_init(self.params, ctx, batch, length)

    @property
    def state_fields(self) -> tuple[str, ...]:
        """The tensors of the method's position state (a dataclass of tensors, each (B, H, N, d)); () if none."""
        template = self.initial_state(1, 1, torch.device("cpu"))
        return () if template is None else tuple(f.name for f in fields(template))

    def state_from_tensors(self, tensors: Mapping[str, torch.Tensor]) -> Any:
        """The position state entering a layer, from its tensors by field name (``POST /v1/attention``)."""
        template = self.initial_state(1, 1, torch.device("cpu"))
        if template is None:
            raise InvalidInput(("state",), f"{self.spec.name!r} carries no position state between layers")
        if set(tensors) != set(self.state_fields):
            raise InvalidInput(("state",), f"{self.spec.name!r}'s state has the tensors {list(self.state_fields)}")
        return replace(template, **tensors)

    @staticmethod
    def state_tensors(state: Any) -> dict[str, torch.Tensor]:
        """A position state's tensors by field name."""
        return {} if state is None else {f.name: getattr(state, f.name) for f in fields(state)}

    def update_state(self, x: torch.Tensor, state: Any) -> Any:
        """The state after a feed-forward sublayer whose output is ``x`` (B, T, D_model), before its residual add
        (TAPE updates the position state from the MLP's output, as the authors' decoder layer does)."""
        if state is None or self.spec.state_ffn is None:
            return state
        return self.spec.state_ffn(self.params, x, state)

    def layer_attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        x: torch.Tensor | None = None,
        state: Any = None,
        pos: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """The training models' call: self-attention output (B, H, T, d) and the state leaving the layer; the
        absolute encoding is already in the tokens. A causal layer at positions arange(T) (the decoders) without
        a state goes through ``fast_attend``; ``pos`` (T,) or (T, A) (a ViT's grid, CLS at −1) through
        ``positional_attend``; a state through the materialised path (the update reads the weights)."""
        if self.layer.limited_span:
            if not self.layer.causal or pos is not None:
                raise InvalidInput(("layer",), "a window or chunk needs a causal layer at positions arange(T)")
            if state is None:
                return self.span_attend(q, k, v, x=x), None
        elif state is None and pos is None and self.layer.causal:
            return self.fast_attend(q, k, v, x=x), None
        pos = positions(q.shape[-2], q.device) if pos is None else pos
        if state is None:
            return self.positional_attend(q, k, v, pos, x=x), None
        attended = self.attend(q, k, v, q_pos=pos, k_pos=pos, mask=self._token_mask(q), x=x, state=state, embedded=True)
        assert attended.output is not None
        return attended.output.to(v.dtype), attended.state

    def positional_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Self-attention (B, H, T, d) at positions ``pos``, causal in token order if the layer is; the absolute
        encoding is already in the tokens. Materialised here; kinds with a fused form override it."""
        attended = self.attend(q, k, v, q_pos=pos, k_pos=pos, mask=self._token_mask(q), x=x, embedded=True)
        assert attended.output is not None
        return attended.output.to(v.dtype)

    def span_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Causal self-attention (B, H, T, d) at positions arange(T) over the layer's window or chunk only.
        Materialised here; kinds with a fused form override it."""
        pos = positions(q.shape[-2], q.device)
        attended = self.attend(q, k, v, q_pos=pos, k_pos=pos, mask=self._token_mask(q), x=x, embedded=True)
        assert attended.output is not None
        return attended.output.to(v.dtype)

    def _token_mask(self, q: torch.Tensor) -> torch.Tensor:
        """The layer's mask in token order: (1, 1, T, T) bool, the future (and what lies outside the window or
        chunk) when causal, else nothing."""
        index = positions(q.shape[-2], q.device)
        if self.layer.causal:
            return span_mask(self.layer, index, index)
        return torch.zeros(1, 1, q.shape[-2], q.shape[-2], dtype=torch.bool, device=q.device)

    # ---- FlexAttention
    def score_term(self, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, x: torch.Tensor | None) -> Any:
        """What the method adds to scale·q·kᵀ in causal self-attention at positions ``pos``, as FlexAttention's
        score_mod reads it: None when nothing (plain attention), ``NO_FLEX_FORM`` when the method is not a
        score term (it replaces the softmax), else a function (score, b, h, i, j) -> score."""
        return None

    def flex_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """Causal self-attention (B, H, T, d) through ``flex_attention``, or None for a method without a score
        form. Compiled on CUDA (eager FlexAttention materialises the scores anyway); eager elsewhere, where this
        torch has no backward for it."""
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        length, device = q.shape[-2], q.device
        pos = positions(length, device)
        q, k = self.rotate(q, k, pos, pos)
        score_mod = self.score_term(q, k, pos, x)
        if score_mod is NO_FLEX_FORM:
            return None
        block_mask = _block_mask(self.layer, length, device, create_block_mask)
        if device.type == "cuda":
            with warnings.catch_warnings():
                # Dynamo reads .grad of the captured term while tracing a score_mod whose term requires grad
                # (Transformer-XL, FoX, CoPE); torch's own check, harmless: the gradients match the materialised
                # path's (tests/unit/test_gpu.py, bench/gpu_check.py)
                warnings.filterwarnings("ignore", message="The .grad attribute of a Tensor that is not a leaf")
                out: torch.Tensor = _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=block_mask)
            return out
        with warnings.catch_warnings():
            # eager on purpose (a CPU compile costs tens of seconds per shape); it warns that it is unfused
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            eager: torch.Tensor = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
        return eager

    def _flex(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor | None) -> torch.Tensor:
        """``flex_attend`` where the table chose it (the table never chooses it for a method without a form)."""
        out = self.flex_attend(q, k, v, x=x)
        if out is None:
            raise AssertionError(f"{self.spec.name}: FlexAttention chosen for a method without a score_mod form")
        return out

    # ---- what learned_init gets
    def init_context(self, length: int, grid: tuple[int, ...] | None = None) -> Any:
        """The context this kind's ``learned_init`` takes, for a model trained at ``length`` tokens (``grid``:
        the grid they form, for multi-axis methods)."""
        return self._score_context(length, length, 0)

    def _score_context(
        self, q_len: int, k_len: int, query_offset: int, device: torch.device | None = None
    ) -> ScoreContext:
        """The method's context; ``device`` is where this call's tensors are (the inputs'), which is not the
        layer's once a model built on the CPU has been moved (``model.to("cuda")``): tables and supplied learned
        tensors are made or moved there."""
        return ScoreContext(
            num_heads=self.layer.num_heads,
            query_length=q_len,
            key_length=k_len,
            head_dim=self.layer.head_dim,
            causal=self.layer.causal,
            model_dim=self.layer.width,
            dtype=self.layer.dtype,
            query_offset=query_offset,
            device=self.layer.device if device is None else device,
        )

    def _cached(self, key: tuple[Any, ...], build: Any) -> Any:
        if self._cache is None:
            return build()
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]


NO_FLEX_FORM = object()  # ``score_term``'s answer for a method FlexAttention cannot express


@functools.cache
def _compiled_flex() -> Any:
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


_BLOCK_MASKS: dict[tuple[int, str, int | None, int | None], Any] = {}


def _block_mask(layer: Layer, length: int, device: torch.device, create_block_mask: Any) -> Any:
    """FlexAttention's block mask of a causal layer's reach (``span_mask``'s complement: the past, within the
    window, within the chunk), built once per (length, device, window, chunk)."""
    window, chunk = layer.window, layer.chunk
    key = (length, str(device), window, chunk)
    if key not in _BLOCK_MASKS:

        def reach(b: Any, h: Any, i: Any, j: Any) -> Any:
            inside = i >= j
            if window is not None:
                inside = inside & (i - j < window)
            if chunk is not None:
                inside = inside & (i // chunk == j // chunk)
            return inside

        _BLOCK_MASKS[key] = create_block_mask(reach, None, None, length, length, device=device)
    return _BLOCK_MASKS[key]


def _sequence_length(q_pos: torch.Tensor, k_pos: torch.Tensor) -> int:
    """max position + 1 over queries and keys: the length tables and dynamic scalings are built for."""
    if q_pos.numel() + k_pos.numel() == 0:
        return 0
    return max(int(torch.cat((q_pos, k_pos)).max()) + 1, 0)


def _grid_extent(pos: torch.Tensor) -> tuple[int, ...]:
    """The grid (max coordinate + 1 per axis) that the non-prefix positions (N, A) span."""
    placed = pos[~prefix_index(pos)]  # (N', A)
    if placed.numel() == 0:
        return tuple(1 for _ in range(pos.shape[1]))
    return tuple(int(extent) + 1 for extent in placed.max(dim=0).values.tolist())


def _prefix_number(pos: torch.Tensor) -> torch.Tensor:
    """Prefix token p (0-based) from its position −(p + 1): (N,) int64, meaningful where prefix_index holds."""
    return -pos.reshape(pos.shape[0], -1)[:, 0] - 1


def _own_values(v: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """v at each query's own position: (B, H, Nq, Dv); zero for a query whose position is not among the keys."""
    match = q_pos[:, None] == k_pos[None, :]  # (Nq, Nk)
    return torch.matmul(match.to(v.dtype), v)  # (B, H, Nq, Dv)


class AbsoluteApplier(Applier):
    """P (N, D) added where the token embedding is (the model) or to q and k of every head (/v1/attention)."""

    def embed(self, t: torch.Tensor, pos: torch.Tensor, seq_len: int | None = None) -> torch.Tensor:
        dim = t.shape[-1]
        prefix = prefix_index(pos)  # (N,)
        if self.layer.graph is not None:
            grid: tuple[int, ...] = (self.layer.graph.num_nodes,)
        elif pos.dim() == 2:
            grid = _grid_extent(pos)
        else:
            grid = (seq_len if seq_len is not None else _sequence_length(pos, pos[:0]),)
        table = self.table(grid, dim, t.device)  # (*grid, D)
        placed = pos.clamp_min(0).reshape(pos.shape[0], -1)  # (N, A): prefix rows read entry 0, replaced below
        rows = table[tuple(placed[:, axis] for axis in range(placed.shape[1]))]  # (N, D)
        if bool(prefix.any()):
            rows = torch.where(prefix[:, None], self.prefix_rows(pos, dim, t.device).to(rows.dtype), rows)
        return t + rows.to(t.dtype)

    def fast_embed(self, t: torch.Tensor) -> torch.Tensor:
        if self.layer.graph is not None:  # positions are node ids: the general path
            return super().fast_embed(t)
        length = t.shape[-2]
        table = self.table((length,), t.shape[-1], t.device)  # (T, D)
        # positions 0..T−1 read the rows in order, so they are the table itself: no gather (whose backward is a
        # scatter-add) and no prefix test (a device sync on CUDA) every step; the same values as ``embed``
        rows = table if table.shape[0] == length else table[:length]  # (T, D)
        return t + rows.to(t.dtype)

    def table(self, grid: tuple[int, ...], dim: int, device: torch.device) -> torch.Tensor:
        """P (*grid, dim) in the layer's compute dtype (cached per grid: P depends only on it)."""
        ctx = self._context(grid, dim, device)
        table: torch.Tensor = self._cached(
            ("absolute", grid, dim, str(device)), lambda: encoding(self.spec, self.params, ctx)
        )
        return table

    def prefix_rows(self, pos: torch.Tensor, dim: int, device: torch.device) -> torch.Tensor:
        """The encoding of each prefix token: (N, D), the method's own prefix rows or zeros (ViT's CLS row)."""
        number = _prefix_number(pos)  # (N,)
        count = int(number.max()) + 1
        if self.spec.prefix_encoding is None:
            return torch.zeros(pos.shape[0], dim, dtype=self.layer.dtype, device=device)
        own: torch.Tensor = self.spec.prefix_encoding(self.params, self._context((count,), dim, device), count)
        return own[number.clamp(0, count - 1)]  # (N, D)

    def _context(self, grid: tuple[int, ...], dim: int, device: torch.device) -> AbsoluteContext:
        return AbsoluteContext(grid=grid, dim=dim, dtype=self.layer.dtype, device=device, graph=self.layer.graph)

    def init_context(self, length: int, grid: tuple[int, ...] | None = None) -> Any:
        grid = grid if grid is not None else (length,)
        return AbsoluteContext(grid=grid, dim=self.layer.width, graph=self.layer.graph)

    @property
    def inside_attention(self) -> bool:
        return self.spec.name == "nope"  # NoPE adds nothing to the embeddings: a layer without a position signal

    def dry_run(self, longest: int) -> None:
        # On the meta device: the method's own checks run (a learned table must cover the longest sequence)
        # without allocating the (T, D) table, which at T = 3·2^20, D = 8192 would be 100 GB.
        encoding(self.spec, self.params, AbsoluteContext(grid=(longest,), dim=self.layer.width, device=META))

    def fast_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # P was added to the embeddings

    def positional_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.layer.causal)  # P is in the tokens

    def span_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.training_path(q.shape[-2], q.device) == "flex":
            return self._flex(q, k, v, x)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=~self._token_mask(q))  # True = attended


class BiasApplier(Applier):
    """B (H, Nq, Nk) from ``bias_dense`` added to the scaled scores (the ALiBi/T5 convention). With a causal
    layer the bias itself is −inf at future keys."""

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The bias at these positions: (H, Nq, Nk) in the layer's compute dtype; 1D methods of a causal layer
        are −inf in the future (multi-axis and graph methods leave causality to the mask). Prefix tokens get
        the method's prefix entries, or 0."""
        q_prefix, k_prefix = prefix_index(q_pos), prefix_index(k_pos)  # (Nq,), (Nk,)
        if not bool(q_prefix.any()) and not bool(k_prefix.any()):
            return bias_dense(self.spec, self.params, self._bias_context(q_pos, k_pos), q_pos, k_pos)
        q_placed, k_placed = q_pos[~q_prefix], k_pos[~k_prefix]
        heads = self.layer.num_heads
        inner = bias_dense(self.spec, self.params, self._bias_context(q_placed, k_placed), q_placed, k_placed)
        full = torch.zeros(heads, q_pos.shape[0], k_pos.shape[0], dtype=inner.dtype, device=inner.device)
        full[:, (~q_prefix).nonzero()[:, 0, None], (~k_prefix).nonzero()[:, 0][None, :]] = inner  # (H, Nq', Nk')
        if self.spec.prefix_bias is not None:
            values = self.spec.prefix_bias(self.params, self._bias_context(q_placed, k_placed)).to(full.dtype)  # (H, 3)
            from_prefix = q_prefix[:, None] & ~k_prefix[None, :]  # (Nq, Nk): prefix → token
            to_prefix = ~q_prefix[:, None] & k_prefix[None, :]  # token → prefix
            both = q_prefix[:, None] & k_prefix[None, :]  # prefix → prefix
            for column, where in enumerate((from_prefix, to_prefix, both)):
                full = torch.where(where[None], values[:, column, None, None], full)
        return full

    def _bias_context(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> BiasContext:
        one_axis = q_pos.dim() == 1 and self.layer.graph is None
        return BiasContext(
            num_heads=self.layer.num_heads,
            query_length=q_pos.shape[0],
            key_length=k_pos.shape[0],
            # some methods differ by direction (T5's buckets); −inf in the future. A 2D or graph position has
            # no future: the layer's mask (token order) decides.
            causal=self.layer.causal and one_axis,
            dtype=self.layer.dtype,
            query_offset=int(q_pos[0]) if q_pos.numel() and one_axis else 0,
            device=q_pos.device,
            graph=self.layer.graph,
        )

    def score_terms(self, inputs: LayerInputs, scale: float) -> ScoreTerms:
        scores = torch.matmul(inputs.q, inputs.k.transpose(-1, -2)) * scale  # (B, H, Nq, Nk)
        return ScoreTerms(scores + self.bias(inputs.q_pos, inputs.k_pos).to(scores.dtype))  # after the scale

    def extra_workspace_elements(self, batch: int, q_len: int, k_len: int) -> int:
        return self.layer.num_heads * q_len * k_len

    def init_context(self, length: int, grid: tuple[int, ...] | None = None) -> Any:
        return BiasContext(
            num_heads=self.layer.num_heads,
            query_length=length,
            key_length=length,
            causal=self.layer.causal,
            graph=self.layer.graph,
        )

    def score_term(self, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, x: torch.Tensor | None) -> Any:
        length = pos.shape[0]
        ctx = BiasContext(
            num_heads=self.layer.num_heads,
            query_length=length,
            key_length=length,
            causal=True,  # direction matters to some methods (T5's buckets); the future is block-masked anyway
            dtype=torch.float32,
            device=pos.device,
        )
        if self.spec.toeplitz:
            table = bias_toeplitz(self.spec, self.params, ctx)  # (H, 2T − 1): B[h, i, j] = table[h, i − j + T − 1]

            def toeplitz(score: Any, b: Any, h: Any, i: Any, j: Any) -> Any:
                return score + table[h, i - j + length - 1]

            return toeplitz
        dense = bias_dense(self.spec, self.params, ctx, pos, pos)  # (H, T, T)

        def add_bias(score: Any, b: Any, h: Any, i: Any, j: Any) -> Any:
            return score + dense[h, i, j]

        return add_bias

    def fast_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        length, device = q.shape[-2], q.device

        def build() -> torch.Tensor:
            pos = positions(length, device)
            causal = BiasContext(
                num_heads=self.layer.num_heads,
                query_length=length,
                key_length=length,
                causal=True,
                device=device,
            )
            return bias_dense(self.spec, self.params, causal, pos, pos).to(device)  # (H, T, T), −inf above

        if self.training_path(length, device) == "flex":
            return self._flex(q, k, v, x)
        # cached in q's dtype too, so a layer run in another dtype (autocast) does not cast (H, T, T) per call
        mask = self._cached(("causal_bias", length, str(device), q.dtype), lambda: build().to(q.dtype))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (H, T, T) broadcasts over B

    def positional_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        bias = self.bias(pos, pos)  # (H, T, T)
        if self.layer.causal:
            bias = bias.masked_fill(self._token_mask(q)[0], float("-inf"))  # token order
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))

    def span_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.training_path(q.shape[-2], q.device) == "flex":
            return self._flex(q, k, v, x)
        pos = positions(q.shape[-2], q.device)
        bias = self.bias(pos, pos).masked_fill(self._token_mask(q)[0], float("-inf"))  # (H, T, T)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))


class RotaryApplier(Applier):
    """q and k rotated by their positions; xPos also scales q by ζ^(n/λ) and k by its reciprocal."""

    def __init__(self, spec: MethodSpec, params: MethodParams, layer: Layer, cache: dict[Any, Any] | None = None):
        super().__init__(spec, params, layer, cache)
        self._frequencies: dict[tuple[int, str], RotaryFrequencies | RotaryGenerators] = {}

    @property
    def rotates(self) -> bool:
        return True

    @property
    def rotary_dim(self) -> int:
        return self.layer.rotary_dim if self.layer.rotary_dim is not None else self.layer.head_dim

    @property
    def pairing(self) -> Pairing:
        """The pairing rotated in: the layer's, else the method's own (the first of its ``pairings``)."""
        chosen = self.layer.pairing if self.layer.pairing is not None else self.spec.pairings[0]
        return cast(Pairing, chosen)

    def check(self, *, has_x: bool = True, has_v: bool = True) -> None:
        super().check(has_x=has_x, has_v=has_v)
        self.check_pairing()
        if self.layer.rotary_dim is None and self.layer.head_dim % 2:
            raise InvalidInput(
                ("q", "shape"),
                f"rotary methods rotate pairs of features, so the head dim must be even; got D={self.layer.head_dim}",
            )

    def frequencies(self, seq_len: int, device: torch.device) -> RotaryFrequencies | RotaryGenerators:
        """The method's frequencies (or generators) for a context of ``seq_len`` (dynamic scalings read it),
        computed once per (context, device) in an applier's life: a request's rotation of q and of k, its tables
        and its attention scale read the same ones. A learned method's are recomputed every call (its tensors
        change as it trains, and gradients must reach them)."""
        ctx = RotaryContext(rotary_dim=self.rotary_dim, seq_len=seq_len, device=device, num_heads=self.layer.num_heads)
        if self.spec.learned:
            return rotary_frequencies(self.spec, self.params, ctx)
        key = (seq_len, str(device))
        if key not in self._frequencies:
            self._frequencies[key] = rotary_frequencies(self.spec, self.params, ctx)
        return self._frequencies[key]

    def tables(
        self, pos: torch.Tensor, seq_len: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, RotaryFrequencies]:
        """(cos, sin, xPos scale or None, frequencies) at ``pos`` (N,) or (N, A): tables (N, d_rot/2). Prefix
        tokens (negative positions) get the identity: cos 1, sin 0, scale 1."""
        freqs = self.frequencies(seq_len, pos.device)
        if isinstance(freqs, RotaryGenerators):
            raise InvalidInput(
                ("return_tables",),
                f"{self.spec.name!r} rotates blocks by matrices R(p) = expm(Σ p_a G_a), not by cos/sin tables",
            )
        prefix = prefix_index(pos)  # (N,)
        cos, sin = rotary_tables(freqs, pos.clamp_min(0), self.layer.dtype)  # (N, d_rot/2) each
        scale = xpos_scale(freqs, pos.clamp_min(0), self.layer.dtype)
        if bool(prefix.any()):
            cos = cos.masked_fill(prefix[:, None], 1.0)
            sin = sin.masked_fill(prefix[:, None], 0.0)
            scale = None if scale is None else scale.masked_fill(prefix[:, None], 1.0)
        return cos, sin, scale, freqs

    def attention_scale(self, seq_len: int) -> float:
        """What cos and sin are multiplied by (YaRN's mscale, LongRoPE's factor); 1 for block rotations."""
        freqs = self.frequencies(seq_len, torch.device("cpu"))
        return 1.0 if isinstance(freqs, RotaryGenerators) else freqs.attention_scale

    def rotation_elements(self, tokens: int) -> int:
        """Elements of the rotation matrices for ``tokens`` tokens (block rotations; 0 for cos/sin tables)."""
        if self.spec.block_rotation is None:
            return 0
        heads, block = self.spec.block_rotation(self.params, self.layer.num_heads)  # nothing drawn to know it
        return heads * tokens * self.rotary_dim * block

    def extra_workspace_elements(self, batch: int, q_len: int, k_len: int) -> int:
        return self.rotation_elements(q_len) + self.rotation_elements(k_len)

    def rotate_side(self, t: torch.Tensor, pos: torch.Tensor, seq_len: int, *, keys: bool) -> torch.Tensor:
        """One side rotated in the layer's compute dtype: queries scaled by ζ^(n/λ), keys by its reciprocal."""
        freqs = self.frequencies(seq_len, pos.device)
        if isinstance(freqs, RotaryGenerators):
            rotations = block_rotations(freqs, pos.clamp_min(0), self.layer.dtype)  # (Hg, N, m, b, b)
            prefix = prefix_index(pos)  # (N,)
            if bool(prefix.any()):
                eye = torch.eye(freqs.block_size, dtype=rotations.dtype, device=rotations.device)
                rotations = torch.where(prefix[None, :, None, None, None], eye, rotations)
            return apply_block_rotation(t.to(rotations.dtype), rotations)
        cos, sin, scale, _ = self.tables(pos, seq_len)
        if keys and scale is not None:
            scale = 1.0 / scale
        return apply_rotary(t.to(cos.dtype), cos, sin, pairing=self.pairing, scale=scale)

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # one context for both sides: dynamic scalings and xPos's centre see every position either side has
        seq_len = _sequence_length(q_pos, k_pos)
        return (
            self.rotate_side(q, q_pos, seq_len, keys=False).to(q.dtype),
            self.rotate_side(k, k_pos, seq_len, keys=True).to(k.dtype),
        )

    def init_context(self, length: int, grid: tuple[int, ...] | None = None) -> Any:
        return RotaryContext(rotary_dim=self.rotary_dim, seq_len=length, num_heads=self.layer.num_heads)

    def fast_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        q, k = self.rotate_cached(q, k)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def rotate_cached(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k (B, H, T, d) at positions arange(T), the tables built once per (T, device, dtype) when the
        applier has a cache (the training layers'): the hot path of a rotary layer. q and k in a reduced
        precision (bf16 autocast) are rotated in it, the tables computed in float32 (float64 angles) and then
        rounded to it, as transformers' Llama rotates (``cos.to(x.dtype)``): no cast of q and k up and back."""
        length, device = q.shape[-2], q.device
        reduced = q.dtype if q.dtype in (torch.bfloat16, torch.float16) else None

        def build() -> tuple[torch.Tensor, ...]:
            cos, sin, scale = self.tables(positions(length, device), length)[:3]  # (T, d_rot/2) each
            # xPos: the scale folded into the tables, ζ^(n/λ) for the queries and its reciprocal for the keys
            # (one product per entry, once, instead of two more passes over q and k per call)
            sides = [(cos, sin)] if scale is None else [(cos * scale, sin * scale), (cos / scale, sin / scale)]
            tables = [t if reduced is None else t.to(reduced) for pair in sides for t in pair]
            return tuple(tables)

        tables = self._cached(("rotary", length, str(device), reduced), build)
        q_cos, q_sin = tables[:2]
        k_cos, k_sin = tables[-2:]
        q = apply_rotary(q, q_cos, q_sin, pairing=self.pairing)
        k = apply_rotary(k, k_cos, k_sin, pairing=self.pairing)
        return q, k

    def positional_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        q, k = self.rotate(q, k, pos, pos)
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.layer.causal)

    def span_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.training_path(q.shape[-2], q.device) == "flex":
            return self._flex(q, k, v, x)  # rotates q and k itself
        q, k = self.rotate_cached(q, k)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=~self._token_mask(q))  # True = attended


class ScoreModApplier(Applier):
    """Content-dependent logits from the method (Shaw, Transformer-XL, TENER, Huang, FoX, CoPE, CAPE)."""

    @property
    def materialises_scores(self) -> bool:
        return True

    def extra_workspace_elements(self, batch: int, q_len: int, k_len: int) -> int:
        # the method's own (B, H, Nq, Nk) intermediates (gates, position logits): two more maps, or what the
        # method declares when it needs more (a gathered (Nq, Nk, d) table, an MLP over every (i, j))
        maps = 2 * batch * self.layer.num_heads * q_len * k_len
        if self.spec.workspace is None:
            return maps
        return maps + self.spec.workspace(self.params, self._score_context(q_len, k_len, 0), batch)

    def score_terms(self, inputs: LayerInputs, scale: float) -> ScoreTerms:
        q_len, k_len = inputs.q.shape[-2], inputs.k.shape[-2]
        offset = int(inputs.q_pos[0]) if inputs.q_pos.numel() else 0
        ctx = self._score_context(q_len, k_len, offset, inputs.q.device)
        terms: ScoreTerms = self.spec.fn(self.params, inputs, ctx)
        return terms

    def score_term(self, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, x: torch.Tensor | None) -> Any:
        inputs = LayerInputs(q=q, k=k, q_pos=pos, k_pos=pos, mask=future_mask(pos, pos), x=x)
        terms = self.score_terms(inputs, 1.0 / math.sqrt(q.shape[-1]))
        if terms.value_table is not None:
            return NO_FLEX_FORM  # a value-side term is outside what a score_mod can add
        # the method's logits less FlexAttention's own scale·q·kᵀ: (B, H, T, T)
        extra = terms.logits - torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])

        def add_term(score: Any, b: Any, h: Any, i: Any, j: Any) -> Any:
            return score + extra[b, h, i, j]

        return add_term

    def fast_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self._on_path(q, k, v, x, super().fast_attend)

    def span_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self._on_path(q, k, v, x, super().span_attend)

    def _on_path(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor | None, materialised: Any
    ) -> torch.Tensor:
        """The layer's attention on the table's path; ``materialised`` (the base class's causal or span form)
        where it chose that. The other two read the layer's reach themselves."""
        path = self.training_path(q.shape[-2], q.device)
        if path == "flex":
            return self._flex(q, k, v, x)
        if path == "sdpa_mask":
            return self.dense_term_attend(q, k, v, x)
        out: torch.Tensor = materialised(q, k, v, x=x)
        return out

    def dense_term_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor | None
    ) -> torch.Tensor:
        """Causal self-attention (B, H, T, d) at positions arange(T) through ``scaled_dot_product_attention``, the
        method's logits less scale·q·kᵀ as its dense mask (B, H, T, T), −inf out of the layer's reach."""
        pos = positions(q.shape[-2], q.device)
        q, k = self.rotate(q, k, pos, pos)
        mask = self._token_mask(q)  # (1, 1, T, T), True out of reach
        scale = 1.0 / math.sqrt(q.shape[-1])
        terms = self.score_terms(LayerInputs(q=q, k=k, q_pos=pos, k_pos=pos, mask=mask, x=x), scale)
        term = terms.logits - torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, H, T, T)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=term.masked_fill(mask, float("-inf")).to(q.dtype))


class AttentionApplier(ScoreModApplier):
    """Methods that replace the softmax (stick-breaking, DA-Transformer): the method returns the weights."""

    def score_terms(self, inputs: LayerInputs, scale: float) -> ScoreTerms:
        # the weights are the method's; logits are only what the statistics and the fully-masked test read
        return ScoreTerms(torch.matmul(inputs.q, inputs.k.transpose(-1, -2)) * scale)

    @property
    def keeps_leftover(self) -> bool:
        return True

    def score_term(self, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, x: torch.Tensor | None) -> Any:
        return NO_FLEX_FORM

    def normalise(self, logits: torch.Tensor, inputs: LayerInputs) -> AttentionWeights:
        q_len, k_len = inputs.q.shape[-2], inputs.k.shape[-2]
        offset = int(inputs.q_pos[0]) if inputs.q_pos.numel() else 0
        ctx = self._score_context(q_len, k_len, offset, inputs.q.device)
        weights: AttentionWeights = self.spec.fn(self.params, inputs, ctx)
        if weights.leftover is None:  # rows sum to 1 (or are empty): report the mass given to no key as such
            leftover = (1.0 - weights.weights.sum(dim=-1)).clamp_min(0.0)  # (B, H, Nq)
            empty = inputs.mask.expand(weights.weights.shape).all(dim=-1)  # (B, H, Nq)
            return replace(weights, leftover=leftover.masked_fill(empty, 0.0))
        return weights


_APPLIERS: dict[Kind, type[Applier]] = {
    Kind.ABSOLUTE: AbsoluteApplier,
    Kind.BIAS: BiasApplier,
    Kind.ROTARY: RotaryApplier,
    Kind.SCORE_MOD: ScoreModApplier,
    Kind.ATTENTION: AttentionApplier,
}


def build_applier(spec: MethodSpec, params: MethodParams, layer: Layer, cache: dict[Any, Any] | None = None) -> Applier:
    """The applier of ``spec``'s kind for ``layer`` (see the module docstring)."""
    return _APPLIERS[spec.kind](spec, params, layer, cache)


def bias_applier(spec: MethodSpec, params: MethodParams, layer: Layer) -> BiasApplier:
    """The applier of a bias method, for callers that want the bias itself (``POST /v1/bias`` on a grid)."""
    applier = build_applier(spec, params, layer)
    if not isinstance(applier, BiasApplier):
        raise InvalidInput(("method",), f"{spec.name!r} is a {spec.kind.value} method, not a bias one")
    return applier


def rotary_applier(spec: MethodSpec, params: MethodParams, layer: Layer) -> RotaryApplier:
    """The applier of a rotary method, for callers that rotate without attending (``POST /v1/rotary``)."""
    applier = build_applier(spec, params, layer)
    if not isinstance(applier, RotaryApplier):
        raise InvalidInput(("method",), f"{spec.name!r} is a {spec.kind.value} method, not a rotary one")
    applier.check_pairing()
    return applier
