"""Real models' rotary setups, read from their ``config.json`` as it is published.

``resolve_config`` turns a model config into one ``LayerRope`` per decoder layer: the registered rotary method
and its params (or ``None`` for a NoPE layer), the rotated features and their pairing, the attention scales,
the window, and the M-RoPE sections; plus ``ConfigWarning``s for the config patterns that are known to produce
wrong rotations silently. Pure: no I/O, no model code, nothing downloaded.

Dialects read (the facts follow Hugging Face transformers' ``modeling_rope_utils`` and model configs, and vLLM's
``rotary_embedding`` package):

- Hugging Face v4: ``rope_scaling`` (``type`` or ``rope_type``) next to a top-level ``rope_theta``;
- Hugging Face v5: ``rope_parameters`` holding ``rope_theta`` (and ``partial_rotary_factor``), flat or one dict per
  layer type (``{"full_attention": {...}, "sliding_attention": {...}}``; ``None`` for a NoPE layer type);
- multimodal nesting: the text model's fields under ``text_config``;
- per-layer attention: ``layer_types``, or Gemma's ``sliding_window_pattern`` (every n-th layer global);
  ``no_rope_layers`` (1 = rotary, 0 = NoPE; SmolLM3, Llama 4) or ``no_rope_layer_interval``;
  ``attention_chunk_size`` (Llama 4);
- Gemma 3 (v4): ``rope_local_base_freq`` is the sliding layers' θ, unscaled; ``rope_scaling`` is for the global
  layers only; ``query_pre_attn_scalar`` sets the softmax scale;
- partial rotation: ``partial_rotary_factor`` (HF), ``rotary_pct`` (GPT-NeoX), ``rotary_dim`` (GPT-J, vLLM);
- DeepSeek MLA: ``qk_rope_head_dim`` rotated features at the end of each head (after ``qk_nope_head_dim``), the
  key's rotated part shared by all heads, ``rope_interleave`` (interleaved pairs), and YaRN's mscale on the
  softmax scale: (qk_nope + qk_rope)^-1/2 · mscale(factor, mscale_all_dim)²;
- vLLM's spellings of the rope type: ``su`` (LongRoPE), ``deepseek_yarn`` (YaRN), ``mrope`` (M-RoPE sections).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from pydantic import ValidationError

from posenc.errors import InvalidInput, Loc, located
from posenc.pe import RotaryContext, RotaryFrequencies, get_method, list_methods
from posenc.real_models.config_fields import (
    MAX_HEAD_DIM,
    DiffusersFields,
    LinearAttentionFields,
    RopeFields,
    TextFields,
    check_json_value,
    read,
)
from posenc.real_models.presets import config_or_preset

DEFAULT_THETA = 10000.0  # what Hugging Face and vLLM assume when a config names no rope_theta
FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"
INDEXED = "indexed_attention"  # DeepSeek Sparse Attention: MLA over the keys its indexer picks
LINEAR = "linear_attention"  # Qwen3-Next's Gated DeltaNet, Kimi Linear's KDA: no attention scores, no RoPE

# rope_type (every spelling read) -> the registered method
# Hugging Face rope_type spellings -> the method (each method's ``config_spellings`` in the registry)
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


# A method param that is Hugging Face's partial_rotary_factor read by the method itself: the rotated width stays the
# whole head and the method leaves the other pairs unrotated (transformers' proportional RoPE pads ω with zeros over
# head_dim, where every other rope type narrows the rotated slice).
FRACTION_PARAM = "rotated_fraction"
HF_PARTIAL_DEFAULT = 1.0  # transformers' default of partial_rotary_factor


def takes_fraction(method: str) -> bool:
    """Whether ``method`` reads partial_rotary_factor as its own ``FRACTION_PARAM``."""
    return FRACTION_PARAM in get_method(method).params_model.model_fields


def method_keys(method: str) -> tuple[str, ...]:
    """The keys of a config's rope dict that ``method`` reads, in its own param names (its ``config_keys``)."""
    return get_method(method).config_keys


# model types whose rotary pairs are interleaved unless the config says rope_interleave: false (Llama 4 rotates
# complex numbers made of adjacent features; DeepSeek's rope_interleave defaults to true)
# (Kimi K2's config.json says model_type kimi_k2 for DeepSeek-V3's code: transformers' Kimi_K25Config reads its
# text_config as deepseek_v3, rope_interleave true)
INTERLEAVED_MODEL_TYPES = frozenset(
    {"llama4", "llama4_text", "deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "mistral4", "kimi_k2",
     "kimi_k25"}
)  # fmt: skip
# model types whose rotary embedding in transformers rotates the whole head whatever partial rotation the config
# asks for: for default RoPE (False: Llama's compute_default_rope_parameters and its copies; the scaled rope types'
# init functions in modeling_rope_utils do read partial_rotary_factor, and the narrowed frequencies then do not fit
# the head) or for every rope type (True: Qwen2.5-VL's text rotary)
# (Gemma 4 too, but its global layers' partial_rotary_factor is proportional RoPE's: partial_rotary_not_proportional)
WHOLE_HEAD_MODEL_TYPES: dict[str, bool] = {
    "llama": False, "llama4_text": False, "mistral": False, "qwen2": False, "qwen3": False, "qwen3_vl_text": False,
    "gemma3_text": False, "olmo3": False, "smollm3": False, "qwen2_5_vl": True,
}  # fmt: skip
# model types whose sliding-window layers are trained unscaled (their own θ), whatever the global layers use
SLIDING_UNSCALED_MODEL_TYPES = frozenset({"gemma3", "gemma3_text", "gemma4", "gemma4_text", "olmo3"})


@dataclass(frozen=True)
class LayerTypeRope:
    """How a model type's transformers config class fills its one rope dict per layer type
    (``convert_rope_params_to_dict`` in configuration_gemma3.py / configuration_olmo3.py, transformers 5): a v4
    rope_scaling goes to the full layers; a dict without rope_theta gets, for the full layers, the top-level
    rope_theta (else ``full_theta``) and for the sliding layers ``sliding_theta_key``'s value (else
    ``sliding_theta``); a flat v5 rope_parameters (not keyed by layer type) is not read at all."""

    full_theta: float
    sliding_theta: float
    sliding_theta_key: str | None  # None: the class reads the top-level rope_theta once, for the full layers


LAYER_TYPE_ROPE_MODEL_TYPES: dict[str, LayerTypeRope] = {
    "gemma3_text": LayerTypeRope(1_000_000.0, 10_000.0, "rope_local_base_freq"),  # Gemma3TextConfig.default_theta
    "olmo3": LayerTypeRope(500_000.0, 500_000.0, None),  # Olmo3Config.default_theta, for both
}
# model types whose MLA layers are trained without position (NoPE: transformers' attention code has no rotary
# embedding), where vLLM rotates their rope part unless the config says mla_use_nope: true (Kimi Linear)
NOPE_MLA_MODEL_TYPES = frozenset({"kimi_linear"})
# model types whose attention adds a learned logit per head to the softmax denominator (gpt-oss's ``sinks``)
ATTENTION_SINK_MODEL_TYPES = frozenset({"gpt_oss", "deepseek_v4"})
ATTENTION_SINK_NOTE = (
    "attention sinks: a learned logit per head joins the softmax denominator (no value, no position), so the real "
    "keys' weights sum to less than 1; the rotation of q and k is unaffected"
)
# DeepSeek-V4 (transformers' DeepseekV4Config and modeling_deepseek_v4): its rope parameters are keyed by regime, not
# by layer type. "main" rotates the sliding-window-only layers (plain RoPE at rope_theta); "compress" rotates every
# other layer's queries and keys, its compressor's compressed keys and its indexer's (compress_rope_theta with the
# config's rope_scaling, whose YaRN gets attention_factor 1 unless the config gives one). Each head rotates its
# trailing partial_rotary_factor·head_dim features (qk_rope_head_dim) in interleaved pairs.
REGIME_MODEL_TYPES = frozenset({"deepseek_v4"})
MAIN_REGIME, COMPRESS_REGIME = "main", "compress"
COMPRESSED_SPARSE, HEAVILY_COMPRESSED = "compressed_sparse_attention", "heavily_compressed_attention"
V4_LAYER_TYPES = (SLIDING, COMPRESSED_SPARSE, HEAVILY_COMPRESSED)
V4_RATIO_TYPES = {0: SLIDING, 4: COMPRESSED_SPARSE, 128: HEAVILY_COMPRESSED}  # compress_ratios' values (transformers)
V4_DEFAULT_RATES = {COMPRESSED_SPARSE: 4, HEAVILY_COMPRESSED: 128}
V4_COMPRESS_THETA = 160000.0  # DeepseekV4Config's compress_rope_theta
V4_ROPE_FRACTION = 64 / 512  # DeepseekV4Config's default partial_rotary_factor (qk_rope_head_dim / head_dim)
V4_INDEX_HEAD_DIM = 128  # DeepseekV4Config's index_head_dim
V4_UNIT_FACTOR_ROPE_TYPE = "yarn"  # the flat compress rope dict DeepseekV4Config gives attention_factor 1.0
V4_KEY_IS_VALUE_NOTE = (
    "keys are values (one shared KV head): the value picked up the key's rotation, so the attention output's "
    "rotated features are turned back by the query's position (cos, -sin) before the output projection"
)
V4_COMPRESSED_NOTE = (
    "besides the last sliding_window raw keys, attends to compressed keys, one per compress_rate tokens: entry i "
    "is rotated like the layer's keys at position i·compress_rate (the first token of its window)"
)
# what a model type's own config class (transformers) fills in where config.json leaves the key out; a reader of
# config.json alone falls back to GENERIC_FALLBACKS and rotates something else (the "kwargs.setdefault" defaults of
# transformers 5's configuration_<model>.py; Olmo3Config.default_theta)
MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_next": {"partial_rotary_factor": 0.25, "full_attention_interval": 4, "head_dim": 256},
    "gemma": {"head_dim": 256},
    "gemma2": {"head_dim": 256},
    "gemma3_text": {"head_dim": 256, "rope_theta": 1_000_000.0},  # (the global layers'; LayerTypeRope: the local)
    "gpt_oss": {
        "head_dim": 64,
        "rope_theta": 150_000.0,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 4096,
        },
    },
    "llama4_text": {"rope_theta": 500_000.0},
    "qwen3_vl_text": {"rope_theta": 500_000.0},
    "qwen2_5_vl": {"rope_theta": 1_000_000.0},  # (its text config class's, which reads the flat config's keys)
    "smollm3": {"rope_theta": 2_000_000.0},
    "glm4_moe": {"partial_rotary_factor": 0.5},
    "glm4": {"partial_rotary_factor": 0.5},
    "glm": {"partial_rotary_factor": 0.5},
    "phi": {"partial_rotary_factor": 0.5},
    "persimmon": {"partial_rotary_factor": 0.5},
    "stablelm": {"partial_rotary_factor": 0.25},
    "nemotron": {"partial_rotary_factor": 0.5},
    "olmo3": {"rope_theta": 500000.0},
}
GENERIC_FALLBACKS = {
    "partial_rotary_factor": "1.0 (the whole head rotates)",
    "full_attention_interval": "none (every layer is full attention with RoPE)",
    "rope_theta": f"{DEFAULT_THETA:g}",
    "head_dim": "hidden_size / num_attention_heads",
    "rope_scaling": "none (plain RoPE)",
}
# model types whose attention multiplies the logits by 1 (q and k RMS-normalised per head; transformers' scaling=1.0)
UNIT_SOFTMAX_MODEL_TYPES = frozenset({"gemma4", "gemma4_text"})
# model types whose sparse-attention indexer rotates interleaved pairs in transformers (GLM-5); DeepSeek-V3.2's
# rotates in halves (rotate_half), unlike its MLA
INDEXER_INTERLEAVED_MODEL_TYPES = frozenset({"glm_moe_dsa"})
# model types whose global layers are trained with a method that reads partial_rotary_factor itself (Gemma 4's
# proportional RoPE): an ordinary partial rotation there is a port bug
PROPORTIONAL_MODEL_TYPES = frozenset({"gemma4", "gemma4_text"})


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


# ---------------------------------------------------------------------------------------------- helpers
def _required(value: int | None, key: str) -> int:
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


def _layer_types(text: TextFields, layers: int) -> list[str]:
    if text.layer_types is not None:
        if len(text.layer_types) != layers:
            raise InvalidInput(("layer_types",), f"must list one attention type per layer ({layers})")
        return list(text.layer_types)
    if text.linear_attn_config is not None:
        linear = read(LinearAttentionFields, text.linear_attn_config, ("linear_attn_config",))
        if linear.full_attn_layers is not None or linear.kda_layers is not None:
            full = set(linear.full_attn_layers or [])
            if any(number > layers for number in full | set(linear.kda_layers or [])):
                raise InvalidInput(("linear_attn_config",), f"numbers layers 1 ... {layers} (1-based)")
            return [FULL if index + 1 in full else LINEAR for index in range(layers)]
    if text.full_attention_interval is not None:
        interval = text.full_attention_interval
        return [FULL if (index + 1) % interval == 0 else LINEAR for index in range(layers)]
    pattern = text.sliding_window_pattern
    if pattern is not None and text.sliding_window:
        return [FULL if (index + 1) % pattern == 0 else SLIDING for index in range(layers)]
    if text.attention_chunk_size:
        return [CHUNKED] * layers
    if text.index_head_dim is not None:
        return [INDEXED] * layers  # DeepSeek-V3.2 / GLM-5: every layer's attention is chosen by the indexer
    return [FULL] * layers


def _rope_layers(text: TextFields, layers: int) -> list[bool]:
    """Which layers rotate: ``no_rope_layers`` (1 = RoPE), else ``no_rope_layer_interval``, else all."""
    if text.no_rope_layers:
        if len(text.no_rope_layers) != layers:
            raise InvalidInput(("no_rope_layers",), f"must hold one 0 (NoPE) or 1 (RoPE) per layer ({layers})")
        return [bool(value) for value in text.no_rope_layers]
    interval = text.no_rope_layer_interval
    if interval is not None:
        return [(index + 1) % interval != 0 for index in range(layers)]
    return [True] * layers


def _rotary_dims(
    text: TextFields, head_dim: int, rope: RopeFields, method: str, model_type: str | None = None
) -> tuple[int, int, list[ConfigWarning]]:
    """(rotary_dim, start of the rotated slice, warnings) from the partial-rotation keys; a method that reads the
    fraction itself (``FRACTION_PARAM``: Gemma 4's proportional RoPE) turns the whole head."""
    warnings: list[ConfigWarning] = []
    if takes_fraction(method):
        return head_dim, 0, warnings
    if text.qk_rope_head_dim is not None:
        if text.qk_rope_head_dim < 2 or text.qk_rope_head_dim % 2:
            raise InvalidInput(
                ("qk_rope_head_dim",),
                f"is {text.qk_rope_head_dim}: the rotated part of an MLA head turns features in pairs, so it is an "
                "even number of at least 2",
            )
        return text.qk_rope_head_dim, text.qk_nope_head_dim or 0, warnings
    spellings: dict[str, int] = {}
    top, inner = text.partial_rotary_factor, rope.partial_rotary_factor
    if inner is not None:
        spellings["rope_parameters.partial_rotary_factor"] = int(head_dim * inner)
    if top is not None:
        spellings["partial_rotary_factor"] = int(head_dim * top)
    if text.rotary_pct is not None:
        spellings["rotary_pct"] = int(head_dim * text.rotary_pct)
    if text.rotary_dim is not None:
        spellings["rotary_dim"] = text.rotary_dim
    if top is not None and inner is not None and top != inner:
        warnings.append(
            ConfigWarning(
                "partial_rotary_conflict",
                f"partial_rotary_factor is {top} at the top level and {inner} in the rope parameters; readers that "
                "apply one after the other rotate the product of the two. Resolved with the rope parameters' value "
                "(Hugging Face v5 priority).",
                [],
                {"top_level": top, "rope_parameters": inner},
            )
        )
    elif len(set(spellings.values())) > 1:
        warnings.append(
            ConfigWarning(
                "partial_rotary_conflict",
                f"the partial-rotation keys disagree on the rotated features: {spellings}; resolved with the first.",
                [],
                {"rotary_dims": spellings},
            )
        )
    rotary_dim = next(iter(spellings.values()), head_dim)
    every_type = WHOLE_HEAD_MODEL_TYPES.get(model_type or "")
    if spellings and rotary_dim != head_dim and every_type is not None:
        # (rope_type "default", M-RoPE's sections included)
        ignored = every_type or ROPE_TYPE_METHODS.get(rope.kind) == DEFAULT_ROPE_METHOD
        warnings.append(_whole_head_warning(model_type, method, spellings, rotary_dim, head_dim, ignored))
        if ignored:
            return head_dim, 0, warnings
    if rotary_dim % 2:
        rotary_dim += 1  # Hugging Face rounds an odd partial rotary dim up (inv_freq over arange(0, dim, 2))
    if not 2 <= rotary_dim <= head_dim:
        key = next(iter(spellings), "head_dim").removeprefix("rope_parameters.")
        raise InvalidInput((key,), f"gives {rotary_dim} rotated features of a {head_dim}-dim head")
    return rotary_dim, 0, warnings


@dataclass(frozen=True)
class _Block:
    """One layer type's rope dict, typed, and where it sits in the config (for errors)."""

    fields: RopeFields
    loc: Loc
    theta_loc: Loc | None = None  # where its rope_theta was read, when not in the dict itself


def rope_source(text: TextFields) -> str:
    """The rope dict transformers reads: rope_scaling wherever the config gives a non-empty one, even beside a
    rope_parameters (``PreTrainedConfig.convert_rope_params_to_dict``: ``rope_scaling or rope_parameters``; the
    per-layer-type classes merge it into the full layers' dict), else rope_parameters."""
    if text.rope_scaling or text.rope_parameters is None:
        return "rope_scaling"
    return "rope_parameters"


def _both_rope_dicts(text: TextFields) -> ConfigWarning | None:
    if not (text.rope_scaling and text.rope_parameters):
        return None
    return ConfigWarning(
        "rope_dicts_both",
        "the config gives both rope_scaling and rope_parameters: transformers reads rope_scaling (its rope_theta, "
        "else the top-level rope_theta) and ignores rope_parameters. Resolved so; keep one of them.",
        [],
        {"rope_scaling": dict(text.rope_scaling), "rope_parameters": dict(text.rope_parameters)},
    )


def _whole_head_warning(
    model_type: str | None, method: str, spellings: Mapping[str, int], rotary_dim: int, head_dim: int, ignored: bool
) -> ConfigWarning:
    keys = ", ".join(spellings)
    if ignored:
        return ConfigWarning(
            "partial_rotary_ignored",
            f"{keys} asks for {rotary_dim} rotated features of each {head_dim}-feature head, but {model_type}'s "
            f"rotary embedding in transformers computes {method} over the whole head and never reads it. "
            f"Resolved over the whole head; an engine that reads {keys} rotates {rotary_dim}.",
            [],
            {"keys": dict(spellings), "head_dim": head_dim, "rotary_dim_asked": rotary_dim},
        )
    return ConfigWarning(
        "partial_rotary_does_not_fit",
        f"{keys} asks for {rotary_dim} rotated features of each {head_dim}-feature head: for {method}, transformers "
        f"computes frequencies for {rotary_dim} features, but {model_type}'s attention applies them to the whole "
        f"head, and its forward pass fails on the shapes. Resolved with {rotary_dim}; this config does not run in "
        "transformers.",
        [],
        {"keys": dict(spellings), "head_dim": head_dim, "rotary_dim_asked": rotary_dim},
    )


def _rope_blocks(
    text: TextFields, types: Sequence[str], warnings: list[ConfigWarning], model_type: str | None = None
) -> tuple[dict[str, _Block | None], bool]:
    """The rope dict of each layer type, and whether the config gave one per layer type."""
    source = rope_source(text)
    given: Mapping[str, Any] = getattr(text, source) or {}
    present = sorted(set(types))
    nested = bool(given) and all(key in present or key in (FULL, SLIDING, CHUNKED) for key in given)
    top_theta = text.rope_theta
    blocks: dict[str, _Block | None] = {}
    if nested:
        for layer_type in present:
            if layer_type not in given:
                raise InvalidInput((source, layer_type), f"gives no rope parameters for the layer type {layer_type!r}")
            block = given[layer_type]
            if block is None:
                blocks[layer_type] = None
                continue
            if not isinstance(block, Mapping):
                raise InvalidInput((source, layer_type), "must be an object, or null for a NoPE layer type")
            blocks[layer_type] = _Block(read(RopeFields, block, (source, layer_type)), (source, layer_type))
    else:
        flat = _Block(read(RopeFields, given, (source,)), (source,))
        blocks = dict.fromkeys(present, flat)
    local_theta = text.rope_local_base_freq
    by_type = LAYER_TYPE_ROPE_MODEL_TYPES.get(model_type or "")
    if by_type is not None and SLIDING in present:
        blocks = _class_blocks(text, by_type, blocks, source, nested, model_type, warnings)
    elif not nested and local_theta is not None and SLIDING in present and source == "rope_scaling":
        # Gemma 3 (v4): sliding layers use their own θ, unscaled; rope_scaling is the global layers'
        local = RopeFields(rope_type="default", rope_theta=local_theta)
        blocks[SLIDING] = _Block(local, (source,), theta_loc=("rope_local_base_freq",))
    for layer_type, block in blocks.items():
        if block is None:
            continue
        theta = block.fields.rope_theta
        if source == "rope_parameters" and theta is None and top_theta is not None:
            warnings.append(
                ConfigWarning(
                    "rope_theta_outside_rope_parameters",
                    f"rope_parameters ({layer_type}) has no rope_theta while the config's top level says "
                    f"{top_theta}: a reader of rope_parameters alone falls back to {DEFAULT_THETA:g}. Resolved with "
                    f"{top_theta}.",
                    [],
                    {"layer_type": layer_type, "top_level_rope_theta": top_theta, "fallback": DEFAULT_THETA},
                )
            )
        elif not nested and by_type is None and source == "rope_parameters" and top_theta not in (None, theta):
            # (per layer type, each θ is its own: Gemma's sliding layers differ from the top level on purpose)
            warnings.append(
                ConfigWarning(
                    "rope_theta_conflict",
                    f"rope_theta is {theta} in rope_parameters ({layer_type}) and {top_theta} at the top level; "
                    "resolved with the rope parameters' value (Hugging Face v5 priority).",
                    [],
                    {"layer_type": layer_type, "rope_parameters": theta, "top_level": top_theta},
                )
            )
    return blocks, nested


def _class_blocks(
    text: TextFields,
    by_type: LayerTypeRope,
    blocks: dict[str, _Block | None],
    source: str,
    nested: bool,
    model_type: str | None,
    warnings: list[ConfigWarning],
) -> dict[str, _Block | None]:
    """The rope dicts of a model type whose transformers config class keys them by layer type
    (``LAYER_TYPE_ROPE_MODEL_TYPES``), filled in as that class fills them: what transformers runs. A flat v5
    rope_parameters, which the class never reads, is warned about (``flat_rope_parameters_ignored``), and so are
    sliding layers that get the class's θ where the config's rope_theta was meant (``sliding_theta_default``)."""
    full_given = text.rope_theta is not None
    full_theta, full_loc = (text.rope_theta, ("rope_theta",)) if full_given else (by_type.full_theta, ("model_type",))
    key = by_type.sliding_theta_key
    sliding_theta, sliding_loc = by_type.sliding_theta, ("model_type",)
    if key is not None and getattr(text, key) is not None:
        sliding_theta, sliding_loc = getattr(text, key), (key,)
    plain = {
        FULL: _Block(RopeFields(rope_type="default", rope_theta=full_theta), (source,), full_loc),
        SLIDING: _Block(RopeFields(rope_type="default", rope_theta=sliding_theta), (source,), sliding_loc),
    }
    if nested:
        filled = dict(blocks)
        for layer_type, block in blocks.items():
            if block is not None and block.fields.rope_theta is None and layer_type in plain:
                theta, loc = plain[layer_type].fields.rope_theta, plain[layer_type].theta_loc
                filled[layer_type] = _Block(block.fields.model_copy(update={"rope_theta": theta}), block.loc, loc)
    elif source == "rope_parameters":
        filled = {layer_type: plain.get(layer_type, block) for layer_type, block in blocks.items()}
        flat = (text.rope_parameters or {}) if blocks else {}
        if flat:
            warnings.append(
                ConfigWarning(
                    "flat_rope_parameters_ignored",
                    f"{model_type}'s config class in transformers reads rope_parameters only per layer type "
                    f"({{{FULL!r}: {{...}}, {SLIDING!r}: {{...}}}}): this flat rope_parameters is not read, and "
                    f"every layer rotates with plain RoPE (full layers at θ = {full_theta:g}, sliding layers at "
                    f"θ = {sliding_theta:g}). Resolved so; nest the dict under {FULL!r} to have it used.",
                    [],
                    {"ignored": dict(flat), "full_theta": full_theta, "sliding_theta": sliding_theta},
                )
            )
    else:  # v4: rope_scaling is the full layers'
        full = blocks.get(FULL)
        filled = dict(blocks)
        if full is not None and full.fields.rope_theta is None:
            filled[FULL] = full = _Block(full.fields.model_copy(update={"rope_theta": full_theta}), full.loc, full_loc)
        if full is not None and full.fields.rope_type is None and full.fields.type is not None:
            # merged into {"rope_type": "default"}: the older key "type" does not replace rope_type
            filled[FULL] = _Block(RopeFields(rope_type="default", rope_theta=full.fields.rope_theta), full.loc)
            warnings.append(
                ConfigWarning(
                    "rope_type_key_ignored",
                    f"rope_scaling names its type with the older key type={full.fields.type!r}: {model_type}'s "
                    "config class in transformers merges rope_scaling into a full-attention dict whose rope_type "
                    f"is already 'default', so the {full.fields.type} scaling is not applied. Resolved so; write "
                    "rope_type.",
                    [],
                    {"type": full.fields.type, "rope_scaling": dict(text.rope_scaling or {})},
                )
            )
        filled[SLIDING] = plain[SLIDING]
    sliding = filled.get(SLIDING)
    sliding_default = (
        sliding.fields.rope_theta if sliding is not None and sliding.theta_loc == ("model_type",) else None
    )
    if key is None and full_given and sliding_default is not None and sliding_default != text.rope_theta:
        warnings.append(
            ConfigWarning(
                "sliding_theta_default",
                f"{model_type}'s config class in transformers reads rope_theta = {text.rope_theta:g} once, for "
                f"the full-attention layers; the sliding layers, whose rope dict has no rope_theta, get the "
                f"class default θ = {sliding_default:g}. Resolved so; give the sliding layers their "
                f"own rope_theta (rope_parameters.{SLIDING}.rope_theta) if they were trained at "
                f"{text.rope_theta:g}.",
                [],
                {"rope_theta": text.rope_theta, "sliding_theta": sliding_default},
            )
        )
    return filled


@dataclass(frozen=True)
class _Method:
    """What one rope dict resolves to: the method, its params (in the method's names) and the config key each
    param was read from, and the M-RoPE sections."""

    name: str
    params: dict[str, Any]
    origins: dict[str, Loc]
    section: list[int] | None
    default_theta: bool = False  # no rope_theta anywhere: the base is DEFAULT_THETA
    loc: Loc = ()  # the rope dict it was read from (where a refusal of the params together is reported)


def _method_params(block: _Block, text: TextFields) -> _Method:
    """The method and params of one rope dict; each param remembers the config key it came from."""
    rope, loc = block.fields, block.loc
    rope_type = rope.kind
    if rope_type not in ROPE_TYPE_METHODS:
        key = "rope_type" if rope.rope_type is not None else "type"
        raise InvalidInput(
            (*loc, key), f"{rope_type!r} is not a rope type posenc resolves; known: {sorted(ROPE_TYPE_METHODS)}"
        )
    method = ROPE_TYPE_METHODS[rope_type]
    if rope.rope_theta is not None:
        theta, theta_loc = rope.rope_theta, block.theta_loc or (*loc, "rope_theta")
    elif text.rope_theta is not None:
        theta, theta_loc = text.rope_theta, ("rope_theta",)
    else:
        theta, theta_loc = DEFAULT_THETA, loc
    params: dict[str, Any] = {"base": theta}
    origins: dict[str, Loc] = {"base": theta_loc}
    max_positions = text.max_position_embeddings
    for key in method_keys(method):
        value, origin = rope.given(key), (*loc, key)
        if key == "original_max_position_embeddings":
            # Phi-3 keeps it at the top level, and it wins there (as in transformers); else the model's length
            if text.original_max_position_embeddings is not None:
                value, origin = text.original_max_position_embeddings, ("original_max_position_embeddings",)
            elif value is None:
                value, origin = max_positions, ("max_position_embeddings",)
        if key == "max_position_embeddings":
            value, origin = max_positions, ("max_position_embeddings",)
        if value is not None:
            params[key] = list(value) if isinstance(value, list) else value
            origins[key] = origin
    if takes_fraction(method):
        if rope.partial_rotary_factor is not None:
            fraction, origin = rope.partial_rotary_factor, (*loc, "partial_rotary_factor")
        elif text.partial_rotary_factor is not None:
            fraction, origin = text.partial_rotary_factor, ("partial_rotary_factor",)
        else:
            fraction, origin = HF_PARTIAL_DEFAULT, loc
        params[FRACTION_PARAM] = fraction
        origins[FRACTION_PARAM] = origin
    for key, extended in CONFIG_EXTENSIONS.get(method, []):
        if rope.given(key) is not None:  # M-RoPE: the same frequencies, each pair turned by t, h or w
            method, spec = extended, get_method(extended)
            taken = spec.params_model.model_fields  # the base method's params the extension does not take go
            params = {name: value for name, value in params.items() if name in taken}
            origins = {name: where for name, where in origins.items() if name in params}
            for name in spec.config_keys:
                value = rope.given(name)
                if value is not None:
                    params[name], origins[name] = list(value) if isinstance(value, list) else value, (*loc, name)
            params |= spec.config_values(rope.given) if spec.config_values is not None else {}
            break
    section = rope.mrope_section
    return _Method(
        method, params, origins, None if section is None else list(section), default_theta=theta_loc == loc, loc=loc
    )


def _scaled(method: _Method) -> bool:
    """Whether the method stretches RoPE for a longer context: a factor above 1, or (LongRoPE) config keys beyond
    the base and none of them a factor."""
    keys = method_keys(method.name)
    factor = method.params.get("factor")
    return (factor is not None and factor > 1) if "factor" in keys else bool(keys)


def _default_theta_warning(layer_type: str, block: _Block, method: _Method, text: TextFields) -> ConfigWarning:
    params = method.params
    return ConfigWarning(
        "default_theta_with_scaling",
        f"the rope parameters ({layer_type}) scale RoPE ({block.fields.kind}"
        + (f", factor {params['factor']}" if "factor" in params else "")
        + f") for max_position_embeddings={text.max_position_embeddings}, but no rope_theta is given anywhere, so "
        f"the base is the default {DEFAULT_THETA:g} (what transformers runs). A long-context scaling is almost "
        "never trained at the default base: check the checkpoint's rope_theta.",
        [],
        {
            "layer_type": layer_type,
            "rope_type": block.fields.kind,
            "factor": params.get("factor"),
            "original_max_position_embeddings": params.get("original_max_position_embeddings"),
            "max_position_embeddings": text.max_position_embeddings,
            "base": DEFAULT_THETA,
        },
    )


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


def _attention_scale(method: _Method, rotary_dim: int) -> float:
    """The factor on cos and sin as the method computes it; a param the method refuses is reported at the config
    key it was read from, and a refusal of the params together (a method's model validator) at the rope dict."""
    try:
        return float(rope_frequencies(method.name, method.params, rotary_dim).attention_scale)
    except InvalidInput as exc:
        if not exc.loc or exc.loc[0] != "params":
            raise
        param = exc.loc[1] if len(exc.loc) > 1 else None
        where = method.origins.get(str(param), method.loc) if param is not None else method.loc
        if param is not None and str(param) not in method.origins and exc.msg == "Field required":
            where = (*method.loc, str(param))  # a param the method needs and the config lacks: where it would go
        raise InvalidInput(where or exc.loc, exc.msg) from None


def layer_frequencies(layer: LayerRope, seq_len: int = 1) -> RotaryFrequencies:
    """The layer's rotary frequencies from its registered method (float64), at a sequence of ``seq_len``."""
    if layer.method is None:
        raise InvalidInput(("layer",), f"layer {layer.layer} is a NoPE layer: it has no rotation")
    return rope_frequencies(layer.method, layer.params, layer.rotary_dim, seq_len)


# ---------------------------------------------------------------------------------------------- resolve
def resolve_config(config: Mapping[str, Any]) -> ResolvedConfig:
    """One ``LayerRope`` per layer of the model ``config`` describes, and the warnings its patterns raise.

    The config is read as data first (``posenc.real_models.config_fields``): every key the resolver uses is typed and
    bounded, so errors are ``InvalidInput`` / ``FieldErrors`` located at the key the user sent, inside the config
    (``text_config.rope_theta`` for a nested one)."""
    if not isinstance(config, Mapping):
        raise InvalidInput((), "must be a model config object (config.json)")
    check_json_value(config)
    class_name = config.get("_class_name")
    if isinstance(class_name, str) and class_name in DIFFUSERS_TRANSFORMERS:
        return _resolve_diffusers(read(DiffusersFields, config))
    top = read(TextFields, config)
    nested = config.get("text_config")
    if nested is None:
        return _resolve_text(top, top)
    if not isinstance(nested, Mapping):
        raise InvalidInput(("text_config",), "must be an object (the text model's config)")
    text = read(TextFields, nested, ("text_config",))
    with located(("text_config",)):
        return _resolve_text(top, text)


def config_layer(config: Mapping[str, Any] | str, layer: int) -> LayerRope:
    """Layer ``layer`` of the model ``config`` describes (a config, or a preset's name), resolved: the one place a
    config and a layer index become one layer's setup (``/v1/rotary``, ``/v1/rope/*``, the doctor). Errors at
    ("config", …) for the config and ("layer",) for an index past its layers."""
    with located(("config",)):
        layers = resolve_config(config_or_preset(config)).layers
    if not 0 <= layer < len(layers):
        raise InvalidInput(("layer",), f"the config has {len(layers)} layers, so at most {len(layers) - 1}")
    return layers[layer]


def requested_layer(method: str | None, config: Mapping[str, Any] | str | None, layer: int | None) -> LayerRope | None:
    """The config layer a request names with ``config`` and ``layer`` (``config_layer``), or None for one that
    names a ``method`` instead: the either/or of every setup (``/v1/rotary``, ``/v1/rope/*``, the doctor), refused
    at ("method",) when neither is given and at ("layer",) for a config without its layer index."""
    if config is None:
        if method is None:
            raise InvalidInput(("method",), "give a method, or a config and a layer")
        return None
    if layer is None:
        raise InvalidInput(("layer",), "a config needs the index of the layer meant")
    return config_layer(config, layer)


def _resolve_text(top: TextFields, text: TextFields) -> ResolvedConfig:
    model_type = text.model_type if text.model_type is not None else top.model_type
    if model_type in REGIME_MODEL_TYPES:
        return _resolve_regimes(text, model_type)
    heads = _required(text.num_attention_heads, "num_attention_heads")
    layers = _required(text.num_hidden_layers, "num_hidden_layers")
    warnings: list[ConfigWarning] = []
    text, filled = _model_defaults(text, model_type)
    if filled:
        warnings.append(_model_default_warning(model_type, filled))
    both = _both_rope_dicts(text)
    if both is not None:
        warnings.append(both)
    if text.head_dim is not None:
        head_dim = text.head_dim
    else:
        head_dim = _required(text.hidden_size, "hidden_size") // heads
        if not 1 <= head_dim <= MAX_HEAD_DIM:
            raise InvalidInput(
                ("hidden_size",),
                f"hidden_size / num_attention_heads = {head_dim} features per head; must be 1 ... {MAX_HEAD_DIM}",
            )
    mla_rope = text.qk_rope_head_dim
    if mla_rope is not None:
        head_dim = (text.qk_nope_head_dim or 0) + mla_rope
        if head_dim > MAX_HEAD_DIM:
            raise InvalidInput(("qk_nope_head_dim",), f"qk_nope_head_dim + qk_rope_head_dim must be <= {MAX_HEAD_DIM}")
    types = _layer_types(text, layers)
    rotating = _rope_layers(text, layers)
    if text.mla_use_nope and mla_rope is not None:
        rotating = [False] * layers  # Kimi Linear / GLM-5: the MLA layers' rope part is never rotated
    rotating = [rotate and layer_type != LINEAR for rotate, layer_type in zip(rotating, types, strict=True)]
    blocks, nested = _rope_blocks(text, [t for t in types if t != LINEAR] or [FULL], warnings, model_type)
    interleave = text.rope_interleave if text.rope_interleave is not None else model_type in INTERLEAVED_MODEL_TYPES
    pairing = "interleaved" if interleave or text.is_neox_style is False else "half"
    window, chunk = text.sliding_window, text.attention_chunk_size
    temperature = None
    if text.attn_temperature_tuning:
        temperature = {
            "floor_scale": text.floor_scale if text.floor_scale is not None else 8192.0,
            "attn_scale": text.attn_scale if text.attn_scale is not None else 0.1,
            "position_offset": 1,
            "formula": "q · (log(floor((n + 1) / floor_scale) + 1) · attn_scale + 1)",
            "applies_to": "NoPE layers",
        }

    def width(layer_type: str) -> int:
        """A layer type's head width: Gemma 4's full-attention layers have their own (global_head_dim)."""
        return text.global_head_dim if layer_type == FULL and text.global_head_dim is not None else head_dim

    def base_softmax(layer_type: str) -> tuple[float, str]:
        if model_type in UNIT_SOFTMAX_MODEL_TYPES:
            return 1.0, f"1 ({model_type} normalises q and k per head: q_norm, k_norm)"
        if text.query_pre_attn_scalar is not None:
            return text.query_pre_attn_scalar**-0.5, "query_pre_attn_scalar ** -0.5"
        if layer_type == FULL and text.global_head_dim is not None:
            return width(layer_type) ** -0.5, "global_head_dim ** -0.5"
        return head_dim**-0.5, "head_dim ** -0.5"

    methods = {layer_type: _method_params(block, text) for layer_type, block in blocks.items() if block is not None}
    # one rotation per layer type: its rotated width, method, params and attention scale, computed once
    setups: dict[str, tuple[int, int, _Method, float]] = {}
    for layer_type, method in methods.items():
        block = blocks[layer_type]
        assert block is not None
        rotary_dim, start, dim_warnings = _rotary_dims(text, width(layer_type), block.fields, method.name, model_type)
        warnings.extend(w for w in dim_warnings if w not in warnings)
        if method.section is not None and 2 * sum(method.section) != rotary_dim:
            # sections that do not cover the rotated pairs cannot be applied by any model (Qwen2-VL's split of
            # cos/sin by the doubled sections fails): refused at the key the user sent
            raise InvalidInput(
                (*block.loc, "mrope_section"),
                f"{method.section} gives 2 x {sum(method.section)} = {2 * sum(method.section)} rotated features, "
                f"but the layer rotates {rotary_dim}: the sections count pairs and must sum to rotary_dim / 2 = "
                f"{rotary_dim // 2}",
            )
        if method.default_theta and _scaled(method):
            warnings.append(_default_theta_warning(layer_type, block, method, text))
        setups[layer_type] = (rotary_dim, start, method, _attention_scale(method, rotary_dim))
    resolved: list[LayerRope] = []
    for index, layer_type in enumerate(types):
        rope = layer_type != LINEAR and blocks[layer_type] is not None and rotating[index]
        setup = setups.get(layer_type)
        if layer_type == CHUNKED and not rotating[index] and text.layer_types is None:
            layer_type = FULL  # Llama 4: the NoPE layers attend globally, the RoPE layers in chunks
        layer_scale, layer_source = base_softmax(layer_type)
        query_scale = temperature if temperature is not None and not rope else None
        indexer = None
        if rope and setup is not None:
            rotary_dim, start, method, attention_scale = setup
            name, params, section = method.name, dict(method.params), method.section
            if mla_rope is not None and params.get("mscale_all_dim"):  # DeepSeek's YaRN: mscale² on the logits
                mscale = yarn_mscale(float(params["factor"]), float(params["mscale_all_dim"]))
                layer_scale *= mscale * mscale
                layer_source = "(qk_nope_head_dim + qk_rope_head_dim) ** -0.5 * mscale(factor, mscale_all_dim) ** 2"
            block = blocks[layer_type]
            assert block is not None
            query_scale = _llama4_query_scale(block.fields, params, text) or query_scale
            if mla_rope is not None and text.index_head_dim is not None:
                indexer = _indexer(index, layer_type, name, params, text, model_type, attention_scale)
        else:
            name, params, section, rotary_dim, start, attention_scale = None, {}, None, 0, 0, 1.0
            rope = False
        resolved.append(
            LayerRope(
                layer=index,
                layer_type=layer_type,
                method=name,
                params=params,
                head_dim=width(layer_type),
                rotary_dim=rotary_dim,
                rotary_slice=(start, start + rotary_dim),
                pairing=pairing,
                attention_scale=attention_scale,
                softmax_scale=layer_scale,
                softmax_scale_source=layer_source,
                window=window if layer_type == SLIDING else None,
                chunk=chunk if layer_type == CHUNKED and rope else None,
                query_temperature=query_scale,
                mrope_section=section,
                shared_key_rope=mla_rope is not None and rope,
                indexer=indexer,
                notes=[ATTENTION_SINK_NOTE]
                if model_type in ATTENTION_SINK_MODEL_TYPES and layer_type != LINEAR
                else [],
            )
        )
    warnings.extend(_pattern_warnings(text, model_type, resolved, nested))
    return ResolvedConfig(model_type=model_type, layers=resolved, warnings=warnings)


# ---------------------------------------------------------------------------------------------- DeepSeek-V4
@dataclass(frozen=True)
class _Regime:
    """One of DeepSeek-V4's rope regimes: its method and params, and the trailing features it rotates."""

    method: _Method
    fraction: float  # of head_dim (partial_rotary_factor as read)
    rotary_dim: int
    attention_scale: float


def _v4_layer_types(text: TextFields, layers: int) -> list[str]:
    """``layer_types``, else ``compress_ratios`` (0, 4, 128 per layer; entries past the decoder's layers are the MTP
    layers', which transformers drops)."""
    if text.layer_types is not None:
        if len(text.layer_types) != layers:
            raise InvalidInput(("layer_types",), f"must list one attention type per layer ({layers})")
        for index, kind in enumerate(text.layer_types):
            if kind not in V4_LAYER_TYPES:
                raise InvalidInput(("layer_types", index), f"{kind!r} is not one of {list(V4_LAYER_TYPES)}")
        return list(text.layer_types)
    ratios = text.compress_ratios
    if ratios is None:
        raise InvalidInput(
            ("compress_ratios",),
            "is required (or layer_types): which layers attend to compressed keys decides their rotation, and "
            "transformers' DeepseekV4Config would fill in another model's schedule (V4-Pro's)",
        )
    if len(ratios) < layers:
        raise InvalidInput(("compress_ratios",), f"must give one ratio per layer ({layers}), got {len(ratios)}")
    for index, ratio in enumerate(ratios[:layers]):
        if ratio not in V4_RATIO_TYPES:
            raise InvalidInput(
                ("compress_ratios", index),
                f"is {ratio}: each layer's is 0 (sliding window only), 4 (compressed sparse) or 128 (heavily "
                "compressed), as transformers reads them",
            )
    return [V4_RATIO_TYPES[ratio] for ratio in ratios[:layers]]


def _v4_rates(text: TextFields) -> dict[str, int]:
    rates = dict(V4_DEFAULT_RATES)
    rates |= {kind: rate for kind, rate in (text.compress_rates or {}).items() if kind in rates}
    if text.compress_rate_csa is not None:
        rates[COMPRESSED_SPARSE] = text.compress_rate_csa
    if text.compress_rate_hca is not None:
        rates[HEAVILY_COMPRESSED] = text.compress_rate_hca
    return rates


def _v4_regimes(text: TextFields, head_dim: int) -> tuple[dict[str, _Regime], bool]:
    """The "main" and "compress" regimes as DeepseekV4Config builds them, and whether the config nests them.

    Nested (``rope_parameters: {"main": {...}, "compress": {...}}``, as transformers saves it): each dict as it is,
    partial_rotary_factor 1 where it says none. Flat (the published ``rope_scaling`` next to ``rope_theta`` and
    ``compress_rope_theta``): main is plain RoPE at rope_theta; compress is the rope dict at compress_rope_theta
    (the dict's own rope_theta is not read), its YaRN with attention_factor 1 unless given; both rotate
    partial_rotary_factor (else qk_rope_head_dim / head_dim, else 64 / 512) of each head."""
    source = "rope_parameters" if text.rope_parameters is not None else "rope_scaling"
    given: Mapping[str, Any] = getattr(text, source) or {}
    nested = isinstance(given.get(MAIN_REGIME), Mapping) and isinstance(given.get(COMPRESS_REGIME), Mapping)
    blocks: dict[str, tuple[_Block, float, Loc]] = {}
    if nested:
        for regime in (MAIN_REGIME, COMPRESS_REGIME):
            loc: Loc = (source, regime)
            fields = read(RopeFields, given[regime], loc)
            if fields.rope_theta is None:
                raise InvalidInput((*loc, "rope_theta"), f"is required: the {regime} regime's base (transformers)")
            fraction = fields.partial_rotary_factor if fields.partial_rotary_factor is not None else 1.0
            blocks[regime] = (_Block(fields, loc), fraction, (*loc, "partial_rotary_factor"))
    else:
        flat = {key: value for key, value in given.items() if key not in (MAIN_REGIME, COMPRESS_REGIME)}
        fields = read(RopeFields, flat, (source,))
        if text.partial_rotary_factor is not None:
            fraction, fraction_loc = text.partial_rotary_factor, ("partial_rotary_factor",)
        elif text.qk_rope_head_dim is not None:
            fraction, fraction_loc = text.qk_rope_head_dim / head_dim, ("qk_rope_head_dim",)
        else:
            fraction, fraction_loc = V4_ROPE_FRACTION, ("head_dim",)
        theta = text.compress_rope_theta if text.compress_rope_theta is not None else V4_COMPRESS_THETA
        update: dict[str, Any] = {"rope_theta": theta}
        if HF_ROPE_TYPES.get(fields.kind, fields.kind) == V4_UNIT_FACTOR_ROPE_TYPE and fields.attention_factor is None:
            update["attention_factor"] = 1.0
        theta_loc = ("compress_rope_theta",) if text.compress_rope_theta is not None else (source,)
        main = _Block(RopeFields(rope_type="default"), (source,))
        blocks[MAIN_REGIME] = (main, fraction, fraction_loc)
        blocks[COMPRESS_REGIME] = (
            _Block(fields.model_copy(update=update), (source,), theta_loc),
            fraction,
            fraction_loc,
        )
    regimes: dict[str, _Regime] = {}
    for regime, (block, fraction, where) in blocks.items():
        method = _method_params(block, text)
        rotary_dim = int(head_dim * fraction)
        rotary_dim += rotary_dim % 2  # (inv_freq over arange(0, dim, 2): an odd width rotates one more feature)
        if not 2 <= rotary_dim <= head_dim:
            raise InvalidInput(where, f"gives {rotary_dim} rotated features of a {head_dim}-dim head")
        regimes[regime] = _Regime(method, fraction, rotary_dim, _attention_scale(method, rotary_dim))
    return regimes, nested


def _resolve_regimes(text: TextFields, model_type: str | None) -> ResolvedConfig:
    """DeepSeek-V4: each layer rotates with the regime of its layer type (sliding: main; compressed sparse and
    heavily compressed: compress), over the trailing rotated features of its head_dim-wide heads, interleaved;
    the compressed layers' compressed keys with the same rotation at i·compress_rate (``compress_rate``), and the
    compressed sparse layers' indexer (``indexer``) with the compress regime over its index_head_dim features."""
    layers = _required(text.num_hidden_layers, "num_hidden_layers")
    head_dim = _required(text.head_dim, "head_dim")  # (transformers' default 512 is not derived from the sizes)
    types = _v4_layer_types(text, layers)
    rates = _v4_rates(text)
    regimes, nested = _v4_regimes(text, head_dim)
    index_dim = text.index_head_dim if text.index_head_dim is not None else V4_INDEX_HEAD_DIM
    scale, source = head_dim**-0.5, "head_dim ** -0.5"

    def setup(index: int, layer_type: str, regime: _Regime, width: int, **extra: Any) -> LayerRope:
        return LayerRope(
            layer=index,
            layer_type=layer_type,
            method=regime.method.name,
            params=dict(regime.method.params),
            head_dim=width,
            rotary_dim=regime.rotary_dim,
            rotary_slice=(width - regime.rotary_dim, width),
            pairing="interleaved",
            attention_scale=regime.attention_scale,
            **extra,
        )

    resolved: list[LayerRope] = []
    for index, layer_type in enumerate(types):
        notes = [ATTENTION_SINK_NOTE, V4_KEY_IS_VALUE_NOTE]
        if layer_type == SLIDING:
            layer = setup(index, layer_type, regimes[MAIN_REGIME], head_dim, softmax_scale=scale,
                          softmax_scale_source=source, window=text.sliding_window, notes=notes)  # fmt: skip
            resolved.append(layer)
            continue
        compress = regimes[COMPRESS_REGIME]
        indexer = None
        if layer_type == COMPRESSED_SPARSE:
            if compress.rotary_dim > index_dim:
                raise InvalidInput(
                    ("index_head_dim",), f"is {index_dim}: the indexer rotates {compress.rotary_dim} of its features"
                )
            indexer = setup(index, layer_type, compress, index_dim, softmax_scale=index_dim**-0.5,
                            softmax_scale_source="index_head_dim ** -0.5", compress_rate=rates[layer_type])  # fmt: skip
        layer = setup(index, layer_type, compress, head_dim, softmax_scale=scale, softmax_scale_source=source,
                      indexer=indexer, notes=[*notes, V4_COMPRESSED_NOTE], compress_rate=rates[layer_type])  # fmt: skip
        resolved.append(layer)
    warnings = _pattern_warnings(text, model_type, resolved, nested)
    return ResolvedConfig(model_type=model_type, layers=resolved, warnings=warnings)


def _model_defaults(text: TextFields, model_type: str | None) -> tuple[TextFields, dict[str, Any]]:
    """The config with the keys it leaves out that its model type's own config class fills in
    (``MODEL_TYPE_DEFAULTS``), and those keys: each only where no spelling of it is given anywhere."""
    defaults = MODEL_TYPE_DEFAULTS.get(model_type or "", {})
    if not defaults:
        return text, {}
    rope: Mapping[str, Any] = getattr(text, rope_source(text)) or {}
    given = set(rope)
    for value in rope.values():
        if isinstance(value, Mapping):  # one rope dict per layer type
            given |= set(value)
    missing = {
        "partial_rotary_factor": text.partial_rotary_factor is None
        and text.rotary_pct is None
        and text.rotary_dim is None
        and text.qk_rope_head_dim is None
        and "partial_rotary_factor" not in given,
        "full_attention_interval": text.full_attention_interval is None and text.layer_types is None,
        "rope_theta": text.rope_theta is None and text.rope_local_base_freq is None and "rope_theta" not in given,
        "head_dim": text.head_dim is None,
        "rope_scaling": text.rope_scaling is None and text.rope_parameters is None,
    }
    filled = {key: value for key, value in defaults.items() if missing[key]}
    return (text.model_copy(update=filled) if filled else text), filled


def _model_default_warning(model_type: str | None, filled: Mapping[str, Any]) -> ConfigWarning:
    fallback = {key: GENERIC_FALLBACKS[key] for key in filled}
    return ConfigWarning(
        "model_type_default",
        f"the config leaves out {', '.join(filled)}: {model_type}'s own config class fills in "
        f"{dict(filled)} (what transformers runs; resolved so), but a reader of config.json alone falls back to "
        f"{fallback} and rotates other features or other layers. Write the values into the config.",
        [],
        {"model_type": model_type, "filled": dict(filled), "generic_fallback": fallback},
    )


def _llama4_query_scale(rope: RopeFields, params: Mapping[str, Any], text: TextFields) -> dict[str, Any] | None:
    """Mistral 3 / Ministral 3 / Mistral 4's query scale, read from the rope dict's ``llama_4_scaling_beta``:
    q at position n times 1 + β·ln(1 + floor(n / L0)), L0 the rope dict's original_max_position_embeddings (as
    transformers' ``get_llama_4_attn_scale`` reads it), after the rotation, on every RoPE layer."""
    beta = rope.llama_4_scaling_beta
    if beta is None:
        return None
    original = params.get("original_max_position_embeddings") or rope.original_max_position_embeddings
    original = original or text.max_position_embeddings
    if original is None:
        raise InvalidInput(
            ("original_max_position_embeddings",), "is needed by llama_4_scaling_beta (the query scale's floor)"
        )
    return {
        "floor_scale": float(original),
        "attn_scale": beta,
        "position_offset": 0,
        "formula": "q · (1 + attn_scale · log(1 + floor(n / floor_scale)))",
        "applies_to": "RoPE layers (llama_4_scaling_beta: after the rotation)",
    }


def _indexer(
    index: int,
    layer_type: str,
    method: str,
    params: Mapping[str, Any],
    text: TextFields,
    model_type: str | None,
    attention_scale: float,
) -> LayerRope:
    """The sparse-attention indexer's rotation of an MLA layer (DeepSeek-V3.2, GLM-5): the main attention's
    frequencies over the first qk_rope_head_dim of its index_head_dim features (then the unrotated rest), in its
    own pairing: ``indexer_rope_interleave`` (vLLM reads it, default false: half), else the model's own code
    (transformers: GLM-5 interleaved, DeepSeek-V3.2 half)."""
    rope_dim = text.qk_rope_head_dim or 0
    index_dim = text.index_head_dim or 0
    if rope_dim > index_dim:
        raise InvalidInput(("index_head_dim",), f"is {index_dim}: the indexer rotates qk_rope_head_dim = {rope_dim}")
    interleave = text.indexer_rope_interleave
    if interleave is None:
        interleave = model_type in INDEXER_INTERLEAVED_MODEL_TYPES
    return LayerRope(
        layer=index,
        layer_type=layer_type,
        method=method,
        params=dict(params),
        head_dim=index_dim,
        rotary_dim=rope_dim,
        rotary_slice=(0, rope_dim),
        pairing="interleaved" if interleave else "half",
        attention_scale=attention_scale,
        softmax_scale=index_dim**-0.5,
        softmax_scale_source="index_head_dim ** -0.5",
        shared_key_rope=True,
    )


def _sliding_theta_key(model_type: str | None) -> str:
    """Where a model type's config gives the sliding layers' θ."""
    by_type = LAYER_TYPE_ROPE_MODEL_TYPES.get(model_type or "")
    if by_type is not None and by_type.sliding_theta_key is None:
        return f"rope_parameters.{SLIDING}.rope_theta"
    return "rope_local_base_freq"


def _pattern_warnings(
    text: TextFields, model_type: str | None, layers: Sequence[LayerRope], nested: bool
) -> list[ConfigWarning]:
    warnings: list[ConfigWarning] = []
    sliding_scaled = [
        layer.layer
        for layer in layers
        if layer.layer_type == SLIDING and layer.method is not None and layer.params.get("factor", 1) != 1
    ]
    expects_unscaled = model_type in SLIDING_UNSCALED_MODEL_TYPES or text.rope_local_base_freq is not None
    if sliding_scaled and expects_unscaled:
        first = layers[sliding_scaled[0]]
        fix = (
            "Give the sliding_attention rope parameters rope_type default and the local rope_theta."
            if nested
            else "Give rope parameters per layer type."
        )
        warnings.append(
            ConfigWarning(
                "sliding_layers_scaled",
                f"the sliding-window layers get the global scaling ({first.method}, factor "
                f"{first.params.get('factor')}); {model_type} trains them unscaled with their own rope_theta "
                f"({_sliding_theta_key(model_type)}). {fix}",
                sliding_scaled,
                {
                    "method": first.method,
                    "factor": first.params.get("factor"),
                    "base": first.params.get("base"),
                    "per_layer_type": nested,
                },
            )
        )
    narrowed = [
        layer.layer
        for layer in layers
        if model_type in PROPORTIONAL_MODEL_TYPES
        and layer.layer_type == FULL
        and layer.method is not None
        and not takes_fraction(layer.method)
        and layer.rotary_dim < layer.head_dim
    ]
    if narrowed:
        first = layers[narrowed[0]]
        warnings.append(
            ConfigWarning(
                "partial_rotary_not_proportional",
                f"{model_type}'s global layers rotate with proportional RoPE (rope_type proportional): ω over the "
                f"whole {first.head_dim}-wide head and the pairs past partial_rotary_factor·d/2 left unrotated. "
                f"This config rotates a {first.rotary_dim}-feature slice with ω over {first.rotary_dim} instead "
                "(another denominator, other features): set rope_type proportional for full_attention.",
                narrowed,
                {"method": first.method, "rotary_dim": first.rotary_dim, "head_dim": first.head_dim},
            )
        )
    rotated_mla = [layer.layer for layer in layers if layer.shared_key_rope and model_type in NOPE_MLA_MODEL_TYPES]
    if rotated_mla:
        warnings.append(
            ConfigWarning(
                "mla_rope_in_nope_model",
                f"{model_type}'s MLA layers are trained without position (its own code has no rotary embedding), "
                f"but this config does not say mla_use_nope: true, so the qk_rope_head_dim={text.qk_rope_head_dim} "
                "part of every MLA head is rotated here, as vLLM rotates it: positions the model never saw. Set "
                "mla_use_nope: true.",
                rotated_mla,
                {"mla_use_nope": text.mla_use_nope, "qk_rope_head_dim": text.qk_rope_head_dim, "model_code": "NoPE"},
            )
        )
    indexed = [layer.layer for layer in layers if layer.indexer is not None]
    if indexed and model_type in INDEXER_INTERLEAVED_MODEL_TYPES and text.indexer_rope_interleave is None:
        warnings.append(
            ConfigWarning(
                "indexer_pairing_unspecified",
                f"the config does not say indexer_rope_interleave: {model_type}'s own code rotates the sparse "
                "indexer's q and k in interleaved pairs (resolved so), but vLLM reads a missing key as false and "
                "rotates them in halves, which picks other keys. Set indexer_rope_interleave: true.",
                indexed,
                {"model_code": "interleaved", "vllm_default": "half", "indexer_rope_interleave": None},
            )
        )
    by_method: dict[str, list[int]] = {}
    for layer in layers:
        if layer.method is not None:
            by_method.setdefault(layer.method, []).append(layer.layer)
    for name, indices in by_method.items():  # what the registry says of each method a config uses (static YaRN)
        describe = get_method(name).config_warning
        said = None if describe is None else describe(layers[indices[0]].params, layers[indices[0]].attention_scale)
        if said is not None:
            code, message, evidence = said
            warnings.append(ConfigWarning(code, message, indices, evidence))
    dynamic = [
        layer.layer for layer in layers if layer.method is not None and get_method(layer.method).length_dependent
    ]
    if dynamic:
        first = layers[dynamic[0]]
        warnings.append(
            ConfigWarning(
                "dynamic_scaling_stale_cache",
                f"{first.method} changes its frequencies with the sequence length: keys cached before the length "
                f"passed original_max_position_embeddings={first.params.get('original_max_position_embeddings')} "
                "were rotated with other frequencies than the queries after it (recompute or do not cache).",
                dynamic,
                {
                    "method": first.method,
                    "original_max_position_embeddings": first.params.get("original_max_position_embeddings"),
                },
            )
        )
    return warnings


# ---------------------------------------------------------------------------------------------- diffusers
# a diffusers config's _class_name -> the method its blocks rotate with (each method's ``config_classes``)
DIFFUSERS_TRANSFORMERS: dict[str, str] = {name: spec.name for spec in list_methods() for name in spec.config_classes}
DIFFUSERS_THETA = 10000.0  # both models fix θ in code (FluxPosEmbed(theta=10000), WanRotaryPosEmbed's default)
FLUX_AXES_DIMS = (16, 56, 56)


def _resolve_diffusers(config: DiffusersFields) -> ResolvedConfig:
    """A diffusers video/image transformer config (``transformer/config.json``): every block rotates its q and k
    by (t, h, w) with ``rope_nd``, interleaved pairs. FLUX.1: ``axes_dims_rope`` (16, 56, 56), its double and
    single blocks; Wan 2.1: h = w = 2·(d // 6) features, t the rest."""
    name, head_dim = config.class_name, config.attention_head_dim
    if name == "FluxTransformer2DModel":
        dims = list(config.axes_dims_rope or FLUX_AXES_DIMS)
        if any(dim % 2 for dim in dims):
            raise InvalidInput(("axes_dims_rope",), f"each axis rotates pairs of features: must be even, got {dims}")
        if sum(dims) > head_dim:
            raise InvalidInput(
                ("axes_dims_rope",), f"rotates {sum(dims)} features, more than attention_head_dim = {head_dim}"
            )
        blocks = config.num_layers + config.num_single_layers
    else:
        spatial = 2 * (head_dim // 6)
        dims = [head_dim - 2 * spatial, spatial, spatial]
        blocks = config.num_layers
    params = {"axes_dims": dims, "theta": DIFFUSERS_THETA}
    rotary_dim = sum(dims)
    layers = [
        LayerRope(
            layer=index,
            layer_type=FULL,
            method=DIFFUSERS_TRANSFORMERS[name],
            params=params,
            head_dim=head_dim,
            rotary_dim=rotary_dim,
            rotary_slice=(0, rotary_dim),
            pairing="interleaved",
            attention_scale=1.0,
            softmax_scale=head_dim**-0.5,
            softmax_scale_source="attention_head_dim ** -0.5",
        )
        for index in range(blocks)
    ]
    return ResolvedConfig(model_type=name, layers=layers, warnings=[])


# ---------------------------------------------------------------------------------------------- dialects
# vLLM's and older spellings of a rope type -> Hugging Face's (the first of each method's ``config_spellings``)
HF_ROPE_TYPES = {
    spelling: spec.config_spellings[0] for spec in list_methods() for spelling in spec.config_spellings[1:]
}


def _canonical_rope(block: Any, loc: Loc) -> dict[str, Any]:
    """A rope dict with ``rope_type`` (not ``type``) in Hugging Face's spelling of the type; anything but an
    object is refused at ``loc`` (a key the resolver did not need to read can still be malformed)."""
    if not isinstance(block, Mapping):
        raise InvalidInput(loc, f"must be an object (a rope dict), got {type(block).__name__}")
    converted = {key: value for key, value in block.items() if key != "type"}
    rope_type = block.get("rope_type", block.get("type", "default"))
    converted["rope_type"] = HF_ROPE_TYPES.get(rope_type, rope_type)
    return converted


def convert_config(config: Mapping[str, Any] | str, to: str) -> dict[str, Any]:
    """The same model config in another dialect: ``"v5"`` (Hugging Face v5: ``rope_parameters`` holding
    ``rope_theta`` and ``partial_rotary_factor``, one dict per layer type when the layer types differ) or ``"v4"``
    (``rope_scaling`` next to a top-level ``rope_theta``; Gemma 3's sliding θ as ``rope_local_base_freq``).
    vLLM's rope-type spellings become Hugging Face's. Resolving the result gives the same layers."""
    if to not in ("v4", "v5"):
        raise InvalidInput(("to",), f"must be 'v4' or 'v5', got {to!r}")
    config = config_or_preset(config)
    resolved = resolve_config(config)  # refuses what cannot be read, before anything is rewritten
    converted = dict(config)
    text = dict(text_config(config))
    with located(("text_config",) if "text_config" in config else ()):
        if resolved.model_type in REGIME_MODEL_TYPES:
            text = _convert_regimes(text, to)
        else:
            text = _convert_v5(text, resolved) if to == "v5" else _convert_v4(text, resolved)
    result = {**converted, "text_config": text} if "text_config" in config else text
    if resolve_config(result).layers != resolved.layers:
        raise InvalidInput(("to",), f"{to} cannot spell this config without changing a layer's rotation")
    return result


def _convert_regimes(text: dict[str, Any], to: str) -> dict[str, Any]:
    """DeepSeek-V4: v5 nests the two regimes' rope dicts (``rope_parameters: {"main": ..., "compress": ...}``, each
    with its rope_theta and partial_rotary_factor, as transformers saves them); v4 is the published spelling
    (``rope_theta``, ``compress_rope_theta``, ``partial_rotary_factor`` and the compress regime's
    ``rope_scaling``), which holds plain RoPE for main and one partial_rotary_factor only."""
    fields = read(TextFields, text)
    head_dim = _required(fields.head_dim, "head_dim")
    regimes, _nested = _v4_regimes(fields, head_dim)
    dicts: dict[str, dict[str, Any]] = {}
    for name, regime in regimes.items():
        spec, params = get_method(regime.method.name), dict(regime.method.params)
        rope = {"rope_type": spec.config_spellings[0], "rope_theta": params.pop("base")}
        rope |= {key: value for key, value in params.items() if key in spec.config_keys}
        dicts[name] = rope | {"partial_rotary_factor": regime.fraction}
    for key in ("rope_scaling", "rope_parameters", "rope_theta", "compress_rope_theta", "partial_rotary_factor"):
        text.pop(key, None)
    if to == "v5":
        text["rope_parameters"] = dicts
        return text
    main, compress = dicts[MAIN_REGIME], dicts[COMPRESS_REGIME]
    if set(main) - {"rope_type", "rope_theta", "partial_rotary_factor"} or main["rope_type"] != "default":
        raise InvalidInput(("rope_parameters", MAIN_REGIME), "v4 gives the main regime plain RoPE (rope_theta) only")
    if main["partial_rotary_factor"] != compress["partial_rotary_factor"]:
        raise InvalidInput(
            ("rope_parameters", COMPRESS_REGIME, "partial_rotary_factor"), "v4 has one partial_rotary_factor"
        )
    text["rope_theta"] = main["rope_theta"]
    text["compress_rope_theta"] = compress.pop("rope_theta")
    text["partial_rotary_factor"] = compress.pop("partial_rotary_factor")
    text["rope_scaling"] = None if compress == {"rope_type": "default"} else compress
    return text


def _convert_v5(text: dict[str, Any], resolved: ResolvedConfig) -> dict[str, Any]:
    theta = text.pop("rope_theta", None)
    factor = text.pop("partial_rotary_factor", None)
    local_theta = text.pop("rope_local_base_freq", None)
    source = "rope_scaling" if text.get("rope_scaling") else "rope_parameters"
    block = text.pop("rope_scaling", None) or text.pop("rope_parameters", None) or {}
    types = {layer.layer_type for layer in resolved.layers}
    nested = isinstance(block, Mapping) and bool(block) and all(key in (FULL, SLIDING, CHUNKED) for key in block)
    if nested:
        text["rope_parameters"] = {
            key: None if value is None else _canonical_rope(value, (source, key)) for key, value in block.items()
        }
        return text
    flat = _canonical_rope(block, (source,))
    if theta is not None:
        flat.setdefault("rope_theta", theta)
    flat.setdefault("rope_theta", DEFAULT_THETA)
    if factor is not None:
        flat.setdefault("partial_rotary_factor", factor)
    by_type = LAYER_TYPE_ROPE_MODEL_TYPES.get(resolved.model_type or "")
    if by_type is not None and SLIDING in types:
        if source == "rope_parameters":
            _refuse_ignored_flat(block, resolved)
        # what the class fills in (LayerTypeRope): the θ each layer type resolved to
        bases = {layer.layer_type: layer.params.get("base") for layer in resolved.layers if layer.method is not None}
        flat["rope_theta"] = bases.get(FULL, flat["rope_theta"])
        local_theta = bases.get(SLIDING, local_theta)
    if local_theta is not None and SLIDING in types:
        if "layer_types" not in text:
            text["layer_types"] = [layer.layer_type for layer in resolved.layers]
            text.pop("sliding_window_pattern", None)
        text["rope_parameters"] = {
            FULL: flat,
            SLIDING: {"rope_type": "default", "rope_theta": local_theta},
        }
        return text
    text["rope_parameters"] = flat
    return text


def _refuse_ignored_flat(block: Any, resolved: ResolvedConfig) -> None:
    """A flat rope_parameters of a model type whose config class reads them only per layer type (what the
    warning flat_rope_parameters_ignored says) has no faithful conversion: refused at ("rope_parameters",)."""
    types = {layer.layer_type for layer in resolved.layers}
    nested = isinstance(block, Mapping) and all(key in (FULL, SLIDING, CHUNKED) for key in block)
    if block and not nested and SLIDING in types and resolved.model_type in LAYER_TYPE_ROPE_MODEL_TYPES:
        raise InvalidInput(
            ("rope_parameters",),
            f"{resolved.model_type}'s config class in transformers does not read a flat rope_parameters (see the "
            "warning flat_rope_parameters_ignored): nest it under 'full_attention' first; converting it would "
            "change what the model runs or keep a dict that is never read",
        )


def _convert_v4(text: dict[str, Any], resolved: ResolvedConfig) -> dict[str, Any]:
    block = text.pop("rope_parameters", None)
    if block is None or text.get("rope_scaling"):
        return text  # already v4, or no rope dict at all, or a rope_parameters transformers never reads
    _refuse_ignored_flat(block, resolved)
    where: Loc = ("rope_parameters",)
    nested = isinstance(block, Mapping) and bool(block) and all(key in (FULL, SLIDING, CHUNKED) for key in block)
    if nested:
        sliding, full = block.get(SLIDING), block.get(FULL)
        if set(block) - {FULL, SLIDING} or sliding is None or full is None:
            raise InvalidInput(("rope_parameters",), "v4 has no per-layer-type rope dicts beyond Gemma's sliding θ")
        sliding = _canonical_rope(sliding, ("rope_parameters", SLIDING))
        if sliding["rope_type"] != "default" or set(sliding) - {"rope_type", "rope_theta"}:
            raise InvalidInput(
                ("rope_parameters", SLIDING), "v4 gives sliding layers only an unscaled θ (rope_local_base_freq)"
            )
        local_theta = sliding.get("rope_theta", DEFAULT_THETA)
        by_type = LAYER_TYPE_ROPE_MODEL_TYPES.get(resolved.model_type or "")
        if by_type is None or by_type.sliding_theta_key is not None:
            text["rope_local_base_freq"] = local_theta
        elif local_theta != by_type.sliding_theta:  # Olmo 3: v4 has no key for the sliding θ
            raise InvalidInput(
                ("rope_parameters", SLIDING, "rope_theta"),
                f"{resolved.model_type} in v4 gives the sliding layers its config class's θ = "
                f"{by_type.sliding_theta:g}; {local_theta:g} cannot be written in v4",
            )
        block, where = full, ("rope_parameters", FULL)
    rope = _canonical_rope(block, where)
    text["rope_theta"] = rope.pop("rope_theta", text.get("rope_theta", DEFAULT_THETA))
    method = ROPE_TYPE_METHODS.get(str(rope["rope_type"]))
    if "partial_rotary_factor" in rope and not (method is not None and takes_fraction(method)):
        # (a method reading the fraction itself keeps it in its dict: at the top level it would narrow every
        # layer type's rotation, Gemma 4's sliding layers too)
        text["partial_rotary_factor"] = rope.pop("partial_rotary_factor")
    text["rope_scaling"] = None if rope == {"rope_type": "default"} else rope
    return text
