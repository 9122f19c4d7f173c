"""Layer patterns: the per-layer positional setups real models ship, as a repeating unit tiled over a model's layers.

A job's method entry may carry ``layers`` (a unit of per-layer setups written out) or ``pattern`` (one of the
named units below). Each layer of the unit inherits the entry's ``method`` and ``params`` and may change them,
rotate only a fraction of the head (partial rotary), limit its attention span (a sliding ``window`` of the last
w keys, or a ``chunk``: blocks of c tokens that see only their own block) and multiply its queries by Llama 4's
position-dependent temperature. Layer ℓ of an L-layer model takes unit[ℓ mod len(unit)].

The real models' spans are thousands of tokens (Gemma 3: 1024, Llama 4: 8192); a tiny model trains on tens. A
named pattern's spans therefore follow one stated rule, ``local_span``: a quarter of the training length, at
least 4 tokens, so a local layer sees less than its training context and far less than the evaluation lengths,
as in the real models. Llama 4's temperature floor scale is its chunk size (8192 = 8192 there), kept here.

A real model's config (or a preset) becomes a unit by :func:`config_unit`, from the per-layer setup
``/v1/models/resolve`` gives (``posenc.real_models.configs.resolve_config``), by the rule stated there: methods, θ,
scaling factors, rotated shares, NoPE layers and the temperature's attn_scale kept; the lengths scaled to the
tiny model's training length; the unit the shortest period of the layers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posenc.real_models.configs import LayerRope

LOCAL_SPAN_FRACTION = 0.25  # a named pattern's local span, as a fraction of the training length
MIN_LOCAL_SPAN = 4
LLAMA4_ATTN_SCALE = 0.1  # Llama 4's attn_scale (its config); floor_scale = the chunk size, as in the config


@dataclass(frozen=True)
class LayerSetup:
    """One layer's positional setup, resolved: what the training model builds that layer with."""

    method: str
    params: dict[str, Any] = field(default_factory=dict)
    rotary_fraction: float = 1.0  # the share of the head's features rotated (rotary methods)
    window: int | None = None  # sliding window: query i sees keys i − w + 1 .. i
    chunk: int | None = None  # chunked attention: query i sees keys of its own block of c tokens, up to i
    # the query temperature (floor_scale, attn_scale, position_offset): Llama 4's, offset 1; Mistral 3's, offset 0
    temperature: tuple[float, float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "params": dict(self.params),
            "rotary_fraction": self.rotary_fraction,
            "window": self.window,
            "chunk": self.chunk,
            "temperature": None if self.temperature is None else list(self.temperature),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LayerSetup:
        temperature = data.get("temperature")
        return cls(
            method=data["method"],
            params=dict(data.get("params") or {}),
            rotary_fraction=float(data.get("rotary_fraction", 1.0)),
            window=data.get("window"),
            chunk=data.get("chunk"),
            temperature=_temperature(temperature),
        )


@dataclass(frozen=True)
class Pattern:
    """A named unit: ``unit(span)`` gives the unit's layer overrides for a local span of ``span`` tokens."""

    name: str
    model: str  # the models that ship it
    description: str
    unit: Callable[[int], list[dict[str, Any]]]


def local_span(train_length: int) -> int:
    """A named pattern's local window or chunk for a model trained on ``train_length`` tokens."""
    return max(MIN_LOCAL_SPAN, int(train_length * LOCAL_SPAN_FRACTION))


PATTERNS: dict[str, Pattern] = {
    pattern.name: pattern
    for pattern in (
        Pattern(
            "llama4",
            "Llama 4 (Scout, Maverick)",
            "3 chunked RoPE layers : 1 global NoPE layer whose queries take the temperature "
            "log(1 + floor((n + 1)/floor_scale))·0.1 + 1 (no_rope_layers, attention_chunk_size, "
            "attn_temperature_tuning; floor_scale = the chunk)",
            lambda span: (
                [{"chunk": span}] * 3 + [{"method": "nope", "params": {}, "temperature": (span, LLAMA4_ATTN_SCALE)}]
            ),
        ),
        Pattern(
            "gemma3",
            "Gemma 3",
            "5 local RoPE layers (sliding window, θ = 10,000) : 1 global RoPE layer (θ = 1,000,000) "
            "(sliding_window_pattern 6, rope_local_base_freq, rope_theta)",
            lambda span: [{"window": span, "params": {"base": 10_000.0}}] * 5 + [{"params": {"base": 1_000_000.0}}],
        ),
        Pattern(
            "gemma4",
            "Gemma 4",
            "5 local RoPE layers (sliding window, θ = 10,000) : 1 global p-RoPE layer (θ = 1,000,000, a quarter of "
            "the pairs rotated: rope_type 'proportional', partial_rotary_factor 0.25); the 5:1 ratio is Gemma 3's",
            lambda span: (
                [{"window": span, "params": {"base": 10_000.0}}] * 5
                + [{"method": "rope_proportional", "params": {"base": 1_000_000.0, "rotated_fraction": 0.25}}]
            ),
        ),
        Pattern(
            "command_a",
            "Cohere Command A",
            "3 sliding-window RoPE layers : 1 global NoPE layer",
            lambda span: [{"window": span}] * 3 + [{"method": "nope", "params": {}}],
        ),
        Pattern(
            "smollm3",
            "SmolLM3",
            "RoPE everywhere except every 4th layer, which has none (no_rope_layers); full attention in all",
            lambda span: [{}] * 3 + [{"method": "nope", "params": {}}],
        ),
        Pattern(
            "partial_0.25",
            "GPT-J, GPT-NeoX (rotary_dim 64 of 256, rotary_pct 0.25)",
            "every layer rotates the first quarter of each head's features; the rest carry no position",
            lambda span: [{"rotary_fraction": 0.25}],
        ),
        Pattern(
            "partial_0.5",
            "GLM-4 (partial_rotary_factor 0.5)",
            "every layer rotates the first half of each head's features",
            lambda span: [{"rotary_fraction": 0.5}],
        ),
        Pattern(
            "qwen3_next",
            "Qwen3-Next",
            "its full-attention layers only (every 4th layer there; the linear-attention layers are left out): "
            "partial rotary 0.25 at θ = 10,000,000",
            lambda span: [{"rotary_fraction": 0.25, "params": {"base": 10_000_000.0}}],
        ),
    )
}


def unit_overrides(pattern: str | None, layers: Sequence[Mapping[str, Any]] | None, span: int) -> list[dict[str, Any]]:
    """The unit's per-layer overrides: the named pattern's at ``span``, or the given layers; [{}] for neither."""
    if pattern is not None:
        return PATTERNS[pattern].unit(span)
    if layers is not None:
        return [dict(layer) for layer in layers]
    return [{}]


def resolve_layers(
    method: str, params: Mapping[str, Any], overrides: Sequence[Mapping[str, Any]], num_layers: int
) -> list[LayerSetup]:
    """Every layer's setup: unit[ℓ mod len(unit)] over the entry's method and params. A layer that names another
    method starts from empty params (the entry's belong to its method); one that keeps the method merges its
    params over the entry's."""
    resolved = []
    for index in range(num_layers):
        override = overrides[index % len(overrides)]
        layer_method = override.get("method") or method
        base = dict(params) if layer_method == method else {}
        temperature = override.get("temperature")
        resolved.append(
            LayerSetup(
                method=layer_method,
                params={**base, **dict(override.get("params") or {})},
                rotary_fraction=float(override.get("rotary_fraction") or 1.0),
                window=override.get("window"),
                chunk=override.get("chunk"),
                temperature=_temperature(temperature),
            )
        )
    return resolved


def _temperature(value: Sequence[float] | None) -> tuple[float, float, float] | None:
    """(floor_scale, attn_scale, position_offset) from a list of two (Llama 4's offset 1 implied) or three."""
    if value is None:
        return None
    offset = float(value[2]) if len(value) > 2 else 1.0
    return float(value[0]), float(value[1]), offset


# Keys of a rotary method's params that are lengths of the source model's context, scaled to the tiny model's.
CONTEXT_LENGTH_KEYS = ("original_max_position_embeddings", "max_position_embeddings")


def config_unit(layers: Sequence[LayerRope], train_length: int) -> list[dict[str, Any]]:
    """The unit a tiny decoder trained on ``train_length`` tokens takes from a real model's resolved layers.

    The rule, per layer: its method, θ and scaling params as the config resolves them; a NoPE layer stays NoPE;
    the rotated share ``rotary_dim / head_dim`` (the tiny model's head dim is its own, the share is kept); the
    context lengths in its params (``original_max_position_embeddings``, ``max_position_embeddings``) scaled by
    ``train_length / original`` (original: the first of them the params hold), so a Llama 3 or YaRN band sits at
    the same fraction of the training context; a sliding window or chunk becomes ``local_span(train_length)``,
    as in the named patterns; Llama 4's temperature keeps its attn_scale, its floor scale becomes that span
    (it is the chunk size there). The unit is the shortest period p with layer ℓ = layer ℓ mod p for every
    layer of the source (one layer for a uniform model, 6 for Gemma 3), tiled over the tiny model's layers."""
    span = local_span(train_length)
    rows = [_tiny_layer(layer, train_length, span) for layer in layers]
    period = next(p for p in range(1, len(rows) + 1) if all(rows[i] == rows[i % p] for i in range(len(rows))))
    return rows[:period]


def _tiny_layer(layer: LayerRope, train_length: int, span: int) -> dict[str, Any]:
    row: dict[str, Any] = {"method": layer.method or "nope", "params": {}}
    if layer.method is not None:
        params = dict(layer.params)
        original = next((params[key] for key in CONTEXT_LENGTH_KEYS if params.get(key)), None)
        if original:
            for key in CONTEXT_LENGTH_KEYS:
                if key in params:
                    params[key] = max(1, round(params[key] * train_length / original))
        row["params"] = params
        if layer.rotary_dim < layer.head_dim:
            row["rotary_fraction"] = layer.rotary_dim / layer.head_dim
    if layer.window is not None:
        row["window"] = span
    if layer.chunk is not None:
        row["chunk"] = span
    if layer.query_temperature is not None:
        tuning = layer.query_temperature
        row["temperature"] = (float(span), float(tuning["attn_scale"]), float(tuning.get("position_offset", 1.0)))
    return row
