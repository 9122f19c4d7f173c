"""GGUF files for tests, written with the gguf package's own writer the way llama.cpp's converter
(convert_hf_to_gguf.py) writes a text model's header: used by the unit tests of the mapping, the route, the SDK and
the CLI."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch


def converter_llama3_factors(config: Mapping[str, Any], dim: int) -> torch.Tensor:
    """llama.cpp's LlamaModel.generate_extra_tensors, restated: float32 frequencies, the original context from the
    config's top level (8192 when absent, as for Llama 3.1, which keeps it in rope_scaling)."""
    scaling = config["rope_scaling"]
    base = config["rope_theta"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = config.get("original_max_position_embeddings", 8192)
    out = []
    for freq in freqs.tolist():
        wavelength = 2 * math.pi / freq
        if wavelength < old / high:
            out.append(1.0)
        elif wavelength > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelength - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32)


def convert(
    config: Mapping[str, Any],
    path: Path,
    *,
    drop: Iterable[str] = (),
    extra: Mapping[str, Any] | None = None,
    rope_freqs: bool = True,
    vocabulary: int = 0,
    arch: str = "llama",
    mla_absorbed: bool = True,
) -> Path:
    """``config`` written as llama.cpp's convert_hf_to_gguf.py writes a text model's header (the keys, the
    linear / YaRN scaling keys, the llama3 factors as the rope_freqs tensor), less the keys in ``drop`` (their
    suffix after the architecture) and plus ``extra`` (full keys).

    An MLA config (``qk_rope_head_dim``) is written as DeepseekV2Model writes it: the rotated part as
    rope.dimension_count, the LoRA ranks, YaRN's mscale_all_dim as yarn_log_multiplier = 0.1 · mscale_all_dim; with
    ``mla_absorbed`` (converters since llama.cpp absorbed MLA) one KV head, key_length = kv_lora_rank + the rotated
    part and the whole head as key_length_mla, else the whole head as key_length."""
    writer = gguf.GGUFWriter(path, arch)
    head_dim = config.get("head_dim", config["hidden_size"] // config["num_attention_heads"])
    scaling = config.get("rope_scaling") or {}
    mla = "qk_rope_head_dim" in config
    values: dict[str, Any] = {
        "context_length": ("uint32", config["max_position_embeddings"]),
        "embedding_length": ("uint32", config["hidden_size"]),
        "block_count": ("uint32", config["num_hidden_layers"]),
        "attention.head_count": ("uint32", config["num_attention_heads"]),
        "attention.head_count_kv": ("uint32", config["num_key_value_heads"]),
        "rope.freq_base": ("float32", float(config["rope_theta"])),
        "rope.dimension_count": ("uint32", head_dim),
    }
    if "head_dim" in config:
        values["attention.key_length"] = ("uint32", head_dim)
    if mla:
        rope, whole = config["qk_rope_head_dim"], config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
        values |= {
            "rope.dimension_count": ("uint32", rope),
            "attention.kv_lora_rank": ("uint32", config["kv_lora_rank"]),
        }
        if config.get("q_lora_rank"):
            values["attention.q_lora_rank"] = ("uint32", config["q_lora_rank"])
        if mla_absorbed:
            values |= {
                "attention.head_count_kv": ("uint32", 1),
                "attention.key_length": ("uint32", config["kv_lora_rank"] + rope),
                "attention.value_length": ("uint32", config["kv_lora_rank"]),
                "attention.key_length_mla": ("uint32", whole),
                "attention.value_length_mla": ("uint32", config["v_head_dim"]),
            }
        else:
            values |= {
                "attention.key_length": ("uint32", whole),
                "attention.value_length": ("uint32", config["v_head_dim"]),
            }
        if "mscale_all_dim" in scaling:
            values["rope.scaling.yarn_log_multiplier"] = ("float32", 0.1 * scaling["mscale_all_dim"])
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in ("linear", "yarn"):
        values["rope.scaling.type"] = ("string", kind)
        values["rope.scaling.factor"] = ("float32", float(scaling["factor"]))
    if kind == "yarn":
        values["rope.scaling.original_context_length"] = ("uint32", scaling["original_max_position_embeddings"])
        for name in ("beta_fast", "beta_slow"):
            if name in scaling:
                values[f"rope.scaling.yarn_{name}"] = ("float32", float(scaling[name]))
    if config.get("sliding_window"):
        values["attention.sliding_window"] = ("uint32", config["sliding_window"])
    for suffix, (kind_name, value) in values.items():
        if suffix not in drop:
            getattr(writer, f"add_{kind_name}")(f"{arch}.{suffix}", value)
    for key, value in (extra or {}).items():
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_uint32(key, value)
    if vocabulary:
        writer.add_token_list([f"token{i}" for i in range(vocabulary)])
        writer.add_token_types([1] * vocabulary)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float16))
    if rope_freqs and kind == "llama3":
        writer.add_tensor("rope_freqs.weight", converter_llama3_factors(config, head_dim).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
