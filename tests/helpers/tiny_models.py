"""Tiny random Hugging Face models of the architectures whose GGUFs posenc maps back to a config, saved with
transformers from a config (a few layers of a few features each: a conversion takes well under a second) so that
llama.cpp's own converter can turn them into GGUFs. Each config keeps its architecture's rope setup (Llama 3's
bands, LongRoPE's factors, DeepSeek-V3's YaRN with mscale, Gemma 3's local base and sliding pattern, the NoPE
layers of SmolLM3 and Llama 4, gpt-oss's YaRN) at a small size."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

HEAD_DIM = 32  # 16 pairs: enough for Llama 3's three bands and LongRoPE's factors to differ pair by pair
SMALL = {"vocab_size": 64, "hidden_size": 64, "intermediate_size": 64, "num_attention_heads": 2,
         "num_key_value_heads": 1, "head_dim": HEAD_DIM, "tie_word_embeddings": False, "pad_token_id": 0,
         "bos_token_id": 1, "eos_token_id": 2}  # fmt: skip


def _longrope_factors(count: int, top: float) -> list[float]:
    """A monotone factor per pair, 1 ... top (LongRoPE's factors grow towards the low frequencies)."""
    return [round(1.0 + (top - 1.0) * (index / (count - 1)) ** 2, 4) for index in range(count)]


def _configs() -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (transformers config class, its keyword arguments)."""
    pairs = HEAD_DIM // 2
    return {
        "llama3": ("LlamaConfig", SMALL | {
            "num_hidden_layers": 2, "max_position_embeddings": 131072,
            "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}),
        "mistral": ("MistralConfig", SMALL | {
            "num_hidden_layers": 2, "max_position_embeddings": 32768, "sliding_window": None,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}),
        "qwen2": ("Qwen2Config", SMALL | {
            "num_hidden_layers": 2, "max_position_embeddings": 32768,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}),
        "qwen3_yarn": ("Qwen3Config", SMALL | {
            "num_hidden_layers": 2, "max_position_embeddings": 131072,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                                "original_max_position_embeddings": 32768}}),
        "phi3_longrope": ("Phi3Config", SMALL | {
            "num_key_value_heads": 2, "num_hidden_layers": 2, "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096, "pad_token_id": 0,
            "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0,
                                "long_factor": _longrope_factors(pairs, 40.0),
                                "short_factor": _longrope_factors(pairs, 1.5)}}),
        "deepseek_v3": ("DeepseekV3Config", {
            "vocab_size": 64, "hidden_size": 64, "intermediate_size": 64, "moe_intermediate_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "n_routed_experts": 4,
            "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
            "first_k_dense_replace": 1, "kv_lora_rank": 32, "q_lora_rank": 48, "qk_rope_head_dim": 16,
            "qk_nope_head_dim": 32, "v_head_dim": 32, "max_position_embeddings": 163840, "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                                "mscale": 1.0, "mscale_all_dim": 1.0}}),
        "gemma3": ("Gemma3TextConfig", SMALL | {
            "num_hidden_layers": 7, "max_position_embeddings": 131072, "sliding_window": 512,
            "query_pre_attn_scalar": HEAD_DIM,
            "layer_types": ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"],
            "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}),
        "smollm3": ("SmolLM3Config", SMALL | {
            "num_hidden_layers": 8, "max_position_embeddings": 65536, "no_rope_layer_interval": 4,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0}}),
        "llama4": ("Llama4TextConfig", SMALL | {
            "intermediate_size_mlp": 64, "num_hidden_layers": 8, "num_local_experts": 2,
            "interleave_moe_layer_step": 1, "max_position_embeddings": 262144, "attention_chunk_size": 8192,
            "no_rope_layer_interval": 4,
            "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 16.0,
                                "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                                "original_max_position_embeddings": 8192}}),
        "gpt_oss": ("GptOssConfig", SMALL | {
            "num_hidden_layers": 4, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 128,
            "max_position_embeddings": 131072,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                                "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": False}}),
        "gemma": ("GemmaConfig", SMALL | {
            "num_hidden_layers": 2, "max_position_embeddings": 8192,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
        "gemma2": ("Gemma2Config", SMALL | {
            "num_hidden_layers": 4, "max_position_embeddings": 8192, "sliding_window": 256,
            "query_pre_attn_scalar": HEAD_DIM,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
        "olmo2": ("Olmo2Config", SMALL | {
            "num_key_value_heads": 2, "num_hidden_layers": 2, "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}),
        "phi2": ("PhiConfig", SMALL | {
            "num_key_value_heads": 2, "num_hidden_layers": 2, "max_position_embeddings": 2048,
            "partial_rotary_factor": 0.5, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
        "stablelm": ("StableLmConfig", SMALL | {
            "num_key_value_heads": 2, "num_hidden_layers": 2, "max_position_embeddings": 4096,
            "partial_rotary_factor": 0.25, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
        "glm4": ("Glm4Config", SMALL | {
            "num_hidden_layers": 2, "max_position_embeddings": 32768, "partial_rotary_factor": 0.5,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
        "nemotron": ("NemotronConfig", SMALL | {
            "num_key_value_heads": 2, "num_hidden_layers": 2, "max_position_embeddings": 4096,
            "partial_rotary_factor": 0.5, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
        "ministral3": ("Ministral3Config", SMALL | {
            "num_hidden_layers": 2, "max_position_embeddings": 262144,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
                                "original_max_position_embeddings": 16384, "beta_fast": 32.0, "beta_slow": 1.0,
                                "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1}}),
    }  # fmt: skip


# A model type's own tweaks after its config class ran (fields the class derives that a real config.json has)
ARCHITECTURES: dict[str, str] = {"llama4": "Llama4ForCausalLM", "gemma3": "Gemma3ForCausalLM"}
NAMES = tuple(_configs())


def save_tiny_model(name: str, directory: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """Saves the tiny random model ``name`` (weights and config.json) into ``directory``; ``edit`` changes the
    config's keyword arguments first (a variant: other betas, no scaling...)."""
    import torch
    import transformers

    class_name, kwargs = _configs()[name]
    if edit is not None:
        edit(kwargs)
    config = getattr(transformers, class_name)(**kwargs)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(directory)
    # the vocabulary's size as a tokenizer.json tells it (Gemma 3's converter trims the embedding rows to it)
    tokens = {f"<t{index}>": index for index in range(int(kwargs.get("vocab_size", 64)))}
    (directory / "tokenizer.json").write_text(json.dumps({"model": {"vocab": tokens}, "added_tokens": []}))
    if name in ARCHITECTURES:  # the class the converter knows the model by
        path = directory / "config.json"
        saved = json.loads(path.read_text())
        saved["architectures"] = [ARCHITECTURES[name]]
        path.write_text(json.dumps(saved, indent=2))
    return directory


def saved_config(directory: Path) -> Mapping[str, Any]:
    """The config.json a model directory holds (what a user compares a GGUF against)."""
    loaded: Mapping[str, Any] = json.loads((directory / "config.json").read_text())
    return loaded
