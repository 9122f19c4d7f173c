"""The resolver's entry: a model config (config.json as published, a preset's name, or a diffusers transformer
config) turned into one ``LayerRope`` per decoder layer and the warnings its patterns raise, and one layer of it
for the routes that rotate with a config's layer. What the model type's own code does is its record's
(``posenc.real_models.model_types``); the rest is read from the config's keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc.errors import InvalidInput, located
from posenc.real_models.config_fields import (
    MAX_HEAD_DIM,
    DiffusersFields,
    RopeFields,
    TextFields,
    check_json_value,
    read,
)
from posenc.real_models.configs.class_defaults import ignored_keys, model_default_warning, model_defaults
from posenc.real_models.configs.common import (
    ATTENTION_SINK_NOTE,
    CHUNKED,
    FULL,
    HF_ROPE_TYPES,
    LINEAR,
    SLIDING,
    ConfigWarning,
    LayerRope,
    ResolvedConfig,
    required,
    yarn_mscale,
)
from posenc.real_models.configs.diffusers import DIFFUSERS_TRANSFORMERS, resolve_diffusers
from posenc.real_models.configs.layer_pattern import layer_types, rope_layers
from posenc.real_models.configs.method_params import (
    Method,
    attention_scale,
    broadcast_factor_lists,
    default_theta_warning,
    method_params,
    scaled,
    with_sections,
)
from posenc.real_models.configs.pattern_warnings import pattern_warnings
from posenc.real_models.configs.regimes import resolve_regimes
from posenc.real_models.configs.rope_blocks import Block, both_rope_dicts, rope_blocks
from posenc.real_models.configs.rotary_dims import rotary_dims
from posenc.real_models.model_types import TRANSFORMERS_ROPE_TYPES, ModelTypeRecord, model_type_record
from posenc.real_models.presets import config_or_preset


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
        return resolve_diffusers(read(DiffusersFields, config))
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
    record = model_type_record(model_type)
    if record.regimes:
        return resolve_regimes(text, record, model_type)
    heads = required(text.num_attention_heads, "num_attention_heads")
    layers = required(text.num_hidden_layers, "num_hidden_layers")
    warnings: list[ConfigWarning] = []
    text, ignored = ignored_keys(text, record)
    if ignored is not None:
        warnings.append(ignored)
    text, filled = model_defaults(text, record)
    if filled:
        warnings.append(model_default_warning(model_type, filled))
    both = both_rope_dicts(text)
    if both is not None:
        warnings.append(both)
    if text.head_dim is not None:
        head_dim = text.head_dim
    else:
        head_dim = required(text.hidden_size, "hidden_size") // heads
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
    types = layer_types(text, layers, record)
    rotating = rope_layers(text, layers, record)
    if mla_rope is not None and (text.mla_use_nope or record.nope_mla):
        # the MLA layers' rope part is never rotated: mla_use_nope (Kimi Linear / GLM-5 as vLLM reads it), or a
        # model whose own code has no rotary embedding (Kimi Linear in transformers, whatever the config says)
        rotating = [False] * layers
    rotating = [rotate and layer_type != LINEAR for rotate, layer_type in zip(rotating, types, strict=True)]
    # (the class's layer types: Llama 4's NoPE layers are full attention, its RoPE layers chunked)
    class_types = [
        FULL if kind == CHUNKED and not rotate else kind for kind, rotate in zip(types, rotating, strict=True)
    ]
    blocks, nested = rope_blocks(text, [t for t in types if t != LINEAR] or [FULL], warnings, record, class_types)
    interleave = text.rope_interleave if text.rope_interleave is not None else record.interleaved
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
        if record.unit_softmax:
            return 1.0, f"1 ({model_type} normalises q and k per head: q_norm, k_norm)"
        if text.query_pre_attn_scalar is not None:
            return text.query_pre_attn_scalar**-0.5, "query_pre_attn_scalar ** -0.5"
        if layer_type == FULL and text.global_head_dim is not None:
            return width(layer_type) ** -0.5, "global_head_dim ** -0.5"
        return head_dim**-0.5, "head_dim ** -0.5"

    # the rope dicts some layer reads (none: Kimi Linear's MLA, whose rope dict nothing reads)
    rotated_types = {layer_type for layer_type, rotate in zip(types, rotating, strict=True) if rotate}
    read_blocks = {kind: block for kind, block in blocks.items() if block is not None and kind in rotated_types}
    for block in read_blocks.values():
        _check_rope_type(block, record)
        spelling = _spelling_warning(block, record)
        if spelling is not None and spelling not in warnings:
            warnings.append(spelling)
    methods = {layer_type: method_params(block, text) for layer_type, block in read_blocks.items()}
    # one rotation per layer type: its rotated width, method, params and attention scale, computed once
    setups: dict[str, tuple[int, int, Method, float]] = {}
    for layer_type, method in methods.items():
        block = read_blocks[layer_type]
        rotary_dim, start, dim_warnings = rotary_dims(text, width(layer_type), block.fields, method.name, record)
        warnings.extend(w for w in dim_warnings if w not in warnings)
        if record.rope_types is None:  # (a class that restricts the rope types, Phi-3's, checks the lengths too)
            method, spread = broadcast_factor_lists(method, rotary_dim)
            if spread is not None and spread not in warnings:
                warnings.append(spread)
        if method.default_theta and scaled(method):
            warnings.append(default_theta_warning(layer_type, block, method, text))
        method, fit = with_sections(method, block, rotary_dim)  # M-RoPE over the dict's table
        if fit is not None and fit not in warnings:
            warnings.append(fit)
        setups[layer_type] = (rotary_dim, start, method, attention_scale(method, rotary_dim))
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
            rotary_dim, start, method, layer_attention = setup
            name, params, section = method.name, dict(method.params), method.section
            block = read_blocks[layer_type]
            # DeepSeek's MLA: mscale(factor, mscale_all_dim)² on the logits for any scaled rope type
            # (modeling_deepseek_v3.py, yarn_apply_mscale: the rope dict's mscale_all_dim, even without mscale)
            all_dim, factor = block.fields.mscale_all_dim, block.fields.factor
            if mla_rope is not None and all_dim and factor is not None and block.fields.kind != "default":
                mscale = yarn_mscale(float(factor), float(all_dim))
                layer_scale *= mscale * mscale
                layer_source = "(qk_nope_head_dim + qk_rope_head_dim) ** -0.5 * mscale(factor, mscale_all_dim) ** 2"
            query_scale = _llama4_query_scale(block.fields, params, text) or query_scale
            if mla_rope is not None and text.index_head_dim is not None:
                indexer = _indexer(index, layer_type, name, params, text, record, layer_attention)
        else:
            name, params, section, rotary_dim, start, layer_attention = None, {}, None, 0, 0, 1.0
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
                attention_scale=layer_attention,
                softmax_scale=layer_scale,
                softmax_scale_source=layer_source,
                window=window if layer_type == SLIDING else None,
                chunk=chunk if layer_type == CHUNKED and rope else None,
                query_temperature=query_scale,
                mrope_section=section,
                shared_key_rope=mla_rope is not None and rope,
                indexer=indexer,
                notes=[ATTENTION_SINK_NOTE] if record.attention_sinks and layer_type != LINEAR else [],
            )
        )
    warnings.extend(pattern_warnings(text, record, resolved, nested))
    return ResolvedConfig(model_type=model_type, layers=resolved, warnings=warnings)


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
    record: ModelTypeRecord,
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
        interleave = record.indexer_interleaved
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


def _check_rope_type(block: Block, record: ModelTypeRecord) -> None:
    """A rope type the model type's config class refuses (Phi3Config: default and longrope only) is refused at
    the key that names it."""
    rope_type = HF_ROPE_TYPES.get(block.fields.kind, block.fields.kind)
    if record.rope_types is not None and rope_type not in record.rope_types:
        key = "rope_type" if block.fields.rope_type is not None else "type"
        raise InvalidInput(
            (*block.loc, key),
            f"{block.fields.kind!r}: {record.model_type}'s config class in transformers takes only "
            f"{list(record.rope_types)}",
        )


def _spelling_warning(block: Block, record: ModelTypeRecord) -> ConfigWarning | None:
    """A rope type spelled as vLLM spells it (``su``, ``deepseek_yarn``, ``mrope``) where the model type's config
    class does not rename it: resolved as vLLM runs it, but transformers' rope code has no such type and refuses
    the config (KeyError in ``ROPE_INIT_FUNCTIONS``)."""
    spelled = block.fields.kind
    if spelled in TRANSFORMERS_ROPE_TYPES or spelled in record.renamed_rope_types:
        return None
    key = "rope_type" if block.fields.rope_type is not None else "type"
    meant = HF_ROPE_TYPES.get(spelled, spelled)
    return ConfigWarning(
        "rope_type_not_in_transformers",
        f"{'.'.join(map(str, (*block.loc, key)))} is {spelled!r}, vLLM's spelling of {meant!r}: resolved as "
        f"{meant!r}, but transformers has no rope type {spelled!r} for {record.model_type or 'this model type'} "
        f"and refuses the config; spell it {meant!r}.",
        [],
        {"rope_type": spelled, "transformers_rope_type": meant},
    )
