"""A model config in another dialect: Hugging Face v5 (``rope_parameters`` holding ``rope_theta`` and
``partial_rotary_factor``, per layer type where the layer types differ) or v4 (``rope_scaling`` next to a top-level
``rope_theta``), each checked by resolving both and comparing every layer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc.errors import InvalidInput, Loc, located
from posenc.pe import get_method
from posenc.real_models.config_fields import TextFields, read
from posenc.real_models.configs.common import (
    DEFAULT_THETA,
    FULL,
    HF_ROPE_TYPES,
    PER_LAYER_TYPE_KEYS,
    ROPE_TYPE_METHODS,
    SLIDING,
    ResolvedConfig,
    required,
    takes_fraction,
    text_config,
)
from posenc.real_models.configs.regimes import COMPRESS_REGIME, MAIN_REGIME, v4_regimes
from posenc.real_models.configs.resolver import resolve_config
from posenc.real_models.model_types import model_type_record
from posenc.real_models.presets import config_or_preset


def _canonical_rope(block: Any, loc: Loc) -> dict[str, Any]:
    """A rope dict with ``rope_type`` (not ``type``) in Hugging Face's spelling of the type; anything but an
    object is refused at ``loc`` (a key the resolver did not need to read can still be malformed)."""
    if not isinstance(block, Mapping):
        raise InvalidInput(loc, f"must be an object (a rope dict), got {type(block).__name__}")
    converted = {key: value for key, value in block.items() if key != "type"}
    rope_type = block.get("rope_type", block.get("type", "default"))
    if not isinstance(rope_type, str):
        key = "rope_type" if "rope_type" in block else "type"
        raise InvalidInput((*loc, key), f"must be a string (a rope type), got {type(rope_type).__name__}")
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
    record = model_type_record(resolved.model_type)
    if to == "v4" and record.rope_per_layer_type and record.layer_type_rope is None:
        raise InvalidInput(
            ("to",),
            f"{record.model_type}'s config class in transformers reads its rope parameters only per layer type "
            "(rope_parameters): v4's flat rope_scaling cannot spell them",
        )
    converted = dict(config)
    text = dict(text_config(config))
    with located(("text_config",) if "text_config" in config else ()):
        if record.regimes:
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
    head_dim = required(fields.head_dim, "head_dim")
    regimes, _nested = v4_regimes(fields, head_dim)
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
    nested = isinstance(block, Mapping) and bool(block) and all(key in PER_LAYER_TYPE_KEYS for key in block)
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
    by_type = model_type_record(resolved.model_type).layer_type_rope
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
    nested = isinstance(block, Mapping) and all(key in PER_LAYER_TYPE_KEYS for key in block)
    if block and not nested and SLIDING in types and model_type_record(resolved.model_type).layer_type_rope:
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
    nested = isinstance(block, Mapping) and bool(block) and all(key in PER_LAYER_TYPE_KEYS for key in block)
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
        by_type = model_type_record(resolved.model_type).layer_type_rope
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
