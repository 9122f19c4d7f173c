"""What a model type's own config class fills in where config.json leaves a key out (its record's ``defaults`` and
M-RoPE sections), and the keys its code never reads (its record's ``ignored_keys``): the config as transformers
runs it, and a warning naming each key, since a reader of config.json alone falls back to something else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc.real_models.config_fields import TextFields
from posenc.real_models.configs.common import (
    DEFAULT_THETA,
    PER_LAYER_TYPE_KEYS,
    ROPE_TYPE_METHODS,
    ConfigWarning,
    method_keys,
)
from posenc.real_models.configs.rope_blocks import rope_source
from posenc.real_models.model_types import ModelTypeRecord

# what a reader of config.json alone assumes for each key a class may fill in
GENERIC_FALLBACKS = {
    "partial_rotary_factor": "1.0 (the whole head rotates)",
    "full_attention_interval": "none (every layer is full attention with RoPE)",
    "rope_theta": f"{DEFAULT_THETA:g}",
    "head_dim": "hidden_size / num_attention_heads",
    "global_head_dim": "head_dim (the full-attention layers as wide as the others)",
    "rope_scaling": "none (plain RoPE)",
    "rope_parameters": f"none (plain RoPE at {DEFAULT_THETA:g} on every layer)",
    "no_rope_layer_interval": "none (every layer rotates)",
    "attention_chunk_size": "none (every layer attends globally)",
    "qk_rope_head_dim": "none (an ordinary head: every feature may rotate)",
    "qk_nope_head_dim": "0",
    "index_head_dim": "none (no sparse indexer)",
    "max_position_embeddings": "none (a length-scaled rope type is refused)",
    "mrope_section": "none (1D RoPE: every pair turned by the same position)",
    "mrope_interleaved": "false (the sections in chunks)",
}


def read_nested(text: TextFields, record: ModelTypeRecord, rope: Mapping[str, Any]) -> bool:
    """Whether a rope dict keyed by layer type is read per layer type: by a generic reader always; by a model
    type's class only where layer types are declared (the config's, or those the class builds)."""
    looks = bool(rope) and all(key in PER_LAYER_TYPE_KEYS for key in rope)
    return looks and (not record.known or record.declares_layer_types or text.layer_types is not None)


def _given_rope_keys(text: TextFields, record: ModelTypeRecord) -> set[str]:
    rope: Mapping[str, Any] = getattr(text, rope_source(text)) or {}
    if not read_nested(text, record, rope):
        return {key for key in rope if key not in PER_LAYER_TYPE_KEYS}
    given: set[str] = set()
    for value in rope.values():
        if isinstance(value, Mapping):  # one rope dict per layer type
            given |= set(value)
    return given


def _rope_kinds(text: TextFields, record: ModelTypeRecord) -> set[str]:
    """The rope types the config's rope dicts name (as spelled)."""
    rope: Mapping[str, Any] = getattr(text, rope_source(text)) or {}
    blocks = (
        [value for value in rope.values() if isinstance(value, Mapping)] if read_nested(text, record, rope) else [rope]
    )
    return {str(block.get("rope_type", block.get("type", "default"))) for block in blocks}


def _missing(text: TextFields, key: str, given: set[str]) -> bool:
    """Whether no spelling of ``key`` is given anywhere in the config."""
    if key == "partial_rotary_factor":
        spellings = (text.partial_rotary_factor, text.rotary_pct, text.rotary_dim, text.qk_rope_head_dim)
        return all(value is None for value in spellings) and key not in given
    if key == "full_attention_interval":
        return text.full_attention_interval is None and text.layer_types is None
    if key == "rope_theta":
        return text.rope_theta is None and text.rope_local_base_freq is None and key not in given
    if key in ("rope_scaling", "rope_parameters"):
        return text.rope_scaling is None and text.rope_parameters is None
    if key == "no_rope_layer_interval":
        return not text.no_rope_layers and text.no_rope_layer_interval is None
    return getattr(text, key, None) is None


def model_defaults(text: TextFields, record: ModelTypeRecord) -> tuple[TextFields, dict[str, Any]]:
    """The config with the keys it leaves out that its model type's own config class fills in (the record's
    ``defaults``, then its M-RoPE sections), and those keys: each only where no spelling of it is given anywhere."""
    given = _given_rope_keys(text, record)
    filled = {key: value for key, value in record.defaults.items() if _missing(text, key, given)}
    if filled:
        text = text.model_copy(update=filled)
    if text.max_position_embeddings is None and record.max_position_embeddings is not None:
        # (only where a rope type reads a length: the class's is what its init function divides by)
        methods = [ROPE_TYPE_METHODS.get(kind) for kind in _rope_kinds(text, record)]
        lengths = {"original_max_position_embeddings", "max_position_embeddings"}
        if any(method is not None and lengths & set(method_keys(method)) for method in methods):
            filled["max_position_embeddings"] = record.max_position_embeddings
            text = text.model_copy(update={"max_position_embeddings": record.max_position_embeddings})
    text, sections = _class_mrope(text, record)
    return text, filled | sections


def _class_mrope(text: TextFields, record: ModelTypeRecord) -> tuple[TextFields, dict[str, Any]]:
    """The rope dict of a model type whose rotary class runs M-RoPE whatever the dict says (Qwen2-VL's
    ``config.rope_parameters.get("mrope_section", [16, 24, 24])``, for every rope type; Qwen3-VL always
    interleaves): the class's sections, and its layout for M-RoPE itself, where the dict gives none."""
    if record.mrope_section is None:
        return text, {}
    source = rope_source(text)
    rope: Mapping[str, Any] = getattr(text, source) or {}
    if read_nested(text, record, rope):
        return text, {}
    update: dict[str, Any] = {}
    if "mrope_section" not in rope:  # (every rope type: the class splits any frequencies by its sections)
        update["mrope_section"] = list(record.mrope_section)
    # (every rope type too: a scaled table is turned by the same interleaved sections)
    if record.mrope_interleaved and "mrope_interleaved" not in rope:
        update["mrope_interleaved"] = True
    if not update:
        return text, {}
    block = {**rope, **update} if rope else {"rope_type": "default", **update}
    return text.model_copy(update={source: block}), update


def model_default_warning(model_type: str | None, filled: Mapping[str, Any]) -> ConfigWarning:
    fallback = {key: GENERIC_FALLBACKS.get(key, "none") for key in filled}
    return ConfigWarning(
        "model_type_default",
        f"the config leaves out {', '.join(filled)}: {model_type}'s own config class fills in "
        f"{dict(filled)} (what transformers runs; resolved so), but a reader of config.json alone falls back to "
        f"{fallback} and rotates other features or other layers. Write the values into the config.",
        [],
        {"model_type": model_type, "filled": dict(filled), "generic_fallback": fallback},
    )


def ignored_keys(text: TextFields, record: ModelTypeRecord) -> tuple[TextFields, ConfigWarning | None]:
    """The config without the keys its model type's code never reads, and a warning naming them: the record's
    ``ignored_keys`` (Qwen2-VL's head_dim: its attention and rotary take hidden_size / num_attention_heads),
    no_rope_layers and no_rope_layer_interval where the attention has no NoPE layers (all but Llama 4 and
    SmolLM3), and a rope dict's mrope_section where the rotary class is not M-RoPE. (A partial rotation its code
    ignores stays: ``rotary_dims`` resolves it over the whole head and says so.)"""
    names = set(record.ignored_keys) - {"partial_rotary_factor"}
    if not record.reads_no_rope_layers:
        names |= {"no_rope_layers", "no_rope_layer_interval"}
    local_key = record.layer_type_rope.sliding_theta_key if record.layer_type_rope is not None else None
    if record.known and local_key != "rope_local_base_freq":
        names.add("rope_local_base_freq")  # (Gemma 3's key: no other class reads it)
    dropped: dict[str, Any] = {key: getattr(text, key) for key in sorted(names) if getattr(text, key, None)}
    update: dict[str, Any] = dict.fromkeys(dropped)
    source = rope_source(text)
    rope: Mapping[str, Any] = getattr(text, source) or {}
    if not record.reads_mrope_section:
        kept = dict(rope)
        if "mrope_section" in rope:
            dropped[f"{source}.mrope_section"] = kept.pop("mrope_section")
        for kind, block in rope.items():  # (one rope dict per layer type: Gemma 4's)
            if kind in PER_LAYER_TYPE_KEYS and isinstance(block, Mapping) and "mrope_section" in block:
                dropped[f"{source}.{kind}.mrope_section"] = block["mrope_section"]
                kept[kind] = {key: value for key, value in block.items() if key != "mrope_section"}
        if kept != rope:
            update[source] = kept
    if not dropped:
        return text, None
    warning = ConfigWarning(
        "config_key_ignored",
        f"{', '.join(dropped)}: {record.model_type}'s config class and model code in transformers never read "
        f"{'it' if len(dropped) == 1 else 'them'} ({dict(dropped)}); resolved without, as transformers runs the "
        "model. An engine that reads the key rotates other features or other layers.",
        [],
        {"ignored": dict(dropped)},
    )
    return text.model_copy(update=update), warning
