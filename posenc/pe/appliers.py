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

``fast_attend`` is the training model's entry: absolute, rotary and bias methods go through
``torch.nn.functional.scaled_dot_product_attention`` (a bias as its additive mask); on CUDA, bias and score_mod
methods go through ``torch.nn.attention.flex_attention`` (``flex_attend``: the method's score term as its
score_mod, causality as its block mask); content methods on the CPU through the materialised ``attend`` (this
torch's FlexAttention has no backward on the CPU). Every path gives the same output (tested).

Errors are reported relative to the method's own inputs, ``("params", "base")``, ``("q", "shape")``,
``("x",)``; each caller adds its prefix (``body`` in the gateway, ``spec.methods[i]`` in jobs).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
import torch.nn.functional as F

from posenc.errors import InvalidInput
from posenc.pe.kinds import (
    apply_rotary,
    bias_dense,
    bias_toeplitz,
    encoding,
    rotary_frequencies,
    rotary_tables,
    xpos_scale,
)
from posenc.pe.ops import Pairing
from posenc.pe.registry import MethodParams, MethodSpec
from posenc.pe.types import (
    AbsoluteContext,
    AttentionWeights,
    BiasContext,
    LayerInputs,
    RotaryContext,
    RotaryFrequencies,
    ScoreContext,
    ScoreTerms,
)
from posenc.schemas.methods import Kind


@dataclass(frozen=True)
class Layer:
    """The attention layer a method is applied to."""

    num_heads: int
    head_dim: int
    causal: bool
    model_dim: int | None = None  # the layer input's width; H · head_dim unless given
    pairing: Pairing = "half"  # rotary methods: which features form a pair
    rotary_dim: int | None = None  # rotary methods: rotate the first rotary_dim features (default: all)
    dtype: torch.dtype = torch.float32  # the compute dtype of tables and scores
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def width(self) -> int:
        return self.model_dim if self.model_dim is not None else self.num_heads * self.head_dim


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


def future_mask(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """True where key j is in the future of query i (k_pos[j] > q_pos[i]): (1, 1, Nq, Nk) bool."""
    return (k_pos[None, :] > q_pos[:, None])[None, None]


META = torch.device("meta")


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
        missing = [name for name, given in (("x", has_x), ("v", has_v)) if name in self.spec.needs and not given]
        if missing:
            raise InvalidInput(
                (missing[0],),
                f"{self.spec.name!r} reads the layer input {missing[0]!r}; give it",
            )

    @property
    def materialises_scores(self) -> bool:
        """Whether the method needs the (B, H, Nq, Nk) scores in memory (no fused kernel path)."""
        return False

    @property
    def keeps_leftover(self) -> bool:
        """Whether ``attend`` reports a leftover (B, H, Nq): the mass of each row given to no key."""
        return False

    def extra_workspace_elements(self, batch: int, q_len: int, k_len: int) -> int:
        """Elements the method allocates beyond q, k, scores and weights (counted against the budget)."""
        return 0

    # ---- the hooks, in the order a layer calls them
    def embed(self, t: torch.Tensor, pos: torch.Tensor, seq_len: int | None = None) -> torch.Tensor:
        """t (..., N, D) with the method's absolute encoding at ``pos`` (N,) added, the encoding built for a
        sequence of ``seq_len`` (default max(pos) + 1); unchanged by default."""
        return t

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
    ) -> Attended:
        """Materialised attention of q (B, H, Nq, D) over k (B, H, Nk, D) with every hook applied.

        ``mask`` (B or 1, 1, Nq, Nk) bool, True = never attended (the causal future included: build it with
        ``future_mask``). ``x`` (B, Nk, D_model) is the layer input for methods that read it.
        """
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
        """Apply the method once on zeros, so its own checks fire before a job is queued: one query at position
        ``longest`` − 1 against ``longest`` keys sees every distance the job will, at O(longest) cost."""
        device = torch.device("cpu")
        k_pos = positions(longest, device)
        q_pos = k_pos[-1:]  # (1,): the last position
        heads, head_dim = self.layer.num_heads, self.layer.head_dim
        q = torch.zeros(1, heads, 1, head_dim, dtype=self.layer.dtype)  # (1, H, 1, d)
        k = torch.zeros(1, heads, longest, head_dim, dtype=self.layer.dtype)  # (1, H, T, d)
        x = torch.zeros(1, longest, self.layer.width, dtype=self.layer.dtype)  # (1, T, D_model)
        mask = future_mask(q_pos, k_pos)  # (1, 1, 1, T): nothing is in the last query's future
        state = self.initial_state(1, longest, device)
        self.attend(q, k, k, q_pos=q_pos, k_pos=k_pos, mask=mask, x=x, state=state)

    # ---- model-coupled methods: a position state threaded through the layers (TAPE); None for the others
    def initial_state(self, batch: int, length: int, device: torch.device) -> Any:
        """The state entering the first layer for a batch of ``length`` tokens, or None."""
        if self.spec.state_init is None:
            return None
        ctx = replace(self._score_context(length, length, 0), device=device)
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
        """The state after a feed-forward sublayer whose input is ``x`` (B, T, D_model)."""
        if state is None or self.spec.state_ffn is None:
            return state
        return self.spec.state_ffn(self.params, x, state)

    def layer_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None, state: Any = None
    ) -> tuple[torch.Tensor, Any]:
        """The training model's call: causal self-attention output (B, H, T, d) and the state leaving the layer.
        Without a state, ``fast_attend``; with one, the materialised path (the update reads the weights)."""
        if state is None:
            return self.fast_attend(q, k, v, x=x), None
        pos = positions(q.shape[-2], q.device)
        attended = self.attend(q, k, v, q_pos=pos, k_pos=pos, mask=future_mask(pos, pos), x=x, state=state)
        assert attended.output is not None
        return attended.output.to(v.dtype), attended.state

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
        block_mask = _causal_block_mask(length, device, create_block_mask)
        if device.type == "cuda":
            out: torch.Tensor = _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=block_mask)
            return out
        with warnings.catch_warnings():
            # eager on purpose (a CPU compile costs tens of seconds per shape); it warns that it is unfused
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            eager: torch.Tensor = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
        return eager

    # ---- what learned_init gets
    def init_context(self, length: int) -> Any:
        """The context this kind's ``learned_init`` takes, for a model trained at ``length``."""
        return self._score_context(length, length, 0)

    def _score_context(self, q_len: int, k_len: int, query_offset: int) -> ScoreContext:
        return ScoreContext(
            num_heads=self.layer.num_heads,
            query_length=q_len,
            key_length=k_len,
            head_dim=self.layer.head_dim,
            causal=self.layer.causal,
            model_dim=self.layer.width,
            dtype=self.layer.dtype,
            query_offset=query_offset,
            device=self.layer.device,
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


_BLOCK_MASKS: dict[tuple[int, str], Any] = {}


def _causal_block_mask(length: int, device: torch.device, create_block_mask: Any) -> Any:
    """FlexAttention's block mask of causal self-attention, built once per (length, device)."""
    key = (length, str(device))
    if key not in _BLOCK_MASKS:

        def causal(b: Any, h: Any, i: Any, j: Any) -> Any:
            return i >= j

        _BLOCK_MASKS[key] = create_block_mask(causal, None, None, length, length, device=device)
    return _BLOCK_MASKS[key]


def flex_available(device: torch.device) -> bool:
    """Whether FlexAttention trains on ``device`` in this torch: CUDA only (no CPU backward in torch 2.13)."""
    if device.type != "cuda":
        return False
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def _sequence_length(q_pos: torch.Tensor, k_pos: torch.Tensor) -> int:
    """max position + 1 over queries and keys: the length tables and dynamic scalings are built for."""
    if q_pos.numel() + k_pos.numel() == 0:
        return 0
    return int(torch.cat((q_pos, k_pos)).max()) + 1


def _own_values(v: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """v at each query's own position: (B, H, Nq, Dv); zero for a query whose position is not among the keys."""
    match = q_pos[:, None] == k_pos[None, :]  # (Nq, Nk)
    return torch.matmul(match.to(v.dtype), v)  # (B, H, Nq, Dv)


class AbsoluteApplier(Applier):
    """P (N, D) added where the token embedding is (the model) or to q and k of every head (/v1/attention)."""

    def embed(self, t: torch.Tensor, pos: torch.Tensor, seq_len: int | None = None) -> torch.Tensor:
        length = seq_len if seq_len is not None else _sequence_length(pos, pos[:0])
        table = self.table(length, t.shape[-1], t.device)  # (N, D)
        return t + table[pos].to(t.dtype)

    def table(self, length: int, dim: int, device: torch.device) -> torch.Tensor:
        """P (length, dim) in the layer's compute dtype (cached per length: P depends only on it)."""
        ctx = AbsoluteContext(grid=(length,), dim=dim, dtype=self.layer.dtype, device=device)
        table: torch.Tensor = self._cached(
            ("absolute", length, dim, str(device)), lambda: encoding(self.spec, self.params, ctx)
        )
        return table

    def init_context(self, length: int) -> Any:
        return AbsoluteContext(grid=(length,), dim=self.layer.width)

    def dry_run(self, longest: int) -> None:
        # On the meta device: the method's own checks run (a learned table must cover the longest sequence)
        # without allocating the (T, D) table, which at T = 3·2^20, D = 8192 would be 100 GB.
        encoding(self.spec, self.params, AbsoluteContext(grid=(longest,), dim=self.layer.width, device=META))

    def fast_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # P was added to the embeddings


class BiasApplier(Applier):
    """B (H, Nq, Nk) from ``bias_dense`` added to the scaled scores (the ALiBi/T5 convention). With a causal
    layer the bias itself is −inf at future keys."""

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The unmasked bias at these positions: (H, Nq, Nk) in the layer's compute dtype."""
        ctx = BiasContext(
            num_heads=self.layer.num_heads,
            query_length=q_pos.shape[0],
            key_length=k_pos.shape[0],
            causal=self.layer.causal,  # some methods differ by direction (T5's buckets); −inf in the future
            dtype=self.layer.dtype,
            query_offset=int(q_pos[0]) if q_pos.numel() else 0,
            device=q_pos.device,
        )
        return bias_dense(self.spec, self.params, ctx, q_pos, k_pos)  # (H, Nq, Nk)

    def score_terms(self, inputs: LayerInputs, scale: float) -> ScoreTerms:
        scores = torch.matmul(inputs.q, inputs.k.transpose(-1, -2)) * scale  # (B, H, Nq, Nk)
        return ScoreTerms(scores + self.bias(inputs.q_pos, inputs.k_pos).to(scores.dtype))  # after the scale

    def extra_workspace_elements(self, batch: int, q_len: int, k_len: int) -> int:
        return self.layer.num_heads * q_len * k_len

    def init_context(self, length: int) -> Any:
        return BiasContext(num_heads=self.layer.num_heads, query_length=length, key_length=length, causal=True)

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

        if flex_available(device):
            out = self.flex_attend(q, k, v, x=x)
            assert out is not None
            return out
        mask = self._cached(("causal_bias", length, str(device)), build)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype))  # (H, T, T) broadcasts


class RotaryApplier(Applier):
    """q and k rotated by their positions; xPos also scales q by ζ^(n/λ) and k by its reciprocal."""

    @property
    def rotary_dim(self) -> int:
        return self.layer.rotary_dim if self.layer.rotary_dim is not None else self.layer.head_dim

    def check(self, *, has_x: bool = True, has_v: bool = True) -> None:
        super().check(has_x=has_x, has_v=has_v)
        if self.layer.rotary_dim is None and self.layer.head_dim % 2:
            raise InvalidInput(
                ("q", "shape"),
                f"rotary methods rotate pairs of features, so the head dim must be even; got D={self.layer.head_dim}",
            )

    def frequencies(self, seq_len: int, device: torch.device) -> RotaryFrequencies:
        """The method's frequencies for a context of ``seq_len`` (dynamic scalings read it)."""
        return rotary_frequencies(
            self.spec, self.params, RotaryContext(rotary_dim=self.rotary_dim, seq_len=seq_len, device=device)
        )

    def tables(
        self, pos: torch.Tensor, seq_len: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, RotaryFrequencies]:
        """(cos, sin, xPos scale or None, frequencies) at ``pos`` (N,) or (N, A): tables (N, d_rot/2)."""
        freqs = self.frequencies(seq_len, pos.device)
        cos, sin = rotary_tables(freqs, pos, self.layer.dtype)  # (N, d_rot/2) each
        return cos, sin, xpos_scale(freqs, pos, self.layer.dtype), freqs

    def rotate_side(self, t: torch.Tensor, pos: torch.Tensor, seq_len: int, *, keys: bool) -> torch.Tensor:
        """One side rotated in the layer's compute dtype: queries scaled by ζ^(n/λ), keys by its reciprocal."""
        cos, sin, scale, _ = self.tables(pos, seq_len)
        if keys and scale is not None:
            scale = 1.0 / scale
        return apply_rotary(t.to(cos.dtype), cos, sin, pairing=self.layer.pairing, scale=scale)

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # one context for both sides: dynamic scalings and xPos's centre see every position either side has
        seq_len = _sequence_length(q_pos, k_pos)
        return (
            self.rotate_side(q, q_pos, seq_len, keys=False).to(q.dtype),
            self.rotate_side(k, k_pos, seq_len, keys=True).to(k.dtype),
        )

    def init_context(self, length: int) -> Any:
        return RotaryContext(rotary_dim=self.rotary_dim, seq_len=length)

    def fast_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        length, device = q.shape[-2], q.device

        def build() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
            cos, sin, scale, _ = self.tables(positions(length, device), length)  # (T, d_rot/2) each
            return cos, sin, scale

        cos, sin, scale = self._cached(("rotary", length, str(device)), build)
        pairing = self.layer.pairing
        q = apply_rotary(q, cos, sin, pairing=pairing, scale=scale)
        k = apply_rotary(k, cos, sin, pairing=pairing, scale=None if scale is None else scale.reciprocal())
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


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
        terms: ScoreTerms = self.spec.fn(self.params, inputs, self._score_context(q_len, k_len, offset))
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
        if flex_available(q.device):
            out = self.flex_attend(q, k, v, x=x)
            if out is not None:
                return out
        return super().fast_attend(q, k, v, x=x)


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
        weights: AttentionWeights = self.spec.fn(self.params, inputs, self._score_context(q_len, k_len, offset))
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


def rotary_applier(spec: MethodSpec, params: MethodParams, layer: Layer) -> RotaryApplier:
    """The applier of a rotary method, for callers that rotate without attending (``POST /v1/rotary``)."""
    applier = build_applier(spec, params, layer)
    if not isinstance(applier, RotaryApplier):
        raise InvalidInput(("method",), f"{spec.name!r} is a {spec.kind.value} method, not a rotary one")
    return applier
