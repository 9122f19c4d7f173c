"""The rope-relevant fields of widely used models' published ``config.json`` files (``GET /v1/models``).

Each preset is the config as its model card's repository publishes it, trimmed to the keys that decide the
rotary setup (sizes, layer kinds, rope dicts, partial rotation, NoPE layers), in that model's own dialect:
Hugging Face v4 ``rope_scaling`` for most, ``text_config`` nesting for the multimodal ones. Resolve one with
``posenc.model_configs.resolve_config`` or ``POST /v1/models/resolve``.
"""

from __future__ import annotations

from typing import Any


class UnknownPresetError(KeyError):
    """No preset by that name (the gateway answers 404)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown preset {self.name!r}; GET /v1/models lists the {len(PRESETS)} presets"


def get_preset(name: str) -> dict[str, Any]:
    """The preset's config (``UnknownPresetError`` for an unknown name)."""
    if name not in PRESETS:
        raise UnknownPresetError(name)
    return PRESETS[name]


_GEMMA3_TEXT = {
    "model_type": "gemma3_text",
    "head_dim": 256,
    "hidden_size": 2560,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "num_hidden_layers": 34,
    "max_position_embeddings": 131072,
    "query_pre_attn_scalar": 256,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "rope_theta": 1000000.0,
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
}

PRESETS: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    },
    "llama-3.2-1b": {
        "model_type": "llama",
        "head_dim": 64,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 16,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    },
    "llama-4-scout-17b-16e": {
        "model_type": "llama4",
        "text_config": {
            "model_type": "llama4_text",
            "attention_chunk_size": 8192,
            "attn_scale": 0.1,
            "attn_temperature_tuning": True,
            "floor_scale": 8192,
            "head_dim": 128,
            "hidden_size": 5120,
            "num_attention_heads": 40,
            "num_key_value_heads": 8,
            "num_hidden_layers": 48,
            "max_position_embeddings": 10485760,
            "no_rope_layer_interval": 4,
            "rope_scaling": {
                "factor": 16.0,
                "high_freq_factor": 1.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
            "rope_theta": 500000.0,
        },
    },
    "qwen2.5-7b": {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "num_hidden_layers": 28,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "sliding_window": 131072,
        "use_sliding_window": False,
    },
    "qwen3-8b": {
        "model_type": "qwen3",
        "head_dim": 128,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 36,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000,
        "rope_scaling": None,
    },
    "qwen2.5-vl-7b": {
        "model_type": "qwen2_5_vl",
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "num_hidden_layers": 28,
        "max_position_embeddings": 128000,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    },
    "qwen3-vl-8b": {
        "model_type": "qwen3_vl",
        "text_config": {
            "model_type": "qwen3_vl_text",
            "head_dim": 128,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 36,
            "max_position_embeddings": 262144,
            "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
            "rope_theta": 5000000,
        },
    },
    "gemma-3-4b": {"model_type": "gemma3", "text_config": _GEMMA3_TEXT},
    "deepseek-v3": {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "num_hidden_layers": 61,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "max_position_embeddings": 163840,
        "rope_theta": 10000,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 40,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
    },
    "gpt-oss-20b": {
        "model_type": "gpt_oss",
        "head_dim": 64,
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "num_hidden_layers": 24,
        "max_position_embeddings": 131072,
        "rope_theta": 150000,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
    },
    "mistral-7b-v0.3": {
        "model_type": "mistral",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "sliding_window": None,
    },
    "smollm3-3b": {
        "model_type": "smollm3",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "num_hidden_layers": 36,
        "max_position_embeddings": 65536,
        "rope_theta": 5000000.0,
        "rope_scaling": None,
        "no_rope_layer_interval": 4,
    },
}
