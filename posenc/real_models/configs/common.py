"""What every part of the resolver shares: the layer-type names, the rope-type spellings of the registered
methods, the answer's dataclasses (``LayerRope``, ``ResolvedConfig``, ``ConfigWarning``) and the small formulas
(YaRN's mscale, Llama 4's query temperature, a layer's frequencies)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from pydantic import ValidationError

from posenc.errors import InvalidInput
from posenc.pe import RotaryContext, RotaryFrequencies, get_method, list_methods

DEFAULT_THETA = 10000.0  # what Hugging Face and vLLM assume when a config names no rope_theta
FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"
INDEXED = "indexed_attention"  # DeepSeek Sparse Attention: MLA over the keys its indexer picks
LINEAR = "linear_attention"  # Qwen3-Next's Gated DeltaNet, Kimi Linear's KDA: no attention scores, no RoPE
PER_LAYER_TYPE_KEYS = (FULL, SLIDING, CHUNKED)  # the keys of a rope dict given per layer type

# Hugging Face rope_type spellings (every spelling read) -> the registered method (each method's
# ``config_spellings`` in the registry)
ROPE_TYPE_METHODS: dict[str, str] = {
    spelling: spec.name for spec in list_methods() for spelling in spec.config_spellings
}
DEFAULT_ROPE_METHOD = ROPE_TYPE_METHODS["default"]  # what rope_type "default" (plain RoPE) names
# a method's rope dict with one more key -> another method (each method's ``config_extends``; M-RoPE: a default
# rope dict with mrope_section)
CONFIG_EXTENSIONS: dict[str, list[tuple[str, str]]] = {
    base: [(spec.config_extends[1], spec.name) for spec in list_methods() if spec.config_extends is not None
           and spec.config_extends[0] == base]
    for base in {spec.config_extends[0] for spec in list_methods() if spec.config_extends is not None}
}  # fmt: skip
# the rope-dict key whose presence turns any other 1D rotary method's dict into a composition -> (the composing
# method, the param it takes that method under) (each method's ``config_composes``; M-RoPE: a YaRN dict with
# mrope_section is M-RoPE over YaRN's table)
CONFIG_COMPOSITIONS: dict[str, tuple[str, str]] = {
    spec.config_extends[1]: (spec.name, spec.config_composes)
    for spec in list_methods()
    if spec.config_extends is not None and spec.config_composes is not None
}
# vLLM's and older spellings of a rope type -> Hugging Face's (the first of each method's ``config_spellings``)
HF_ROPE_TYPES = {
    spelling: spec.config_spellings[0] for spec in list_methods() for spelling in spec.config_spellings[1:]
}

# A method param that is Hugging Face's partial_rotary_factor read by the method itself: the rotated width stays the
# whole head and the method leaves the other pairs unrotated (transformers' proportional RoPE pads ω with zeros over
# head_dim, where every other rope type narrows the rotated slice).
FRACTION_PARAM = "rotated_fraction"
HF_PARTIAL_DEFAULT = 1.0  # transformers' default of partial_rotary_factor

ATTENTION_SINK_NOTE = (
    "attention sinks: a learned logit per head joins the softmax denominator (no value, no position), so the real "
    "keys' weights sum to less than 1; the rotation of q and k is unaffected"
)


def takes_fraction(method: str) -> bool:
    """Whether ``method`` reads partial_rotary_factor as its own ``FRACTION_PARAM``."""
    return FRACTION_PARAM in get_method(method).params_model.model_fields


def method_keys(method: str) -> tuple[str, ...]:
    """The keys of a config's rope dict that ``method`` reads, in its own param names (its ``config_keys``)."""
    return get_method(method).config_keys


@dataclass(frozen=True)
class ConfigWarning:
    code: str
    message: str
    layers: list[int]
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LayerRope:
    """One decoder layer's positional setup, in posenc's terms."""

    layer: int
    layer_type: str  # full_attention, sliding_attention, chunked_attention
    method: str | None  # a registered rotary method, or None for a NoPE layer
    params: dict[str, Any]  # in the method's own names
    head_dim: int  # features per head of q and k
    rotary_dim: int  # features rotated (0 on NoPE layers)
    rotary_slice: tuple[int, int]  # [start, stop) of the rotated features within a head
    pairing: str  # half (rotate_half) or interleaved
    attention_scale: float  # multiplies cos and sin (YaRN / LongRoPE attention factor): logits x its square
    softmax_scale: float  # the logits' multiplier before the softmax (1/sqrt(d), Gemma's, DeepSeek's mscale²)
    softmax_scale_source: str  # where that number comes from
    window: int | None = None  # sliding window (keys per query), sliding layers only
    chunk: int | None = None  # chunked attention's chunk, chunked layers only
    query_temperature: dict[str, Any] | None = None  # Llama 4's position-dependent query scaling, where it applies
    mrope_section: list[int] | None = None  # M-RoPE: pairs per (t, h, w) section
    shared_key_rope: bool = False  # MLA: one rotated key part for all heads
    indexer: LayerRope | None = None  # DeepSeek-V3.2 / GLM-5: the sparse-attention indexer's own rotation
    notes: list[str] = field(default_factory=list)  # what else the layer's attention does (gpt-oss's sinks)
    # DeepSeek-V4's compressed layers (and their indexer): besides the raw keys, compressed keys, one per
    # compress_rate tokens, entry i rotated by this same setup at position i·compress_rate
    compress_rate: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["rotary_slice"] = list(self.rotary_slice)
        if self.indexer is not None:
            data["indexer"] = self.indexer.to_json()
        return data


@dataclass(frozen=True)
class ResolvedConfig:
    model_type: str | None
    layers: list[LayerRope]
    warnings: list[ConfigWarning]

    def to_json(self) -> dict[str, Any]:
        return {
            "model_type": self.model_type,
            "layers": [layer.to_json() for layer in self.layers],
            "warnings": [asdict(warning) for warning in self.warnings],
        }


def required(value: int | None, key: str) -> int:
    """``value``, or InvalidInput at ``key`` when the config does not give it."""
    if value is None:
        raise InvalidInput((key,), "is required to resolve the rotary setup")
    return value


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature: 0.1 · mscale · ln(s) + 1 for s > 1, else 1 (DeepSeek's ``yarn_get_mscale``)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def query_temperature(
    positions: torch.Tensor, floor_scale: float, attn_scale: float, position_offset: float = 1.0
) -> torch.Tensor:
    """Llama 4's query temperature on its NoPE layers (Nakanishi 2025, "Scalable-Softmax"; Meta's Llama 4 code):
    τ(n) = log(1 + floor((n + o) / floor_scale)) · attn_scale + 1, multiplying q at position n, o = 1 (a layer's
    ``query_temperature["position_offset"]``; Mistral 3's llama_4_scaling_beta: o = 0). (N,) float64."""
    steps = torch.floor((positions.to(torch.float64) + position_offset) / floor_scale)  # (N,)
    return torch.log1p(steps) * attn_scale + 1.0


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text model's fields: ``text_config`` when the config nests one (multimodal models), else itself."""
    nested = config.get("text_config")
    if nested is None:
        return config
    if not isinstance(nested, Mapping):
        raise InvalidInput(("text_config",), "must be an object (the text model's config)")
    return nested


def rope_frequencies(method: str, params: Mapping[str, Any], rotary_dim: int, seq_len: int = 1) -> RotaryFrequencies:
    """The frequencies of ``method`` with raw ``params`` over ``rotary_dim`` features (float64), as the registry
    computes them; a bad param is InvalidInput at ("params", …)."""
    spec = get_method(method)
    try:
        parsed = spec.parse_params(dict(params))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput(("params", *first["loc"]), str(first["msg"]).removeprefix("Value error, ")) from None
    frequencies: RotaryFrequencies = spec.fn(parsed, RotaryContext(rotary_dim=rotary_dim, seq_len=seq_len))
    return frequencies


def layer_frequencies(layer: LayerRope, seq_len: int = 1) -> RotaryFrequencies:
    """The layer's rotary frequencies from its registered method (float64), at a sequence of ``seq_len``."""
    if layer.method is None:
        raise InvalidInput(("layer",), f"layer {layer.layer} is a NoPE layer: it has no rotation")
    return rope_frequencies(layer.method, layer.params, layer.rotary_dim, seq_len)
