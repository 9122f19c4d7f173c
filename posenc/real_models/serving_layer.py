"""One attention layer's use of positions, as the serving simulator runs it: a registered method's applier, or a
config's layer (a NoPE layer included, with Llama 4's query temperature where it has one), and the rotary state
transformers keeps between calls for its dynamic scaling.

``ServingLayer.encode`` rotates q and k for a call whose length is max position + 1 (what dynamic scalings read),
or for a length given (the length transformers' state or a batch imposes). ``TransformersRotaryState`` is the
state of a transformers rotary embedding across forward calls (transformers modeling_rope_utils.py,
``dynamic_rope_update``): for ``rope_type="dynamic"`` the frequencies grow with the longest call seen and go back
to the original ones only when a call is shorter than the original max position; every other method reads each
call's own length.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from pydantic import ValidationError

from posenc.errors import InvalidInput, Loc, located
from posenc.pe import get_method
from posenc.pe.appliers import Applier, Layer, RotaryApplier, build_applier
from posenc.pe.ops import Pairing
from posenc.pe.registry import UnknownMethodError
from posenc.pe.types import LayerInputs
from posenc.real_models.configs import query_temperature, requested_layer

MAX_HEADS = 64
MAX_DIM = 8192


@dataclass(frozen=True)
class ServingLayer:
    """One attention layer's use of positions: ``applier`` (a method's hooks; None for a NoPE layer), ``heads``
    and ``dim`` (features of q and k per head: the rotated width of a rotary setup, else the head width), the
    query ``temperature`` (floor_scale, attn_scale, position_offset: Llama 4's, Mistral 3's) where the layer has
    one, whether the registry says the rotation depends on the length, and ``dynamic_original``: the original
    max position of a method transformers spells ``rope_type="dynamic"`` (its rotary keeps state between calls;
    None otherwise), and ``slot_temperature``: transformers takes this layer's query temperature from the cache
    slots rather than the position ids (Llama 4's NoPE layers). ``source`` is its echo."""

    source: dict[str, Any]
    heads: int
    dim: int
    applier: Applier | None = field(default=None, compare=False)
    temperature: tuple[float, float, float] | None = None
    length_dependent: bool = False
    dynamic_original: int | None = None
    slot_temperature: bool = False

    def to_json(self) -> dict[str, Any]:
        return {**self.source, "heads": self.heads, "dim": self.dim, "length_dependent": self.length_dependent}

    def encode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        length: int | None = None,
        temperature_pos: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q (H, Nq, d) and k (H, Nk, d) as the layer attends with them at positions (Nq,), (Nk,): the applier's
        rotate hook (tables for a sequence of max position + 1, or of ``length`` where given: the length a
        batch or transformers' state imposes on the call), then τ(p) on the queries (at ``temperature_pos``
        where given: the slots transformers takes it from). float64."""
        if isinstance(self.applier, RotaryApplier) and length is not None:
            # the same two calls as the applier's rotate hook, for the length given instead of the positions'
            q = self.applier.rotate_side(q, q_pos, length, keys=False).to(q.dtype)
            k = self.applier.rotate_side(k, k_pos, length, keys=True).to(k.dtype)
        elif self.applier is not None:  # (bias methods read no length)
            q, k = self.applier.rotate(q, k, q_pos, k_pos)
        if self.temperature is not None:
            at = q_pos if temperature_pos is None else temperature_pos
            q = q * query_temperature(at, *self.temperature)[None, :, None]  # (H, Nq, d)
        return q, k

    def position_term(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The part of the logits positions alone give, (H, Nq, Nk): the applier's score hook on zero content
        (a bias method's B, −inf in the causal future; 0 for rotary methods and NoPE)."""
        shape = (self.heads, q_pos.shape[0], k_pos.shape[0])
        if self.applier is None:
            return torch.zeros(shape, dtype=torch.float64)
        inputs = LayerInputs(
            q=torch.zeros(1, self.heads, shape[1], 1, dtype=torch.float64),  # (1, H, Nq, 1)
            k=torch.zeros(1, self.heads, shape[2], 1, dtype=torch.float64),  # (1, H, Nk, 1)
            q_pos=q_pos,
            k_pos=k_pos,
            mask=torch.zeros(1, 1, shape[1], shape[2], dtype=torch.bool),
        )
        return self.applier.score_terms(inputs, 1.0).logits[0].to(torch.float64)  # (H, Nq, Nk)

    def logits(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """ℓ = ⟨q', k'⟩ + b(p_i, p_j): (H, Nq, Nk) from encoded q (H, Nq, d), k (H, Nk, d)."""
        return _dot(q, k) + self.position_term(q_pos, k_pos)


def _dot(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """⟨q_i, k_j⟩ per head, (H, Nq, Nk), one batched matrix product of contiguous operands. A product's kernel
    (and so each entry's summation order) depends on the shapes, never on the other entries' values: the
    reference and every variant compute each block with the same shapes, so an entry whose q and k carry the same
    bits gets the same bits."""
    return torch.matmul(q.contiguous(), k.contiguous().transpose(-1, -2))


def count_argument(value: Any, loc: Loc, *, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(loc, f"must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidInput(loc, f"must be at most {maximum}, got {value}")
    return value


def _method_applier(method: str, params: Mapping[str, Any], dim: int, pairing: Pairing | None, heads: int) -> Applier:
    """The applier of ``method`` on a causal float64 layer of ``heads`` x ``dim``, for methods whose logits are a
    function of q, k and positions alone. Errors at ("method",), ("params", …), ("rotary_dim",)."""
    try:
        spec = get_method(method)
    except UnknownMethodError as exc:
        raise InvalidInput(("method",), str(exc)) from None
    if spec.axes != 1:
        raise InvalidInput(("method",), f"{method!r} encodes {spec.axes}-axis positions; serving runs 1D sequences")
    if spec.needs:
        raise InvalidInput(("method",), f"{method!r} reads {sorted(spec.needs)} besides q, k and the positions")
    try:
        parsed = spec.parse_params(dict(params))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput(("params", *first["loc"]), str(first["msg"]).removeprefix("Value error, ")) from None
    layer = Layer(num_heads=heads, head_dim=dim, causal=True, pairing=pairing, dtype=torch.float64)
    applier = build_applier(spec, parsed, layer)
    if not applier.inside_attention or applier.materialises_scores:
        raise InvalidInput(
            ("method",),
            f"{method!r} is not applied by rotating q and k or adding a score term of the positions (absolute "
            "encodings act on the embeddings, content methods on the layer input): nothing to schedule here",
        )
    applier.check_pairing()
    with located(("rotary_dim",)):
        applier.check(has_x=False, has_v=False)
    return applier


def serving_layer(
    method: str | None,
    params: Mapping[str, Any],
    rotary_dim: int,
    pairing: Pairing | None,
    config: Mapping[str, Any] | str | None = None,
    layer: int | None = None,
    *,
    heads: int = 4,
) -> ServingLayer:
    """A method with its params (``rotary_dim``: q and k features per head, rotated or not; ``pairing`` for
    rotary methods) or a model config's layer (``config_layer``; a NoPE layer is accepted, with Llama 4's query
    temperature where it has one), on ``heads`` heads."""
    count = count_argument(heads, ("heads",), maximum=MAX_HEADS)
    resolved = requested_layer(method, config, layer)
    if resolved is None:
        assert method is not None  # (requested_layer refuses neither)
        dim = count_argument(rotary_dim, ("rotary_dim",), minimum=2, maximum=MAX_DIM)
        applier = _method_applier(method, params, dim, pairing, count)
        source = {"method": method, "params": dict(params), "rotary_dim": dim, "pairing": applier.pairing}
        spec = get_method(method)
        length_dependent = spec.depends_on_length(params)
        return ServingLayer(source, count, dim, applier, None, length_dependent, _dynamic_original(applier))
    tuning = resolved.query_temperature
    temperature = None
    if tuning is not None:
        offset = float(tuning.get("position_offset", 1.0))
        temperature = (float(tuning["floor_scale"]), float(tuning["attn_scale"]), offset)
    source = {
        "layer": resolved.layer,
        "layer_type": resolved.layer_type,
        "method": resolved.method,
        "params": dict(resolved.params),
        "pairing": resolved.pairing,
        "query_temperature": None if tuning is None else dict(tuning),
    }
    if resolved.method is None:  # NoPE: the whole head, no positions but the temperature's
        dim = count_argument(resolved.head_dim, ("config", "head_dim"), minimum=1, maximum=MAX_DIM)
        # a temperature on a NoPE layer is Llama 4's attn_temperature_tuning, which transformers computes from the
        # cache slots, arange(tokens) + past_seen_tokens, not from position_ids (transformers modeling_llama4.py,
        # Llama4TextAttention.forward); Mistral 3's scale, on RoPE layers, reads position_ids
        slots = temperature is not None
        return ServingLayer(source, count, dim, None, temperature, slot_temperature=slots)
    pairing_of: Pairing = "interleaved" if resolved.pairing == "interleaved" else "half"
    with located(("config",)):
        applier = _method_applier(resolved.method, resolved.params, resolved.rotary_dim, pairing_of, count)
    length_dependent = get_method(resolved.method).depends_on_length(resolved.params)
    original = _dynamic_original(applier)
    return ServingLayer(source, count, resolved.rotary_dim, applier, temperature, length_dependent, original)


def _dynamic_original(applier: Applier) -> int | None:
    """The original max position of a method transformers spells ``rope_type="dynamic"`` (dynamic NTK), whose
    rotary embedding keeps its grown frequencies between calls; None for every other method (serving runs 1D
    methods only: M-RoPE over a dynamic table is refused before this)."""
    if "dynamic" not in applier.spec.config_spellings:
        return None
    return int(applier.params.model_dump()["original_max_position_embeddings"])  # (a required param of it)


# ------------------------------------------------------------------------------------------------ transformers
@dataclass
class TransformersRotaryState:
    """A transformers rotary embedding's state across forward calls, for the layer's method.

    transformers modeling_rope_utils.py, ``dynamic_rope_update`` / ``dynamic_frequency_update``: each call reads
    ℓ = max(position_ids) + 1 over the whole batch; for ``rope_type="dynamic"`` the frequencies are recomputed
    for ℓ when ℓ exceeds the longest length cached so far (growth), and reset to the original ones when ℓ falls
    below the original max position while the cache had grown; otherwise the call keeps the frequencies of the
    cached length. The embedding starts with the original max position cached (``max_seq_len_cached`` of
    ``LlamaRotaryEmbedding.__init__``). Methods of any other rope_type carry no state: each call is rotated
    for its own ℓ (LongRoPE chooses its factors per call).
    """

    original: int | None  # ServingLayer.dynamic_original
    cached: int = field(init=False, default=0)  # max_seq_len_cached

    def __post_init__(self) -> None:
        self.cached = self.original or 0

    def call(self, length: int) -> int:
        """The length whose frequencies a call of ``length`` (max position id + 1) is rotated with."""
        if self.original is None:
            return length
        if length > self.cached:  # growth
            self.cached = length
        elif length < self.original < self.cached:  # reset
            self.cached = self.original
        return self.cached

    def calls(self, lengths: list[int]) -> list[int]:
        return [self.call(length) for length in lengths]
