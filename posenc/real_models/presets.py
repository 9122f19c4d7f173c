"""The rope-relevant fields of widely used models' published ``config.json`` files (``GET /v1/models``).

Each preset is the config as its model card's repository publishes it, trimmed to the keys that decide the
rotary setup (sizes, layer kinds, rope dicts, partial rotation, NoPE layers), in that model's own dialect:
Hugging Face v4 ``rope_scaling`` for most, ``text_config`` nesting for the multimodal ones. Resolve one with
``posenc.real_models.configs.resolve_config`` or ``POST /v1/models/resolve``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from posenc.errors import InvalidInput
from posenc.real_models.preset_factors import PHI3_VISION_LONG_FACTOR, PHI3_VISION_SHORT_FACTOR


class UnknownPresetError(KeyError):
    """No preset by that name (the gateway answers 404)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    @property
    def close_names(self) -> list[str]:
        """Preset names close to the one asked for, best first."""
        return difflib.get_close_matches(self.name, list(PRESETS), n=3, cutoff=0.5)

    def __str__(self) -> str:
        close = self.close_names
        hint = f" (did you mean {' or '.join(repr(name) for name in close)}?)" if close else ""
        return f"unknown preset {self.name!r}{hint}; GET /v1/models lists the {len(PRESETS)} presets"


def get_preset(name: str) -> dict[str, Any]:
    """The preset's config (``UnknownPresetError`` for an unknown name)."""
    if name not in PRESETS:
        raise UnknownPresetError(name)
    return PRESETS[name]


def config_or_preset(value: Mapping[str, Any] | str) -> Mapping[str, Any]:
    """A config given as itself, or by a preset's name (wherever the API takes a config); an unknown name is
    ``InvalidInput`` at () naming the close ones."""
    if not isinstance(value, str):
        return value
    try:
        return get_preset(value)
    except UnknownPresetError as exc:
        raise InvalidInput((), str(exc)) from None


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

# google/gemma-4-26B-A4B-it's text_config (v5 only: per-layer-type rope_parameters). Values as its published
# config.json reports them (public copies found with the search tools: 30 layers, 5:1 sliding/full, 1024 window,
# head_dim 256 and global_head_dim 512, 16 heads, 8 KV heads and 2 global KV heads sharing K and V, hidden 2816, 256K
# context; the Gemma 4 31B's text_config beside it has the same rope dicts); the rope dicts are also transformers
# 5.23's Gemma4TextConfig defaults (sliding: default θ 1e4; full: proportional, partial 0.25, θ 1e6).
_GEMMA4_TEXT = {
    "model_type": "gemma4_text",
    "attention_k_eq_v": True,
    "global_head_dim": 512,
    "head_dim": 256,
    "hidden_size": 2816,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5,
    "max_position_embeddings": 262144,
    "num_attention_heads": 16,
    "num_global_key_value_heads": 2,
    "num_hidden_layers": 30,
    "num_key_value_heads": 8,
    "rope_parameters": {
        "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
    },
    "sliding_window": 1024,
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
    "gemma-4-26b-a4b": {"model_type": "gemma4", "text_config": _GEMMA4_TEXT},
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
    # DeepSeek-V3.2-Exp's published config.json (v4 dialect; DeepSeek-V3's YaRN plus the DSA indexer's sizes)
    "deepseek-v3.2": {
        "model_type": "deepseek_v32",
        "hidden_size": 7168,
        "index_head_dim": 128,
        "index_n_heads": 64,
        "index_topk": 2048,
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
    # GLM-5 (zai-org/GLM-5): sizes and the indexer/MLA pairing keys as its config.json publishes them (found with the
    # search tools); rope_parameters as transformers 5.23's GlmMoeDsaConfig defaults (θ 10000, no scaling)
    "glm-5": {
        "model_type": "glm_moe_dsa",
        "hidden_size": 6144,
        "index_head_dim": 128,
        "index_n_heads": 32,
        "index_topk": 2048,
        "indexer_rope_interleave": True,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "num_hidden_layers": 78,
        "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64,
        "v_head_dim": 256,
        "max_position_embeddings": 202752,
        "rope_interleave": True,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    },
    # Ministral 3 8B's text model: transformers 5.23's Ministral3Config defaults (the published 2512 checkpoints'
    # values: YaRN 16 over 16384 with mscale = mscale_all_dim = 1, so attention factor 1, and llama_4_scaling_beta)
    "ministral-3-8b": {
        "model_type": "mistral3",
        "text_config": {
            "model_type": "ministral3",
            "head_dim": 128,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 34,
            "max_position_embeddings": 262144,
            "rope_parameters": {
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "factor": 16.0,
                "llama_4_scaling_beta": 0.1,
                "max_position_embeddings": 262144,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 16384,
                "rope_theta": 1000000.0,
                "rope_type": "yarn",
            },
        },
    },
    # Mistral 4: transformers 5.23's Mistral4Config defaults (MLA with interleaved rope pairs, YaRN 128 over 8192,
    # mscale = mscale_all_dim = 1, llama_4_scaling_beta)
    "mistral-4": {
        "model_type": "mistral4",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "num_hidden_layers": 36,
        "qk_nope_head_dim": 64,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "kv_lora_rank": 256,
        "max_position_embeddings": 1048576,
        "rope_interleave": True,
        "rope_parameters": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 128.0,
            "llama_4_scaling_beta": 0.1,
            "max_position_embeddings": 1048576,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 8192,
            "partial_rotary_factor": 0.5,
            "rope_theta": 10000.0,
            "rope_type": "yarn",
        },
    },
    # Qwen3-Next-80B-A3B-Instruct's published config.json: Gated DeltaNet layers (no RoPE) with every 4th layer full
    # attention (full_attention_interval 4, no layer_types), partial rotation 0.25 of a 256-wide head at θ 1e7.
    # Checked against public copies of the config.json found with the search tools (head_dim 256, hidden 2048,
    # interval 4, 262144 positions; rope_theta 1e7 and partial_rotary_factor 0.25 as a pinned fixture of revision
    # 9c7f2fbe quotes them) and transformers 5.23's Qwen3NextConfig defaults (48 layers, 16 heads, 2 KV heads)
    "qwen3-next-80b-a3b": {
        "model_type": "qwen3_next",
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "num_hidden_layers": 48,
        "max_position_embeddings": 262144,
        "partial_rotary_factor": 0.25,
        "rope_scaling": None,
        "rope_theta": 10000000,
    },
    # zai-org/GLM-4.5's published config.json (glm4_moe: the first half of each 128-wide head rotated, rotate_half
    # pairs, θ 1e6, no scaling). Checked against public copies of the config.json and NVIDIA's Megatron-Bridge page
    # found with the search tools (92 layers, hidden 5120, 96 heads, 8 KV heads, head_dim 128, 131072 positions; the
    # 202752 of other copies is GLM-4.6/4.7's) and transformers 5.23's Glm4MoeConfig (checkpoint zai-org/GLM-4.5:
    # partial_rotary_factor 0.5, 131072 positions)
    "glm-4.5": {
        "model_type": "glm4_moe",
        "head_dim": 128,
        "hidden_size": 5120,
        "num_attention_heads": 96,
        "num_key_value_heads": 8,
        "num_hidden_layers": 92,
        "max_position_embeddings": 131072,
        "partial_rotary_factor": 0.5,
        "rope_scaling": None,
        "rope_theta": 1000000,
    },
    # openai/gpt-oss-20b's config.json (= transformers 5.23's GptOssConfig defaults): YaRN 32 over 4096 without the
    # correction range's rounding (truncate false), 128-token windows on every other layer; every layer's softmax
    # has a learned sink logit per head (the layers' notes)
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
    # allenai/Olmo-3-7B-Instruct's config.json (v4 dialect), as public copies found with the search tools quote it
    # (the 7B and 32B Think cards have the same rope block): YaRN 8 over 8192 with an explicit attention_factor, on
    # the full-attention layers only; the sliding layers (4096 keys, three of every four) rotate unscaled at θ 5e5.
    # Sizes: transformers 5.23's Olmo3Config defaults ("Olmo3 7B style": 32 layers, hidden 4096, 32 heads)
    "olmo-3-7b": {
        "model_type": "olmo3",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "num_hidden_layers": 32,
        "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 8,
        "max_position_embeddings": 65536,
        "rope_scaling": {
            "attention_factor": 1.2079441541679836,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 8.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "yarn",
        },
        "rope_theta": 500000,
        "sliding_window": 4096,
    },
    # moonshotai/Kimi-Linear-48B-A3B-Instruct's config.json (the fields a pinned public copy quotes verbatim): KDA
    # linear-attention layers (no RoPE) and 7 MLA layers (1-based full_attn_layers) whose rope part is never rotated
    # (mla_use_nope; transformers' KimiLinear attention has no rotary embedding at all)
    "kimi-linear-48b-a3b": {
        "model_type": "kimi_linear",
        "hidden_size": 2304,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "num_hidden_layers": 27,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "mla_use_nope": True,
        "rope_theta": 10000.0,
        "linear_attn_config": {
            "head_dim": 128,
            "num_heads": 32,
            "short_conv_kernel_size": 4,
            "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
            "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
        },
    },
    # moonshotai/Kimi-K2-Instruct-0905's config.json (model_type kimi_k2: DeepSeek-V3's code, which transformers runs
    # as deepseek_v3, Kimi_K25Config's text model): values as a public model-inspector report of that repository
    # quotes them (61 layers, hidden 7168, 64 heads and 64 KV heads, θ 5e4, YaRN 64 over 4096 with beta_fast =
    # beta_slow = 1 and mscale = mscale_all_dim = 1); the MLA sizes (qk_nope 128, qk_rope 64, v 128) and the 256K
    # context (64 × 4096) as the model card and public copies of Kimi K2.x's text_config give them
    "kimi-k2": {
        "model_type": "kimi_k2",
        "hidden_size": 7168,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "num_hidden_layers": 61,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "max_position_embeddings": 262144,
        "rope_theta": 50000.0,
        "rope_scaling": {
            "beta_fast": 1.0,
            "beta_slow": 1.0,
            "factor": 64.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
    },
    # deepseek-ai/DeepSeek-V4-Flash's config.json, as public copies found with the search tools quote it (43 layers,
    # one 512-wide KV head shared by 64 query heads, the trailing 64 features rotated, 128-key windows; 44
    # compress_ratios: layers 0-1 sliding only, then compressed sparse (4) and heavily compressed (128) in turn, the
    # last entry the MTP layer's; θ 1e4 for the sliding layers, 1.6e5 with YaRN 16 over 65536 for the others)
    "deepseek-v4-flash": {
        "model_type": "deepseek_v4",
        "hidden_size": 4096,
        "head_dim": 512,
        "num_attention_heads": 64,
        "num_key_value_heads": 1,
        "num_hidden_layers": 43,
        "q_lora_rank": 1024,
        "qk_rope_head_dim": 64,
        "index_head_dim": 128,
        "index_n_heads": 64,
        "index_topk": 512,
        "max_position_embeddings": 1048576,
        "sliding_window": 128,
        "compress_ratios": [0, 0, *[4, 128] * 20, 4, 0],
        "compress_rope_theta": 160000,
        "rope_theta": 10000,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 16,
            "original_max_position_embeddings": 65536,
            "type": "yarn",
        },
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
    "phi-3-vision-128k": {  # the Phi-3 language model of Phi-3-vision-128k-instruct (LongRoPE, vLLM's "su")
        "model_type": "phi3",
        "hidden_size": 3072,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "num_hidden_layers": 32,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "sliding_window": 131072,
        "rope_scaling": {
            "type": "su",
            "long_factor": PHI3_VISION_LONG_FACTOR,
            "short_factor": PHI3_VISION_SHORT_FACTOR,
        },
    },
    "flux.1-dev": {  # diffusers transformer/config.json
        "_class_name": "FluxTransformer2DModel",
        "attention_head_dim": 128,
        "num_attention_heads": 24,
        "num_layers": 19,
        "num_single_layers": 38,
        "axes_dims_rope": [16, 56, 56],
        "patch_size": 1,
    },
    "wan2.1-t2v-1.3b": {  # diffusers transformer/config.json
        "_class_name": "WanTransformer3DModel",
        "attention_head_dim": 128,
        "num_attention_heads": 12,
        "num_layers": 30,
        "patch_size": [1, 2, 2],
        "rope_max_seq_len": 1024,
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
