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

What each model type's own config class and rotary code add (class defaults, per-layer-type rope dicts, pairing,
ignored keys, NoPE layers, ...) is its record in ``posenc.real_models.model_types``.

The package, one concern a module: ``common`` (names and dataclasses), ``layer_pattern``, ``rope_blocks``,
``class_defaults``, ``method_params``, ``rotary_dims``, ``pattern_warnings``, ``regimes`` (DeepSeek-V4),
``diffusers``, ``resolver`` (the entry) and ``conversion`` (v4 <-> v5).
"""

from posenc.real_models.configs.class_defaults import GENERIC_FALLBACKS
from posenc.real_models.configs.common import (
    ATTENTION_SINK_NOTE,
    CHUNKED,
    CONFIG_EXTENSIONS,
    DEFAULT_ROPE_METHOD,
    DEFAULT_THETA,
    FRACTION_PARAM,
    FULL,
    HF_PARTIAL_DEFAULT,
    HF_ROPE_TYPES,
    INDEXED,
    LINEAR,
    ROPE_TYPE_METHODS,
    SLIDING,
    ConfigWarning,
    LayerRope,
    ResolvedConfig,
    layer_frequencies,
    method_keys,
    query_temperature,
    rope_frequencies,
    takes_fraction,
    text_config,
    yarn_mscale,
)
from posenc.real_models.configs.conversion import convert_config
from posenc.real_models.configs.diffusers import DIFFUSERS_THETA, DIFFUSERS_TRANSFORMERS, FLUX_AXES_DIMS
from posenc.real_models.configs.method_params import MODEL_LENGTH_METHODS, REQUIRED_ROPE_KEYS
from posenc.real_models.configs.regimes import (
    COMPRESS_REGIME,
    COMPRESSED_SPARSE,
    HEAVILY_COMPRESSED,
    MAIN_REGIME,
    V4_COMPRESS_THETA,
    V4_COMPRESSED_NOTE,
    V4_DEFAULT_RATES,
    V4_INDEX_HEAD_DIM,
    V4_KEY_IS_VALUE_NOTE,
    V4_LAYER_TYPES,
    V4_RATIO_TYPES,
    V4_ROPE_FRACTION,
)
from posenc.real_models.configs.resolver import config_layer, requested_layer, resolve_config
from posenc.real_models.configs.rope_blocks import rope_source
from posenc.real_models.model_types import (
    ATTENTION_SINK_MODEL_TYPES,
    INDEXER_INTERLEAVED_MODEL_TYPES,
    INTERLEAVED_MODEL_TYPES,
    LAYER_TYPE_ROPE_MODEL_TYPES,
    MODEL_TYPE_DEFAULTS,
    NOPE_MLA_MODEL_TYPES,
    PROPORTIONAL_MODEL_TYPES,
    REGIME_MODEL_TYPES,
    SLIDING_UNSCALED_MODEL_TYPES,
    UNIT_SOFTMAX_MODEL_TYPES,
    WHOLE_HEAD_MODEL_TYPES,
    LayerTypeRope,
    ModelTypeRecord,
    model_type_record,
)

__all__ = [
    "ATTENTION_SINK_MODEL_TYPES",
    "ATTENTION_SINK_NOTE",
    "CHUNKED",
    "COMPRESSED_SPARSE",
    "COMPRESS_REGIME",
    "CONFIG_EXTENSIONS",
    "DEFAULT_ROPE_METHOD",
    "DEFAULT_THETA",
    "DIFFUSERS_THETA",
    "DIFFUSERS_TRANSFORMERS",
    "FLUX_AXES_DIMS",
    "FRACTION_PARAM",
    "FULL",
    "GENERIC_FALLBACKS",
    "HEAVILY_COMPRESSED",
    "HF_PARTIAL_DEFAULT",
    "HF_ROPE_TYPES",
    "INDEXED",
    "INDEXER_INTERLEAVED_MODEL_TYPES",
    "INTERLEAVED_MODEL_TYPES",
    "LAYER_TYPE_ROPE_MODEL_TYPES",
    "LINEAR",
    "MAIN_REGIME",
    "MODEL_LENGTH_METHODS",
    "MODEL_TYPE_DEFAULTS",
    "NOPE_MLA_MODEL_TYPES",
    "PROPORTIONAL_MODEL_TYPES",
    "REGIME_MODEL_TYPES",
    "REQUIRED_ROPE_KEYS",
    "ROPE_TYPE_METHODS",
    "SLIDING",
    "SLIDING_UNSCALED_MODEL_TYPES",
    "UNIT_SOFTMAX_MODEL_TYPES",
    "V4_COMPRESSED_NOTE",
    "V4_COMPRESS_THETA",
    "V4_DEFAULT_RATES",
    "V4_INDEX_HEAD_DIM",
    "V4_KEY_IS_VALUE_NOTE",
    "V4_LAYER_TYPES",
    "V4_RATIO_TYPES",
    "V4_ROPE_FRACTION",
    "WHOLE_HEAD_MODEL_TYPES",
    "ConfigWarning",
    "LayerRope",
    "LayerTypeRope",
    "ModelTypeRecord",
    "ResolvedConfig",
    "config_layer",
    "convert_config",
    "layer_frequencies",
    "method_keys",
    "model_type_record",
    "query_temperature",
    "requested_layer",
    "resolve_config",
    "rope_frequencies",
    "rope_source",
    "takes_fraction",
    "text_config",
    "yarn_mscale",
]
