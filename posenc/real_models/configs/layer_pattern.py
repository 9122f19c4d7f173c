"""Which attention each decoder layer runs (full, sliding, chunked, indexed, linear) and which layers rotate:
read from ``layer_types`` or the keys that spell the pattern (``sliding_window_pattern``,
``full_attention_interval``, Kimi Linear's ``linear_attn_config``, ``no_rope_layers``, ...)."""

from __future__ import annotations

from posenc.errors import InvalidInput
from posenc.real_models.config_fields import LinearAttentionFields, TextFields, read
from posenc.real_models.configs.common import CHUNKED, FULL, INDEXED, LINEAR, SLIDING
from posenc.real_models.model_types import ModelTypeRecord


def layer_types(text: TextFields, layers: int, record: ModelTypeRecord) -> list[str]:
    """The attention type of each layer: ``layer_types``, else the first pattern key the config gives, else the
    pattern the model type's config class builds (its record's ``sliding_pattern``)."""
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
    if record.sliding_pattern is not None:  # (the class builds layer_types, with or without a window)
        every = pattern or record.sliding_pattern
        types = [FULL if (index + 1) % every == 0 else SLIDING for index in range(layers)]
        if record.last_layer_full:
            types[-1] = FULL  # (Gemma4TextConfig forces the last layer to full attention)
        return types
    if pattern is not None and text.sliding_window:
        return [FULL if (index + 1) % pattern == 0 else SLIDING for index in range(layers)]
    if text.attention_chunk_size:
        return [CHUNKED] * layers
    if text.index_head_dim is not None:
        return [INDEXED] * layers  # DeepSeek-V3.2 / GLM-5: every layer's attention is chosen by the indexer
    return [FULL] * layers


def rope_layers(text: TextFields, layers: int, record: ModelTypeRecord) -> list[bool]:
    """Which layers rotate: ``no_rope_layers`` (1 = RoPE), else ``no_rope_layer_interval``, else all; only where
    the model's attention reads them (its record's ``reads_no_rope_layers``)."""
    if not record.reads_no_rope_layers:
        return [True] * layers
    if text.no_rope_layers:
        if len(text.no_rope_layers) != layers:
            raise InvalidInput(("no_rope_layers",), f"must hold one 0 (NoPE) or 1 (RoPE) per layer ({layers})")
        return [bool(value) for value in text.no_rope_layers]
    interval = text.no_rope_layer_interval
    if interval is not None:
        return [(index + 1) % interval != 0 for index in range(layers)]
    return [True] * layers
