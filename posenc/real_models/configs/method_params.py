"""One rope dict read as a registered method: the rope type's method, its params in the method's own names (each
remembering the config key it came from, for errors), the M-RoPE sections, and the attention factor the method
computes; the keys transformers requires of each rope type are required here too."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from posenc.errors import InvalidInput, Loc
from posenc.pe import get_method
from posenc.real_models.config_fields import TextFields
from posenc.real_models.configs.common import (
    CONFIG_COMPOSITIONS,
    CONFIG_EXTENSIONS,
    DEFAULT_THETA,
    FRACTION_PARAM,
    HF_PARTIAL_DEFAULT,
    ROPE_TYPE_METHODS,
    ConfigWarning,
    method_keys,
    rope_frequencies,
    takes_fraction,
)
from posenc.real_models.configs.rope_blocks import Block

# The keys transformers' rope validation requires of a rope dict (modeling_rope_utils.py,
# RotaryEmbeddingConfigMixin._validate_<type>_rope_parameters: a KeyError names the missing ones), by the method
# the rope type names; original_max_position_embeddings is filled from max_position_embeddings there
# (standardize_rope_params), so it is not required.
REQUIRED_ROPE_KEYS: dict[str, tuple[str, ...]] = {
    ROPE_TYPE_METHODS[rope_type]: keys
    for rope_type, keys in {
        "linear": ("factor",),
        "dynamic": ("factor",),
        "yarn": ("factor",),
        "longrope": ("short_factor", "long_factor"),
        "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
    }.items()
}
# The methods whose original length transformers takes from max_position_embeddings whatever the rope dict says
# (modeling_rope_utils.py: _compute_dynamic_ntk_parameters divides by config.max_position_embeddings, and
# dynamic_rope_update grows the frequencies past original_max_seq_len = max_position_embeddings)
MODEL_LENGTH_METHODS = frozenset({ROPE_TYPE_METHODS["dynamic"]})
# The methods whose attention factor transformers derives from the rope dict's factor where it gives one
# (modeling_rope_utils.py, _compute_longrope_parameters; the registered method derives it from the lengths)
FACTOR_ATTENTION_METHODS = frozenset({ROPE_TYPE_METHODS["longrope"]})


@dataclass(frozen=True)
class Method:
    """What one rope dict resolves to: the method, its params (in the method's names) and the config key each
    param was read from, and the M-RoPE sections."""

    name: str
    params: dict[str, Any]
    origins: dict[str, Loc]
    section: list[int] | None
    default_theta: bool = False  # no rope_theta anywhere: the base is DEFAULT_THETA
    loc: Loc = ()  # the rope dict it was read from (where a refusal of the params together is reported)


def method_params(block: Block, text: TextFields) -> Method:
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
        if key == "original_max_position_embeddings" and method in MODEL_LENGTH_METHODS:
            # dynamic NTK: transformers scales from max_position_embeddings (the dict's value only without it)
            if max_positions is not None:
                value, origin = max_positions, ("max_position_embeddings",)
        elif key == "original_max_position_embeddings":
            # Phi-3 keeps it at the top level, and it wins over a flat dict's (standardize_rope_params, "Case 1");
            # a layer type's or regime's dict keeps its own; else the model's length
            top = text.original_max_position_embeddings
            if top is not None and not block.per_type and not (block.regime and value is not None):
                value, origin = top, ("original_max_position_embeddings",)
            elif value is None:
                value, origin = max_positions, ("max_position_embeddings",)
        if key == "max_position_embeddings":
            value, origin = max_positions, ("max_position_embeddings",)
        if value is not None:
            params[key] = list(value) if isinstance(value, list) else value
            origins[key] = origin
    _as_transformers_reads(method, rope.factor, params, origins, loc)
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
    for key in REQUIRED_ROPE_KEYS.get(method, ()):
        if rope.given(key) is None:
            raise InvalidInput(
                (*loc, key),
                f"is required for rope_type {rope_type!r}: transformers refuses a rope dict without it (there is no "
                "default to fill in)",
            )
    section = rope.mrope_section
    return Method(
        method, params, origins, None if section is None else list(section), default_theta=theta_loc == loc, loc=loc
    )


def _as_transformers_reads(
    method: str, factor: float | None, params: dict[str, Any], origins: dict[str, Loc], loc: Loc
) -> None:
    """The params as transformers' init function reads the rope dict (modeling_rope_utils.py): YaRN's mscale and
    mscale_all_dim only together (``_compute_yarn_parameters``: ``if mscale and mscale_all_dim``; one alone, or a
    zero, leaves the default 0.1·ln s + 1); LongRoPE's attention factor from the dict's factor where it gives one
    (``_compute_longrope_parameters``: sqrt(1 + ln factor / ln original), 1 for a factor up to 1)."""
    keys = method_keys(method)
    if "mscale" in keys and "mscale_all_dim" in keys and not (params.get("mscale") and params.get("mscale_all_dim")):
        for key in ("mscale", "mscale_all_dim"):
            params.pop(key, None)
            origins.pop(key, None)
    original = params.get("original_max_position_embeddings")
    if method in FACTOR_ATTENTION_METHODS and factor is not None and "attention_factor" not in params and original:
        scale = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 and original > 1 else 1.0
        params["attention_factor"], origins["attention_factor"] = scale, (*loc, "factor")


def scaled(method: Method) -> bool:
    """Whether the method stretches RoPE for a longer context: a factor above 1, or (LongRoPE) config keys beyond
    the base and none of them a factor."""
    keys = method_keys(method.name)
    factor = method.params.get("factor")
    return (factor is not None and factor > 1) if "factor" in keys else bool(keys)


def default_theta_warning(layer_type: str, block: Block, method: Method, text: TextFields) -> ConfigWarning:
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


def attention_scale(method: Method, rotary_dim: int) -> float:
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


def broadcast_factor_lists(method: Method, rotary_dim: int) -> tuple[Method, ConfigWarning | None]:
    """LongRoPE's per-pair factor lists as transformers applies them: a list of one factor divides every pair
    (``_compute_longrope_parameters`` multiplies by ``torch.tensor(factors)``, which broadcasts), so it is spread
    over the rotary_dim / 2 pairs, with a warning; a list of another wrong length stays for the method to refuse."""
    pairs = rotary_dim // 2
    spread = {
        key: [float(value[0])] * pairs
        for key in ("short_factor", "long_factor")
        if isinstance(value := method.params.get(key), list) and len(value) == 1 and pairs > 1
    }
    if method.name not in FACTOR_ATTENTION_METHODS or not spread:
        return method, None
    warning = ConfigWarning(
        "factor_list_broadcast",
        f"{', '.join(spread)} holds one factor where the rotation has {pairs} pairs: transformers' LongRoPE "
        "divides every pair by it (the list broadcasts); resolved so. An engine that checks the length (Phi-3's "
        "config class, vLLM) refuses the config: give one factor per pair.",
        [],
        {"keys": sorted(spread), "pairs": pairs},
    )
    return replace(method, params=method.params | spread), warning


SECTION_KEY = "mrope_section"
TRUNCATED_PARAM = "truncated_sections"  # M-RoPE's param: interleaved sections placed as Qwen3-VL's slices cut them


def with_sections(method: Method, block: Block, rotary_dim: int) -> tuple[Method, ConfigWarning | None]:
    """The layer's method once its M-RoPE sections are applied, as Qwen2-VL / Qwen2.5-VL / Qwen3-VL run them.

    Another method's rope dict with sections (rope_type yarn, dynamic, linear, longrope) becomes the composing
    method over that method's table: transformers' Qwen2_5_VLRotaryEmbedding / Qwen3VLTextRotaryEmbedding multiply
    the (3, B, N) positions by the scaled inv_freq (and attention scaling) and recompose by the sections. The
    table's params are checked first, so a bad one is reported at its own config key. Chunked sections that do
    not sum to the rotated pairs are refused (Qwen2-VL's split of cos/sin fails); interleaved ones the rule does
    not place one for one run as Qwen3-VL's slices place them (``apply_interleaved_mrope``: H on pairs
    slice(1, 3·s_h, 3), W on slice(2, 3·s_w, 3), cut at the last pair, the rest T), with a warning."""
    section = method.section
    if section is None:
        return method, None
    composer = CONFIG_COMPOSITIONS.get(SECTION_KEY)
    if composer is not None and method.name != composer[0]:
        attention_scale(method, rotary_dim)  # the table's own params, refused at the keys they came from
        name, param = composer
        spec, rope = get_method(name), block.fields
        table = {key: value for key, value in method.params.items() if key != "base"}
        params: dict[str, Any] = {"base": method.params["base"], SECTION_KEY: list(section)}
        params |= spec.config_values(rope.given) if spec.config_values is not None else {}
        params[param] = {"method": method.name, "params": table}
        origins = {"base": method.origins["base"], SECTION_KEY: (*block.loc, SECTION_KEY)}
        method = replace(method, name=name, params=params, origins=origins)
    pairs = rotary_dim // 2
    interleaved = method.params.get("layout") == "interleaved"
    if not interleaved:
        if sum(section) != pairs:
            raise InvalidInput(
                (*block.loc, SECTION_KEY),
                f"{section} gives 2 x {sum(section)} = {2 * sum(section)} rotated features, but the layer rotates "
                f"{rotary_dim}: the sections count pairs and must sum to rotary_dim / 2 = {pairs}",
            )
        return method, None
    truncated = method.params | {TRUNCATED_PARAM: True}  # each pair's axis as the slices place them
    axis = rope_frequencies(method.name, truncated, rotary_dim).pair_axis
    placed = [] if axis is None else torch.bincount(axis, minlength=len(section)).tolist()
    if placed == list(section):
        return method, None
    warning = ConfigWarning(
        "mrope_sections_truncated",
        f"the interleaved sections {section} do not match the {pairs} rotated pairs (their sum is {sum(section)}, "
        f"or the h / w slices run past the last pair): transformers' Qwen3-VL rotary runs them anyway, turning "
        f"pairs k ≡ 1 (mod 3) below {3 * section[1]} by h, k ≡ 2 (mod 3) below {3 * section[2]} by w, cut at the "
        f"last pair, and every other pair by t, so (t, h, w) get {placed} pairs; resolved so. Check the sections "
        "against head_dim.",
        [],
        {"mrope_section": list(section), "pairs": pairs, "placed": placed},
    )
    return replace(method, params=truncated), warning
