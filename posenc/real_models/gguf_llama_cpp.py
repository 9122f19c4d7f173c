"""What llama.cpp's loader takes from a GGUF's rope keys, per architecture: the defaults it falls back on, the keys
it reads for some architectures only, and the Llama 3 per-pair factors (``rope_freqs.weight``) fitted back to the
llama3 params. ``posenc.real_models.gguf_files`` maps a GGUF's metadata to a config with these rules, so that the
config resolves to what llama.cpp runs, not to what the keys' names suggest.

Sources (llama.cpp as vendored by llama-cpp-python 0.3.36): ``src/llama-model.cpp`` (``load_hparams``, the
generic keys, and ``load_swa_pattern``), ``src/models/<arch>.cpp`` (``load_arch_hparams``, per architecture),
``src/llama-context.cpp`` (the YaRN attention factor), ``src/llama-hparams.cpp`` (``set_swa_pattern``) and
``ggml/src/ggml.c`` (``ggml_rope_yarn_corr_dims``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from posenc.real_models.configs import ROPE_TYPE_METHODS, rope_frequencies

# load_hparams: rope_freq_base_train = 10000 when the GGUF has no rope.freq_base
LLAMA_CPP_THETA = 10000.0
# load_hparams: `std::string rope_scaling("linear")`: a GGUF without rope.scaling.type is read as linear, so its
# factor (rope.scaling.factor, else the older rope.scale_linear: LLM_KV_ROPE_SCALE_LINEAR, "try the old key
# name") still scales every frequency
SCALE_LINEAR_KEY = "{arch}.rope.scale_linear"

# What llama.cpp's loader takes for an architecture when the GGUF has no key for the field (the Hugging Face
# fields they are, by each config's own names):
# - gemma3 (models/gemma3.cpp): load_swa_pattern(ml, 6), every 6th layer global; the sliding layers at
#   rope_freq_base_train_swa = 10000 and rope_freq_scale_train_swa = 1 (llama-hparams.h defaults) unless
#   rope.freq_base_swa is given
# - gemma2 (models/gemma2.cpp): n_swa = 4096 unless attention.sliding_window says otherwise, load_swa_pattern(ml, 2)
# - olmo2 (models/olmo2.cpp, also Olmo 3's architecture): load_swa_pattern(ml, 4) where a window is given
# - gpt-oss (models/openai-moe.cpp): load_swa_pattern(ml, 2), every 2nd layer global
# - smollm3 (models/smollm3.cpp): n_no_rope_layer_step = 4, which no GGUF key sets
# - llama4 (models/llama4.cpp): load_swa_pattern(ml, 4) with n_no_rope_layer_step 4 (llama-hparams.h), chunks of
#   n_swa = 8192, query temperature n_attn_temp_floor_scale 8192, f_attn_temp_scale 0.1, offset 1
LLAMA_CPP_ARCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3": {"sliding_window_pattern": 6, "rope_local_base_freq": 10000.0},
    "gemma2": {"sliding_window": 4096, "sliding_window_pattern": 2},
    "olmo2": {"sliding_window_pattern": 4},
    "gpt-oss": {"sliding_window_pattern": 2},
    "smollm3": {"no_rope_layer_interval": 4},
    "llama4": {"no_rope_layer_interval": 4, "attention_chunk_size": 8192, "attn_temperature_tuning": True,
               "floor_scale": 8192, "attn_scale": 0.1},
}  # fmt: skip
# models/llama4.cpp: attention.sliding_window = 0 turns the chunks and the temperature off and sets
# n_no_rope_layer_step = n_layer, so that (il + 1) % step == 0 leaves the last layer alone without RoPE
LLAMA_CPP_DEFAULTS_OFF: dict[str, str] = {"llama4": "sliding_window"}
LAST_LAYER_NOPE_WHEN_OFF = frozenset({"llama4"})

# Architectures whose converter writes rope.scaling.yarn_log_multiplier as 0.1 · mscale_all_dim and whose loader
# divides it back (models/deepseek2.cpp, "[TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]"); elsewhere llama.cpp reads the value
# as mscale_all_dim itself. llama.cpp has no key for mscale: it takes mscale = mscale_all_dim for deepseek2 and 1
# elsewhere (llama-context.cpp, llama_context's constructor: "here we assume mscale == 1.0f").
LOG_MUL_TENTHS_ARCHS = frozenset({"deepseek2"})

# YaRN's beta_fast / beta_slow: llama_hparams holds 32 and 1 (llama-hparams.h) and only these loaders read the
# keys (models/mistral3.cpp, models/grok.cpp, whose own default beta_fast is 8); every other architecture runs
# 32 and 1 whatever the GGUF says.
YARN_BETA_DEFAULTS = {"beta_fast": 32.0, "beta_slow": 1.0}
YARN_BETA_ARCHS: dict[str, dict[str, float]] = {
    "mistral3": YARN_BETA_DEFAULTS,
    "grok": {"beta_fast": 8.0, "beta_slow": 1.0},
}
# rope.scaling.yarn_attn_factor is read by models/grok.cpp only, and for YaRN llama_context recomputes the factor
# from mscale and mscale_all_dim anyway (llama-context.cpp): no architecture runs the key's value. What does apply
# is rope.scaling.attn_factor (load_hparams: rope_attn_factor), which multiplies the attention factor.
# ggml_rope_yarn_corr_dims floors the low and ceils the high correction dimension: llama.cpp's YaRN always
# truncates, as transformers' does with truncate = true (its default; gpt-oss's config says false)
LLAMA_CPP_YARN_TRUNCATES = True

LLAMA3_ORIGINAL_CONTEXT = 8192  # what the converter assumes when the config gives no top-level value (Llama 3.x)


def yarn_attention_factor(factor: float, mscale: float, mscale_all_dim: float, attn_factor: float) -> float:
    """YaRN's factor on cos and sin as llama.cpp runs it (llama-context.cpp, llama_context's constructor, with
    ggml's own 1 + 0.1·ln s in ggml_rope_yarn): get_mscale(s, mscale) / get_mscale(s, mscale_all_dim) when
    mscale_all_dim is non-zero, else 1 + 0.1·ln s; times rope.scaling.attn_factor."""

    def get_mscale(scale: float, m: float) -> float:
        return 1.0 if scale <= 1.0 else 0.1 * m * math.log(scale) + 1.0

    if mscale_all_dim:
        return get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) * attn_factor
    return get_mscale(factor, 1.0) * attn_factor


def llama3_factors(base: float, dim: int, factor: float, low: float, high: float, original: int) -> np.ndarray:
    """The per-pair factors llama.cpp's Llama 3 converter writes as ``rope_freqs.weight`` (float32): each pair's
    plain RoPE frequency over its frequency under rope_type llama3 with these params, both as the registered
    methods compute them (1 in the high band, ``factor`` in the low band, blended between). (d/2,)"""
    llama3 = {
        "base": base,
        "factor": factor,
        "low_freq_factor": low,
        "high_freq_factor": high,
        "original_max_position_embeddings": original,
    }
    plain = rope_frequencies(ROPE_TYPE_METHODS["default"], {"base": base}, dim).inv_freq  # (d/2,)
    scaled = rope_frequencies(ROPE_TYPE_METHODS["llama3"], llama3, dim).inv_freq  # (d/2,)
    factors: np.ndarray = (plain / scaled).numpy().astype(np.float32)
    return factors


def fit_llama3(values: Sequence[float], base: float, original: int) -> dict[str, Any] | None:
    """factor, low_freq_factor, high_freq_factor and original_max_position_embeddings that reproduce the llama3
    factors ``values``, or None when no llama3 setting does (or all are 1). Only the wavelength bounds original/low
    and original/high are in the factors, so ``original`` (the GGUF's original context, else the converter's 8192)
    is taken as given and the bands fitted to it: another (low, high, original) with the same bounds gives the same
    frequencies, which is what the comparison looks at."""
    factors = np.asarray(values, dtype=np.float64)  # (d/2,)
    dim = 2 * len(factors)
    factor = float(np.float32(factors.max()))
    if np.allclose(factors, 1.0):
        return None
    frequencies = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    ratio = original * frequencies.astype(np.float64) / (2 * math.pi)  # original / wavelength, (d/2,)
    tolerance = 1e-5 * factor
    between = (factors > 1 + tolerance) & (factors < factor - tolerance)
    candidates: list[tuple[float, float]] = [(1.0, 4.0), (1.0, 1.0)]
    if between.sum() >= 2:
        smooth = (1 / factors[between] - 1 / factor) / (1 - 1 / factor)  # s, linear in original / wavelength
        slope, intercept = np.polyfit(ratio[between], smooth, 1)
        low = -intercept / slope
        candidates.insert(0, (float(f"{low:.6g}"), float(f"{low + 1 / slope:.6g}")))
    for low, high in candidates:
        if not 0 < low <= high:
            continue  # no llama3 band: the method refuses such bounds
        expected = llama3_factors(base, dim, factor, low, high, original)
        if np.allclose(expected, factors, rtol=1e-4, atol=0):
            return {
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": original,
            }
    return None
