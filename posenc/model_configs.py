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
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from pydantic import ValidationError

from posenc.errors import InvalidInput, located
from posenc.pe import RotaryContext, RotaryFrequencies, get_method

DEFAULT_THETA = 10000.0  # what Hugging Face and vLLM assume when a config names no rope_theta
FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"

# rope_type (every spelling read) -> the registered method
ROPE_TYPE_METHODS = {
    "default": "rope",
    "mrope": "rope",  # Qwen2-VL's v4 spelling; with mrope_section it resolves to the method mrope
    "linear": "rope_linear",
    "dynamic": "rope_dynamic_ntk",
    "yarn": "rope_yarn",
    "deepseek_yarn": "rope_yarn",
    "longrope": "rope_longrope",
    "su": "rope_longrope",
    "llama3": "rope_llama3",
}
# the keys of a rope dict each method takes, in the method's own names
METHOD_KEYS: dict[str, tuple[str, ...]] = {
    "rope": (),
    "mrope": (),
    "rope_linear": ("factor",),
    "rope_dynamic_ntk": ("factor", "original_max_position_embeddings"),
    "rope_yarn": (
        "factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "attention_factor",
        "mscale",
        "mscale_all_dim",
        "truncate",
    ),
    "rope_longrope": (
        "short_factor",
        "long_factor",
        "original_max_position_embeddings",
        "max_position_embeddings",
        "attention_factor",
    ),
    "rope_llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}
# model types whose rotary pairs are interleaved unless the config says rope_interleave: false (Llama 4 rotates
# complex numbers made of adjacent features; DeepSeek's rope_interleave defaults to true)
INTERLEAVED_MODEL_TYPES = frozenset({"llama4", "llama4_text", "deepseek_v2", "deepseek_v3"})
# model types whose sliding-window layers are trained unscaled (their own θ), whatever the global layers use
SLIDING_UNSCALED_MODEL_TYPES = frozenset({"gemma3", "gemma3_text"})


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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["rotary_slice"] = list(self.rotary_slice)
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
def _int(config: Mapping[str, Any], key: str, *, required: bool = True) -> int | None:
    value = config.get(key)
    if value is None:
        if required:
            raise InvalidInput((key,), "is required to resolve the rotary setup")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput((key,), f"must be a positive integer, got {value!r}")
    return value


def _number(value: Any, loc: tuple[str | int, ...]) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(loc, f"must be a finite number, got {value!r}")
    return float(value)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature: 0.1 · mscale · ln(s) + 1 for s > 1, else 1 (DeepSeek's ``yarn_get_mscale``)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def query_temperature(positions: torch.Tensor, floor_scale: float, attn_scale: float) -> torch.Tensor:
    """Llama 4's query temperature on its NoPE layers (Nakanishi 2025, "Scalable-Softmax"; Meta's Llama 4 code):
    τ(n) = log(1 + floor((n + 1) / floor_scale)) · attn_scale + 1, multiplying q at position n. (N,) float64."""
    steps = torch.floor((positions.to(torch.float64) + 1.0) / floor_scale)  # (N,)
    return torch.log1p(steps) * attn_scale + 1.0


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text model's fields: ``text_config`` when the config nests one (multimodal models), else itself."""
    nested = config.get("text_config")
    if nested is None:
        return config
    if not isinstance(nested, Mapping):
        raise InvalidInput(("text_config",), "must be an object (the text model's config)")
    return nested


def _layer_types(text: Mapping[str, Any], layers: int) -> list[str]:
    declared = text.get("layer_types")
    if declared is not None:
        if not isinstance(declared, list) or len(declared) != layers or not all(isinstance(t, str) for t in declared):
            raise InvalidInput(("layer_types",), f"must list one attention type per layer ({layers})")
        return list(declared)
    pattern = text.get("sliding_window_pattern")
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0 and text.get("sliding_window"):
        return [FULL if (index + 1) % pattern == 0 else SLIDING for index in range(layers)]
    if text.get("attention_chunk_size"):
        return [CHUNKED] * layers
    return [FULL] * layers


def _rope_layers(text: Mapping[str, Any], layers: int) -> list[bool]:
    """Which layers rotate: ``no_rope_layers`` (1 = RoPE), else ``no_rope_layer_interval``, else all."""
    listed = text.get("no_rope_layers")
    if isinstance(listed, list) and listed:
        if len(listed) != layers or not all(value in (0, 1) for value in listed):
            raise InvalidInput(("no_rope_layers",), f"must hold one 0 (NoPE) or 1 (RoPE) per layer ({layers})")
        return [bool(value) for value in listed]
    interval = text.get("no_rope_layer_interval")
    if isinstance(interval, int) and not isinstance(interval, bool) and interval > 0:
        return [(index + 1) % interval != 0 for index in range(layers)]
    return [True] * layers


def _rotary_dims(
    text: Mapping[str, Any], head_dim: int, rope: Mapping[str, Any]
) -> tuple[int, int, list[ConfigWarning]]:
    """(rotary_dim, start of the rotated slice, warnings) from the partial-rotation keys."""
    warnings: list[ConfigWarning] = []
    mla = _int(text, "qk_rope_head_dim", required=False)
    if mla is not None:
        nope = _int(text, "qk_nope_head_dim", required=False) or 0
        return mla, nope, warnings
    spellings: dict[str, int] = {}
    top = text.get("partial_rotary_factor")
    inner = rope.get("partial_rotary_factor")
    if inner is not None:
        spellings["rope_parameters.partial_rotary_factor"] = int(head_dim * _number(inner, ("partial_rotary_factor",)))
    if top is not None:
        spellings["partial_rotary_factor"] = int(head_dim * _number(top, ("partial_rotary_factor",)))
    if text.get("rotary_pct") is not None:
        spellings["rotary_pct"] = int(head_dim * _number(text["rotary_pct"], ("rotary_pct",)))
    if text.get("rotary_dim") is not None:
        spellings["rotary_dim"] = _int(text, "rotary_dim") or head_dim
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
    if rotary_dim % 2:
        rotary_dim += 1  # Hugging Face rounds an odd partial rotary dim up (inv_freq over arange(0, dim, 2))
    if not 2 <= rotary_dim <= head_dim:
        raise InvalidInput(("partial_rotary_factor",), f"gives {rotary_dim} rotated features of a {head_dim}-dim head")
    return rotary_dim, 0, warnings


def _rope_blocks(
    text: Mapping[str, Any], types: Sequence[str], warnings: list[ConfigWarning]
) -> tuple[dict[str, Mapping[str, Any] | None], bool, str]:
    """The rope dict of each layer type, whether the config gave one per layer type, and the key it came from."""
    source = "rope_parameters" if text.get("rope_parameters") is not None else "rope_scaling"
    given = text.get(source)
    if given is not None and not isinstance(given, Mapping):
        raise InvalidInput((source,), "must be an object")
    given = given or {}
    present = sorted(set(types))
    nested = bool(given) and all(key in present or key in (FULL, SLIDING, CHUNKED) for key in given)
    top_theta = text.get("rope_theta")
    blocks: dict[str, Mapping[str, Any] | None] = {}
    if nested:
        for layer_type in present:
            if layer_type not in given:
                raise InvalidInput((source, layer_type), f"gives no rope parameters for the layer type {layer_type!r}")
            block = given[layer_type]
            if block is not None and not isinstance(block, Mapping):
                raise InvalidInput((source, layer_type), "must be an object, or null for a NoPE layer type")
            blocks[layer_type] = block
    else:
        for layer_type in present:
            blocks[layer_type] = given
    local_theta = text.get("rope_local_base_freq")
    if not nested and local_theta is not None and SLIDING in present and source == "rope_scaling":
        # Gemma 3 (v4): sliding layers use their own θ, unscaled; rope_scaling is the global layers'
        blocks[SLIDING] = {"rope_type": "default", "rope_theta": local_theta}
    for layer_type, block in blocks.items():
        if block is None:
            continue
        theta = block.get("rope_theta")
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
        elif not nested and source == "rope_parameters" and theta is not None and top_theta not in (None, theta):
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
    return blocks, nested, source


def _method_params(
    block: Mapping[str, Any], text: Mapping[str, Any], loc: tuple[str | int, ...]
) -> tuple[str, dict[str, Any], list[int] | None]:
    """(method, params, mrope_section) of one rope dict."""
    rope_type = block.get("rope_type", block.get("type", "default"))
    if rope_type not in ROPE_TYPE_METHODS:
        raise InvalidInput(
            (*loc, "rope_type"),
            f"{rope_type!r} is not a rope type posenc resolves; known: {sorted(ROPE_TYPE_METHODS)}",
        )
    method = ROPE_TYPE_METHODS[rope_type]
    theta = block.get("rope_theta", text.get("rope_theta", DEFAULT_THETA))
    params: dict[str, Any] = {"base": _number(theta, (*loc, "rope_theta"))}
    max_positions = text.get("max_position_embeddings")
    for key in METHOD_KEYS[method]:
        value = block.get(key)
        if key == "original_max_position_embeddings":
            # Phi-3 keeps it at the top level, and it wins there (as in transformers); else the model's length
            value = text.get(key) if text.get(key) is not None else value
            value = value if value is not None else max_positions
        if key == "max_position_embeddings":
            value = max_positions
        if value is not None:
            params[key] = value
    if method == "rope_longrope" and "max_position_embeddings" in params:
        params.setdefault("original_max_position_embeddings", params["max_position_embeddings"])
    section = block.get("mrope_section")
    if section is not None:
        if not isinstance(section, list) or len(section) != 3 or not all(isinstance(s, int) for s in section):
            raise InvalidInput((*loc, "mrope_section"), "must be three integers (pairs per t, h, w section)")
        if method == "rope":  # M-RoPE: the same frequencies, each pair turned by t, h or w
            method = "mrope"
            params["mrope_section"] = list(section)
            params["layout"] = "interleaved" if block.get("mrope_interleaved") else "chunked"
    return method, params, section


def layer_frequencies(layer: LayerRope, seq_len: int = 1) -> RotaryFrequencies:
    """The layer's rotary frequencies from its registered method (float64), at a sequence of ``seq_len``."""
    if layer.method is None:
        raise InvalidInput(("layer",), f"layer {layer.layer} is a NoPE layer: it has no rotation")
    spec = get_method(layer.method)
    try:
        params = spec.parse_params(dict(layer.params))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput(("params", *first["loc"]), first["msg"]) from None
    frequencies: RotaryFrequencies = spec.fn(params, RotaryContext(rotary_dim=layer.rotary_dim, seq_len=seq_len))
    return frequencies


# ---------------------------------------------------------------------------------------------- resolve
def resolve_config(config: Mapping[str, Any]) -> ResolvedConfig:
    """One ``LayerRope`` per layer of the model ``config`` describes, and the warnings its patterns raise.
    Errors are ``InvalidInput`` located in the config (the text config's keys for a nested one)."""
    if not isinstance(config, Mapping):
        raise InvalidInput((), "must be a model config object (config.json)")
    if config.get("_class_name") in DIFFUSERS_TRANSFORMERS:
        return _resolve_diffusers(config)
    text = text_config(config)
    with located(("text_config",) if text is not config else ()):
        return _resolve_text(config, text)


def _resolve_text(config: Mapping[str, Any], text: Mapping[str, Any]) -> ResolvedConfig:
    model_type = text.get("model_type", config.get("model_type"))
    heads = _int(text, "num_attention_heads")
    assert heads is not None
    layers = _int(text, "num_hidden_layers")
    assert layers is not None
    hidden = _int(text, "hidden_size", required=text.get("head_dim") is None)
    head_dim = _int(text, "head_dim", required=False) or (hidden or 0) // heads
    mla_rope = _int(text, "qk_rope_head_dim", required=False)
    if mla_rope is not None:
        head_dim = (_int(text, "qk_nope_head_dim", required=False) or 0) + mla_rope
    warnings: list[ConfigWarning] = []
    types = _layer_types(text, layers)
    rotating = _rope_layers(text, layers)
    blocks, nested, source = _rope_blocks(text, types, warnings)
    interleave = text.get("rope_interleave", model_type in INTERLEAVED_MODEL_TYPES)
    pairing = "interleaved" if interleave or text.get("is_neox_style") is False else "half"
    window = _int(text, "sliding_window", required=False)
    chunk = _int(text, "attention_chunk_size", required=False)
    pre_attn = text.get("query_pre_attn_scalar")
    temperature = None
    if text.get("attn_temperature_tuning"):
        temperature = {
            "floor_scale": text.get("floor_scale", 8192),
            "attn_scale": text.get("attn_scale", 0.1),
            "formula": "q · (log(floor((n + 1) / floor_scale) + 1) · attn_scale + 1)",
            "applies_to": "NoPE layers",
        }
    resolved: list[LayerRope] = []
    methods_by_type: dict[str, tuple[str, dict[str, Any], list[int] | None]] = {}
    for layer_type, block in blocks.items():
        if block is not None:
            loc: tuple[str | int, ...] = (source, layer_type) if nested else (source,)
            methods_by_type[layer_type] = _method_params(block, text, loc)
    for index, layer_type in enumerate(types):
        block = blocks[layer_type]
        rope = block is not None and rotating[index]
        if layer_type == CHUNKED and not rotating[index] and "layer_types" not in text:
            layer_type = FULL  # Llama 4: the NoPE layers attend globally, the RoPE layers in chunks
        if rope:
            assert block is not None
            method, params, section = methods_by_type[layer_type]
            rotary_dim, start, dim_warnings = _rotary_dims(text, head_dim, block)
            warnings.extend(w for w in dim_warnings if w not in warnings)
            if method == "mrope" and section is not None and 2 * sum(section) != rotary_dim:
                # sections that do not cover the rotated pairs cannot be applied: resolved as 1D RoPE (what text
                # positions, t = h = w, give anyway), and warned about (mrope_section_mismatch)
                method, params = "rope", {"base": params["base"]}
        else:
            method, params, section, rotary_dim, start = None, {}, None, 0, 0
        softmax_scale, scale_source = head_dim**-0.5, "head_dim ** -0.5"
        if pre_attn is not None:
            softmax_scale, scale_source = (
                _number(pre_attn, ("query_pre_attn_scalar",)) ** -0.5,
                ("query_pre_attn_scalar ** -0.5"),
            )
        if mla_rope is not None and method == "rope_yarn" and params.get("mscale_all_dim"):
            mscale = yarn_mscale(float(params["factor"]), float(params["mscale_all_dim"]))
            softmax_scale *= mscale * mscale
            scale_source = "(qk_nope_head_dim + qk_rope_head_dim) ** -0.5 * mscale(factor, mscale_all_dim) ** 2"
        layer = LayerRope(
            layer=index,
            layer_type=layer_type,
            method=method,
            params=params,
            head_dim=head_dim,
            rotary_dim=rotary_dim,
            rotary_slice=(start, start + rotary_dim),
            pairing=pairing,
            attention_scale=1.0,
            softmax_scale=softmax_scale,
            softmax_scale_source=scale_source,
            window=window if layer_type == SLIDING else None,
            chunk=chunk if layer_type == CHUNKED and rope else None,
            query_temperature=temperature if temperature is not None and not rope else None,
            mrope_section=section,
            shared_key_rope=mla_rope is not None and rope,
        )
        if method is not None:  # the factor on cos and sin, as the method computes it
            layer = replace(layer, attention_scale=float(layer_frequencies(layer).attention_scale))
        resolved.append(layer)
    warnings.extend(_pattern_warnings(text, model_type, resolved, nested))
    return ResolvedConfig(model_type=model_type, layers=resolved, warnings=warnings)


def _pattern_warnings(
    text: Mapping[str, Any], model_type: str | None, layers: Sequence[LayerRope], nested: bool
) -> list[ConfigWarning]:
    warnings: list[ConfigWarning] = []
    sliding_scaled = [
        layer.layer
        for layer in layers
        if layer.layer_type == SLIDING and layer.method not in (None, "rope") and layer.params.get("factor", 1) != 1
    ]
    expects_unscaled = model_type in SLIDING_UNSCALED_MODEL_TYPES or text.get("rope_local_base_freq") is not None
    if sliding_scaled and expects_unscaled and not nested:
        first = layers[sliding_scaled[0]]
        warnings.append(
            ConfigWarning(
                "sliding_layers_scaled",
                f"the sliding-window layers get the global scaling ({first.method}, factor "
                f"{first.params.get('factor')}); {model_type} trains them unscaled with their own rope_theta "
                "(rope_local_base_freq). Give rope parameters per layer type.",
                sliding_scaled,
                {"method": first.method, "factor": first.params.get("factor"), "base": first.params.get("base")},
            )
        )
    yarn = [layer.layer for layer in layers if layer.method == "rope_yarn"]
    if yarn:
        params = layers[yarn[0]].params
        warnings.append(
            ConfigWarning(
                "static_yarn",
                f"YaRN is static: every prompt, also those shorter than original_max_position_embeddings="
                f"{params.get('original_max_position_embeddings')}, gets the interpolated low frequencies (factor "
                f"{params.get('factor')}) and the attention factor {layers[yarn[0]].attention_scale:.6g}; short "
                "prompts score worse than with plain RoPE. Leave the scaling out when serving short contexts.",
                yarn,
                {
                    "factor": params.get("factor"),
                    "original_max_position_embeddings": params.get("original_max_position_embeddings"),
                    "attention_scale": layers[yarn[0]].attention_scale,
                },
            )
        )
    dynamic = [layer.layer for layer in layers if layer.method in ("rope_dynamic_ntk", "rope_longrope")]
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
    mismatched = [
        layer.layer
        for layer in layers
        if layer.mrope_section is not None and 2 * sum(layer.mrope_section) != layer.rotary_dim
    ]
    if mismatched:
        layer = layers[mismatched[0]]
        assert layer.mrope_section is not None
        warnings.append(
            ConfigWarning(
                "mrope_section_mismatch",
                f"mrope_section {layer.mrope_section} covers {2 * sum(layer.mrope_section)} features, but "
                f"{layer.rotary_dim} are rotated: the sections are in pairs and must sum to rotary_dim / 2.",
                mismatched,
                {"mrope_section": layer.mrope_section, "rotary_dim": layer.rotary_dim},
            )
        )
    return warnings


# ---------------------------------------------------------------------------------------------- diffusers
DIFFUSERS_TRANSFORMERS = frozenset({"FluxTransformer2DModel", "WanTransformer3DModel"})
DIFFUSERS_THETA = 10000.0  # both models fix θ in code (FluxPosEmbed(theta=10000), WanRotaryPosEmbed's default)


def _resolve_diffusers(config: Mapping[str, Any]) -> ResolvedConfig:
    """A diffusers video/image transformer config (``transformer/config.json``): every block rotates its q and k
    by (t, h, w) with ``rope_nd``, interleaved pairs. FLUX.1: ``axes_dims_rope`` (16, 56, 56), its double and
    single blocks; Wan 2.1: h = w = 2·(d // 6) features, t the rest."""
    name = config["_class_name"]
    head_dim = _int(config, "attention_head_dim")
    assert head_dim is not None
    if name == "FluxTransformer2DModel":
        dims = config.get("axes_dims_rope", [16, 56, 56])
        if not isinstance(dims, list) or len(dims) != 3 or not all(isinstance(d, int) for d in dims):
            raise InvalidInput(("axes_dims_rope",), "must be three integers (features per t, h, w axis)")
        blocks = (_int(config, "num_layers") or 0) + (_int(config, "num_single_layers", required=False) or 0)
    else:
        spatial = 2 * (head_dim // 6)
        dims = [head_dim - 2 * spatial, spatial, spatial]
        blocks = _int(config, "num_layers") or 0
    params = {"axes_dims": list(dims), "theta": DIFFUSERS_THETA}
    rotary_dim = sum(dims)
    layers = [
        LayerRope(
            layer=index,
            layer_type=FULL,
            method="rope_nd",
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
HF_ROPE_TYPES = {"su": "longrope", "deepseek_yarn": "yarn", "mrope": "default"}  # vLLM / older spellings


def _canonical_rope(block: Mapping[str, Any]) -> dict[str, Any]:
    """A rope dict with ``rope_type`` (not ``type``) in Hugging Face's spelling of the type."""
    converted = {key: value for key, value in block.items() if key != "type"}
    rope_type = block.get("rope_type", block.get("type", "default"))
    converted["rope_type"] = HF_ROPE_TYPES.get(rope_type, rope_type)
    return converted


def convert_config(config: Mapping[str, Any], to: str) -> dict[str, Any]:
    """The same model config in another dialect: ``"v5"`` (Hugging Face v5: ``rope_parameters`` holding
    ``rope_theta`` and ``partial_rotary_factor``, one dict per layer type when the layer types differ) or ``"v4"``
    (``rope_scaling`` next to a top-level ``rope_theta``; Gemma 3's sliding θ as ``rope_local_base_freq``).
    vLLM's rope-type spellings become Hugging Face's. Resolving the result gives the same layers."""
    if to not in ("v4", "v5"):
        raise InvalidInput(("to",), f"must be 'v4' or 'v5', got {to!r}")
    resolved = resolve_config(config)  # refuses what cannot be read, before anything is rewritten
    converted = dict(config)
    text = dict(text_config(config))
    with located(("text_config",) if "text_config" in config else ()):
        text = _convert_v5(text, resolved) if to == "v5" else _convert_v4(text, resolved)
    if "text_config" in config:
        converted["text_config"] = text
        return converted
    return text


def _convert_v5(text: dict[str, Any], resolved: ResolvedConfig) -> dict[str, Any]:
    theta = text.pop("rope_theta", None)
    factor = text.pop("partial_rotary_factor", None)
    local_theta = text.pop("rope_local_base_freq", None)
    block = text.pop("rope_scaling", None) or text.pop("rope_parameters", None) or {}
    types = {layer.layer_type for layer in resolved.layers}
    nested = bool(block) and all(key in (FULL, SLIDING, CHUNKED) for key in block)
    if nested:
        text["rope_parameters"] = {
            key: None if value is None else _canonical_rope(value) for key, value in block.items()
        }
        return text
    flat = _canonical_rope(block)
    if theta is not None:
        flat.setdefault("rope_theta", theta)
    flat.setdefault("rope_theta", DEFAULT_THETA)
    if factor is not None:
        flat.setdefault("partial_rotary_factor", factor)
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


def _convert_v4(text: dict[str, Any], resolved: ResolvedConfig) -> dict[str, Any]:
    block = text.pop("rope_parameters", None)
    if block is None:
        return text  # already v4 (or no rope dict at all)
    nested = bool(block) and all(key in (FULL, SLIDING, CHUNKED) for key in block)
    if nested:
        sliding, full = block.get(SLIDING), block.get(FULL)
        if set(block) - {FULL, SLIDING} or sliding is None or full is None:
            raise InvalidInput(("rope_parameters",), "v4 has no per-layer-type rope dicts beyond Gemma's sliding θ")
        sliding = _canonical_rope(sliding)
        if sliding["rope_type"] != "default" or set(sliding) - {"rope_type", "rope_theta"}:
            raise InvalidInput(
                ("rope_parameters", SLIDING), "v4 gives sliding layers only an unscaled θ (rope_local_base_freq)"
            )
        text["rope_local_base_freq"] = sliding.get("rope_theta", DEFAULT_THETA)
        block = full
    rope = _canonical_rope(block)
    text["rope_theta"] = rope.pop("rope_theta", text.get("rope_theta", DEFAULT_THETA))
    if "partial_rotary_factor" in rope:
        text["partial_rotary_factor"] = rope.pop("partial_rotary_factor")
    text["rope_scaling"] = None if rope == {"rope_type": "default"} else rope
    return text
