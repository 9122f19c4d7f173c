"""The rope dict of each layer type, as the model type's config class fills it: ``rope_scaling`` (v4) or
``rope_parameters`` (v5), flat or one dict per layer type; Gemma 3's ``rope_local_base_freq``; and the classes that
key their rope dicts by layer type and fill them their own way (the record's ``layer_type_rope``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from posenc.errors import InvalidInput, Loc
from posenc.real_models.config_fields import RopeFields, TextFields, read
from posenc.real_models.configs.common import (
    DEFAULT_THETA,
    FULL,
    PER_LAYER_TYPE_KEYS,
    SLIDING,
    ConfigWarning,
)
from posenc.real_models.model_types import LayerTypeRope, ModelTypeRecord


@dataclass(frozen=True)
class Block:
    """One layer type's rope dict, typed, and where it sits in the config (for errors)."""

    fields: RopeFields
    loc: Loc
    theta_loc: Loc | None = None  # where its rope_theta was read, when not in the dict itself
    # a regime's dict (DeepSeek-V4: its config class nests the published flat dict by regime, so a top-level
    # original_max_position_embeddings only fills it where the dict has none)
    regime: bool = False

    @property
    def per_type(self) -> bool:
        """Whether the dict is one layer type's (or regime's) entry of a nested rope dict (its loc names it)."""
        return len(self.loc) > 1


def rope_source(text: TextFields) -> str:
    """The rope dict transformers reads: rope_scaling wherever the config gives a non-empty one, even beside a
    rope_parameters (``PreTrainedConfig.convert_rope_params_to_dict``: ``rope_scaling or rope_parameters``; the
    per-layer-type classes merge it into the full layers' dict), else rope_parameters."""
    if text.rope_scaling or text.rope_parameters is None:
        return "rope_scaling"
    return "rope_parameters"


def both_rope_dicts(text: TextFields) -> ConfigWarning | None:
    if not (text.rope_scaling and text.rope_parameters):
        return None
    return ConfigWarning(
        "rope_dicts_both",
        "the config gives both rope_scaling and rope_parameters: transformers reads rope_scaling (its rope_theta, "
        "else the top-level rope_theta) and ignores rope_parameters. Resolved so; keep one of them.",
        [],
        {"rope_scaling": dict(text.rope_scaling), "rope_parameters": dict(text.rope_parameters)},
    )


def _per_layer_type(
    text: TextFields,
    given: Mapping[str, Any],
    present: Sequence[str],
    class_types: Sequence[str],
    record: ModelTypeRecord,
    source: str,
    warnings: list[ConfigWarning],
) -> bool:
    """Whether the rope dict is one dict per layer type, as the model type's code reads it. A model type without a
    record: whenever every key names a layer type. With a record, as transformers decides
    (``nested_rope_parameter_keys``: a key among the layer types the config, or else its class, declares): such
    a dict is refused where the rotary reads one flat dict (transformers fails on it), and a dict keyed by layer
    types that are not declared is read flat (plain RoPE; its entries never read), with a warning."""
    looks = bool(given) and all(key in present or key in PER_LAYER_TYPE_KEYS for key in given)
    if not record.known:
        return looks
    declared = (
        text.layer_types if text.layer_types is not None else (class_types if record.declares_layer_types else [])
    )
    nested = bool(given) and any(key in declared for key in given)
    flat_reader = not record.rope_per_layer_type and not record.nope_mla  # (Kimi Linear reads no rope dict)
    if nested and flat_reader:
        raise InvalidInput(
            (source,),
            f"is keyed by layer type ({sorted(given)}), but {record.model_type}'s rotary embedding in transformers "
            "reads one flat rope dict (its rope_type and rope_theta at the top) and fails on this one: give one "
            "flat dict",
        )
    if looks and not nested and not record.nope_mla:
        if record.rope_per_layer_type and record.layer_type_rope is None:
            raise InvalidInput(
                (source,),
                f"names no layer type of this config ({sorted(set(declared))}): {record.model_type}'s "
                "rotary embedding in transformers reads one rope dict per layer type and fails on this one",
            )
        warnings.append(
            ConfigWarning(
                "per_layer_type_rope_ignored",
                f"{source} is keyed by layer type ({sorted(given)}), but this config declares no such layer types "
                f"(its layer_types: {sorted(set(declared))}): {record.model_type}'s config class in transformers "
                "reads the dict as one flat rope dict, so every layer rotates with plain RoPE at the top-level or "
                "class θ and the entries are never read. Resolved so; give one flat dict or declare layer_types.",
                [],
                {"keys": sorted(given), "declared_layer_types": sorted(set(declared))},
            )
        )
    elif given and not nested and record.rope_per_layer_type and record.layer_type_rope is None:
        raise InvalidInput(
            (source,),
            f"is one flat rope dict, but {record.model_type}'s rotary embedding in transformers reads one dict per "
            f"layer type ({{{FULL!r}: {{...}}, {SLIDING!r}: {{...}}}}) and fails on a flat one: nest it",
        )
    return nested


def rope_blocks(
    text: TextFields,
    types: Sequence[str],
    warnings: list[ConfigWarning],
    record: ModelTypeRecord,
    class_types: Sequence[str] = (),
) -> tuple[dict[str, Block | None], bool]:
    """The rope dict of each layer type of ``types``, and whether the config gave one per layer type;
    ``class_types``: the layer types the model type's class declares (Llama 4's NoPE layers: full attention)."""
    source = rope_source(text)
    given: Mapping[str, Any] = getattr(text, source) or {}
    present = sorted(set(types))
    nested = _per_layer_type(text, given, present, sorted(set(class_types) | set(present)), record, source, warnings)
    top_theta = text.rope_theta
    blocks: dict[str, Block | None] = {}
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
            fields = read(RopeFields, block, (source, layer_type))
            if fields.rope_theta is None and record.rope_per_layer_type and record.layer_type_rope is None:
                raise InvalidInput(
                    (source, layer_type, "rope_theta"),
                    f"is required: {record.model_type}'s config class fills no θ into a layer type's rope dict (not "
                    "even the top-level rope_theta), and its rotary embedding in transformers fails without one",
                )
            blocks[layer_type] = Block(fields, (source, layer_type))
    else:
        flat = Block(read(RopeFields, given, (source,)), (source,))
        blocks = dict.fromkeys(present, flat)
    local_theta = text.rope_local_base_freq
    by_type = record.layer_type_rope
    if by_type is not None and SLIDING in present:
        blocks = class_blocks(text, by_type, blocks, source, nested, record.model_type, warnings)
    elif not nested and local_theta is not None and SLIDING in present and source == "rope_scaling":
        # Gemma 3 (v4): sliding layers use their own θ, unscaled; rope_scaling is the global layers'
        local = RopeFields(rope_type="default", rope_theta=local_theta)
        blocks[SLIDING] = Block(local, (source,), theta_loc=("rope_local_base_freq",))
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


def class_blocks(
    text: TextFields,
    by_type: LayerTypeRope,
    blocks: dict[str, Block | None],
    source: str,
    nested: bool,
    model_type: str | None,
    warnings: list[ConfigWarning],
) -> dict[str, Block | None]:
    """The rope dicts of a model type whose transformers config class keys them by layer type
    (the record's ``layer_type_rope``), filled in as that class fills them: what transformers runs. A flat v5
    rope_parameters, which the class never reads, is warned about (``flat_rope_parameters_ignored``), and so are
    sliding layers that get the class's θ where the config's rope_theta was meant (``sliding_theta_default``)."""
    full_given = text.rope_theta is not None
    full_theta, full_loc = (text.rope_theta, ("rope_theta",)) if full_given else (by_type.full_theta, ("model_type",))
    key = by_type.sliding_theta_key
    sliding_theta, sliding_loc = by_type.sliding_theta, ("model_type",)
    if key is not None and getattr(text, key) is not None:
        sliding_theta, sliding_loc = getattr(text, key), (key,)
    plain = {
        FULL: Block(RopeFields(rope_type="default", rope_theta=full_theta), (source,), full_loc),
        SLIDING: Block(RopeFields(rope_type="default", rope_theta=sliding_theta), (source,), sliding_loc),
    }
    if nested:
        filled = dict(blocks)
        for layer_type, block in blocks.items():
            if block is not None and block.fields.rope_theta is None and layer_type in plain:
                theta, loc = plain[layer_type].fields.rope_theta, plain[layer_type].theta_loc
                filled[layer_type] = Block(block.fields.model_copy(update={"rope_theta": theta}), block.loc, loc)
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
            filled[FULL] = full = Block(full.fields.model_copy(update={"rope_theta": full_theta}), full.loc, full_loc)
        if full is not None and full.fields.rope_type is None and full.fields.type is not None:
            # merged into {"rope_type": "default"}: the older key "type" does not replace rope_type
            filled[FULL] = Block(RopeFields(rope_type="default", rope_theta=full.fields.rope_theta), full.loc)
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
