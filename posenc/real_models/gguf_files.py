"""GGUF files (llama.cpp's model format) read as model configs: the header's key/value metadata, mapped back to a
Hugging Face style config that ``resolve_config`` resolves, and compared with the config the GGUF was made from.

The file itself is read where it is, by the client (``posenc_client._gguf.read_gguf``: the header only, and of
the tensor data only the small rope tensors, ``rope_freqs.weight`` among them: llama.cpp's Llama 3 converter writes
the llama3 per-pair factors as a tensor, not as metadata); what travels, and what this module takes, is
``{"metadata": {key: value}, "tensors": {rope tensor: [values]}}``, bounded by ``check_metadata``.

- ``config_from_gguf(metadata, tensors)``: the keys llama.cpp's ``convert_hf_to_gguf.py`` writes, mapped back to
  the Hugging Face fields (``GGUF_KEYS``: one table of every spelling); the llama3 factors back to
  factor / low_freq_factor / high_freq_factor where they fit the llama3 formula.
- ``compare_with_config(metadata, tensors, config)``: every rope field the conversion dropped, renamed or changed,
  with both values, and every layer whose resolved rotation differs.

Pairing: llama.cpp's ``llama`` architecture rotates adjacent pairs because the converter permutes the q and k
weights; the model is the same, and the table here describes the Hugging Face layout of the weights (``half`` for
Llama), so a faithful GGUF resolves to the same layers as its config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gguf.constants import Keys

from posenc.errors import FieldErrors, InvalidInput, Loc, located
from posenc.pe.registry import get_method
from posenc.real_models.config_fields import MAX_HEAD_DIM
from posenc.real_models.configs import (
    ROPE_TYPE_METHODS,
    WHOLE_HEAD_MODEL_TYPES,
    ConfigWarning,
    LayerRope,
    ResolvedConfig,
    convert_config,
    resolve_config,
    rope_frequencies,
    text_config,
)
from posenc.schemas.models import (
    GGUF_ROPE_TENSORS,
    MAX_GGUF_ARRAY,
    MAX_GGUF_KEY_CHARS,
    MAX_GGUF_KEYS,
    MAX_GGUF_STRING_CHARS,
    MAX_GGUF_TENSOR_VALUES,
    MAX_GGUF_VALUES,
)

# ---------------------------------------------------------------------------------------------- bounds
# what a read keeps (and the route accepts, posenc.schemas.models): MAX_KEYS keys, strings up to MAX_STRING_CHARS,
# arrays up to MAX_ARRAY values (longer ones, the vocabulary and the merges, are skipped), rope tensors up to
# MAX_TENSOR_VALUES values
MAX_KEYS = MAX_GGUF_KEYS
MAX_KEY_CHARS = MAX_GGUF_KEY_CHARS
MAX_STRING_CHARS = MAX_GGUF_STRING_CHARS
MAX_ARRAY = MAX_GGUF_ARRAY
MAX_METADATA_ELEMENTS = MAX_GGUF_VALUES
MAX_TENSOR_VALUES = MAX_GGUF_TENSOR_VALUES
ROPE_TENSORS = GGUF_ROPE_TENSORS

LLAMA3_ORIGINAL_CONTEXT = 8192  # what the converter assumes when the config gives no top-level value (Llama 3.x)

# GGUF architecture -> Hugging Face model_type, where they differ (the model type decides pairing defaults and
# Gemma 3's unscaled sliding layers)
ARCH_MODEL_TYPES = {"gemma3": "gemma3_text", "gpt-oss": "gpt_oss", "llama4": "llama4_text", "deepseek2": "deepseek_v3"}

# Hugging Face field -> the GGUF key llama.cpp writes for it ("{arch}" is general.architecture); every key read
GGUF_KEYS: dict[str, str] = {
    "num_hidden_layers": Keys.LLM.BLOCK_COUNT,
    "hidden_size": Keys.LLM.EMBEDDING_LENGTH,
    "max_position_embeddings": Keys.LLM.CONTEXT_LENGTH,
    "num_attention_heads": Keys.Attention.HEAD_COUNT,
    "num_key_value_heads": Keys.Attention.HEAD_COUNT_KV,
    "head_dim": Keys.Attention.KEY_LENGTH,
    "sliding_window": Keys.Attention.SLIDING_WINDOW,
    "sliding_window_pattern": Keys.Attention.SLIDING_WINDOW_PATTERN,
    "rotary_dim": Keys.Rope.DIMENSION_COUNT,
    "mrope_section": Keys.Rope.DIMENSION_SECTIONS,
    "rope_theta": Keys.Rope.FREQ_BASE,
    "rope_local_base_freq": Keys.Rope.FREQ_BASE_SWA,
    "rope_type": Keys.Rope.SCALING_TYPE,
    "factor": Keys.Rope.SCALING_FACTOR,
    "original_max_position_embeddings": Keys.Rope.SCALING_ORIG_CTX_LEN,
    "attention_factor": Keys.Rope.SCALING_YARN_ATTN_FACTOR,
    "beta_fast": Keys.Rope.SCALING_YARN_BETA_FAST,
    "beta_slow": Keys.Rope.SCALING_YARN_BETA_SLOW,
    "mscale_all_dim": Keys.Rope.SCALING_YARN_LOG_MUL,  # 0.1 · mscale_all_dim for deepseek2 (LOG_MUL_TENTHS_ARCHS)
    # MLA (DeepSeek-V2/V3 and the models converted as deepseek2): the rotated part is rope.dimension_count
    "kv_lora_rank": Keys.Attention.KV_LORA_RANK,
    "q_lora_rank": Keys.Attention.Q_LORA_RANK,
    "qk_head_dim": Keys.Attention.KEY_LENGTH_MLA,  # qk_nope_head_dim + qk_rope_head_dim (key_length before it)
    "v_head_dim": Keys.Attention.VALUE_LENGTH_MLA,
}
# Hugging Face field -> the rope tensor it is read from (LongRoPE's per-pair factors)
GGUF_TENSOR_FIELDS: dict[str, str] = {
    "long_factor": "rope_factors_long.weight",
    "short_factor": "rope_factors_short.weight",
}
# What llama.cpp's loader takes for an architecture when the GGUF has no key for the field (src/llama-model.cpp,
# src/models/*.cpp): Gemma 3's sliding layers every 6th layer global, at base 10000 and unscaled
# (set_swa_pattern(6), rope_freq_base_train_swa = 10000, rope_freq_scale_train_swa = 1); SmolLM3's and Llama 4's
# NoPE layers every 4th (n_no_rope_layer_step = 4, which no GGUF key sets); Llama 4's 8192-token chunks and its
# query temperature (n_attn_temp_floor_scale 8192, f_attn_temp_scale 0.1, offset 1). The Hugging Face fields
# they are, by each config's own names.
LLAMA_CPP_ARCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3": {"sliding_window_pattern": 6, "rope_local_base_freq": 10000.0},
    "smollm3": {"no_rope_layer_interval": 4},
    "llama4": {"no_rope_layer_interval": 4, "attention_chunk_size": 8192, "attn_temperature_tuning": True,
               "floor_scale": 8192, "attn_scale": 0.1},
}  # fmt: skip
# ... unless this field is in the GGUF as 0 (Llama 4: attention.sliding_window = 0 turns them all off)
LLAMA_CPP_DEFAULTS_OFF: dict[str, str] = {"llama4": "sliding_window"}
LLAMA_CPP_THETA = 10000.0  # rope_freq_base_train when the GGUF has no rope.freq_base
NO_KEY = "(no GGUF key)"  # the origin of a default that no key of the file could have set
# Architectures whose converter writes rope.scaling.yarn_log_mul as 0.1 · mscale_all_dim and whose loader divides
# it back (llama.cpp's DeepseekV2Model in convert_hf_to_gguf.py and its deepseek2 loader,
# "[TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]", ggml-org/llama.cpp#17945); elsewhere llama.cpp reads the value as
# mscale_all_dim itself. llama.cpp has no key for mscale: it takes mscale = mscale_all_dim for these architectures
# and 1 elsewhere (src/llama-context.cpp: "here we assume mscale == 1.0f", DeepSeek-V2 special-cased).
LOG_MUL_TENTHS_ARCHS = frozenset({"deepseek2"})
# older or other spellings of the same fields: found in a GGUF, they are a rename llama.cpp does not read
GGUF_OTHER_SPELLINGS: dict[str, tuple[str, ...]] = {
    "factor": ("{arch}.rope.scale_linear",),  # llama.cpp before rope.scaling.*
    "attention_factor": (Keys.Rope.SCALING_ATTN_FACTOR,),
}
LLAMA3_FIELDS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
# the rope fields compared with a config (in its v4 spelling: rope_scaling next to rope_theta); None: no GGUF key
COMPARED_FIELDS: dict[str, str | None] = {
    "rope_theta": "rope_theta",
    "rope_local_base_freq": "rope_local_base_freq",
    "max_position_embeddings": "max_position_embeddings",
    "sliding_window": "sliding_window",
    "rope_scaling.rope_type": "rope_type",
    "rope_scaling.factor": "factor",
    "rope_scaling.original_max_position_embeddings": "original_max_position_embeddings",
    "rope_scaling.low_freq_factor": None,
    "rope_scaling.high_freq_factor": None,
    "rope_scaling.attention_factor": "attention_factor",
    "rope_scaling.beta_fast": "beta_fast",
    "rope_scaling.beta_slow": "beta_slow",
    "rope_scaling.mscale_all_dim": "mscale_all_dim",
    "rope_scaling.mscale": None,
    "rope_scaling.truncate": None,
    "rope_scaling.mrope_section": "mrope_section",
    "rope_scaling.short_factor": None,
    "rope_scaling.long_factor": None,
}
GGUF_SCALING_TYPES = {"none": "default", "linear": "linear", "yarn": "yarn", "longrope": "longrope"}
LAYER_FIELDS = ("layer_type", "method", "params", "rotary_dim", "rotary_slice", "pairing", "attention_scale",
                "softmax_scale", "window", "mrope_section")  # fmt: skip


# ---------------------------------------------------------------------------------------------- checking
def check_metadata(metadata: Mapping[str, Any], tensors: Mapping[str, Sequence[Any]]) -> int:
    """Refuse metadata that no GGUF header as ``read_gguf`` reads it holds (errors at ("metadata", key) and
    ("tensors", name)); returns the number of values, for the cost."""
    if len(metadata) > MAX_KEYS:
        raise InvalidInput(("metadata",), f"has {len(metadata)} keys; at most {MAX_KEYS}")
    values = 0
    for key, value in metadata.items():
        if len(key) > MAX_KEY_CHARS:
            raise InvalidInput(("metadata",), f"a key of {len(key)} characters; at most {MAX_KEY_CHARS}")
        items = value if isinstance(value, list) else [value]
        if isinstance(value, list) and len(value) > MAX_ARRAY:
            raise InvalidInput(("metadata", key), f"an array of {len(value)} values; at most {MAX_ARRAY}")
        for item in items:
            if isinstance(item, str) and len(item) > MAX_STRING_CHARS:
                raise InvalidInput(("metadata", key), f"a string of {len(item)} characters; at most {MAX_STRING_CHARS}")
            if not (item is None or isinstance(item, str | int | float | bool)):
                raise InvalidInput(("metadata", key), "must be a number, a string, a boolean or an array of them")
        values += len(items)
    if values > MAX_METADATA_ELEMENTS:
        raise InvalidInput(("metadata",), f"holds {values} values; at most {MAX_METADATA_ELEMENTS}")
    for name, data in tensors.items():
        if name not in ROPE_TENSORS:
            raise InvalidInput(("tensors", name), f"is not a rope tensor; known: {list(ROPE_TENSORS)}")
        if not 1 <= len(data) <= MAX_TENSOR_VALUES:
            raise InvalidInput(("tensors", name), f"holds {len(data)} values; 1 ... {MAX_TENSOR_VALUES}")
        values += len(data)
    return values


# ---------------------------------------------------------------------------------------------- mapping
@dataclass(frozen=True)
class GgufConfig:
    """A GGUF's metadata as a Hugging Face style config (v4 spelling: ``rope_scaling`` next to ``rope_theta``),
    the GGUF key (or tensor) each field came from, notes on what could not be mapped back, and ``keys``: the GGUF
    key of every mapped field under the file's architecture (``GGUF_KEYS`` formatted), given or not."""

    config: dict[str, Any]
    origins: dict[str, str]
    notes: list[ConfigWarning]
    keys: Mapping[str, str] = field(default_factory=dict)

    def resolve(self) -> ResolvedConfig:
        """The config's layers, as ``/v1/models/resolve`` answers them; an error names the GGUF key the field came
        from (``("metadata", "llama.block_count")``, not the config's ``num_hidden_layers``), the key the file
        would need for a field it lacks (``("metadata", "llama.attention.head_count")``), or the rope tensor
        (``("tensors", "rope_freqs.weight")``)."""
        try:
            return resolve_config(self.config)
        except InvalidInput as exc:
            raise InvalidInput(*self._gguf_error(exc.loc, exc.msg)) from None
        except FieldErrors as exc:
            raise FieldErrors(
                {**error, **dict(zip(("loc", "msg"), self._gguf_error(error["loc"], error["msg"]), strict=True))}
                for error in exc.errors
            ) from None

    def _gguf_error(self, loc: Sequence[str | int], msg: str) -> tuple[Loc, str]:
        """An error of the config located in the request: at the GGUF key (or rope tensor) of the longest leading
        part of ``loc`` that one filled or would fill; at ``metadata`` itself, naming the config field, where no
        key could (a default llama.cpp takes without one)."""
        for end in range(len(loc), 0, -1):
            origin = self.origins.get(".".join(map(str, loc[:end])))
            if origin is None and (end == 1 or (end == 2 and loc[0] == "rope_scaling")):
                origin = self.keys.get(str(loc[end - 1]))  # a field the file lacks: the key that would give it
            if origin is not None and origin != NO_KEY:
                return ("tensors" if origin in ROPE_TENSORS else "metadata", origin, *loc[end:]), msg
        field_name = ".".join(map(str, loc)) or "the config"
        return ("metadata",), f"{field_name} (of the config the metadata maps to, set by no GGUF key): {msg}"


def _number(metadata: Mapping[str, Any], key: str, *, integer: bool = False) -> Any:
    value = metadata.get(key)
    if value is None:
        return None
    if isinstance(value, list):  # per-layer values (head counts of hybrid models): the attention layers' count
        numbers = [v for v in value if isinstance(v, int | float) and not isinstance(v, bool) and v]
        value = max(numbers) if numbers else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(("metadata", key), f"must be a number, got {type(value).__name__}")
    if integer:
        if value != int(value):
            raise InvalidInput(("metadata", key), f"must be a whole number, got {value}")
        return int(value)
    return float(value)


def config_from_gguf(metadata: Mapping[str, Any], tensors: Mapping[str, Sequence[float]] | None = None) -> GgufConfig:
    """The Hugging Face style config a GGUF's metadata describes (what llama.cpp will run); errors at
    ("metadata", key) and ("tensors", name)."""
    tensors = tensors or {}
    arch = metadata.get(Keys.General.ARCHITECTURE)
    if not isinstance(arch, str) or not arch:
        raise InvalidInput(("metadata", Keys.General.ARCHITECTURE), "is required (the model's architecture)")
    keys = {name: template.format(arch=arch) for name, template in GGUF_KEYS.items()}
    config: dict[str, Any] = {"model_type": ARCH_MODEL_TYPES.get(arch, arch)}
    origins: dict[str, str] = {"model_type": Keys.General.ARCHITECTURE}
    notes: list[ConfigWarning] = []

    def put(name: str, value: Any, origin: str | None = None) -> None:
        if value is not None:
            config[name] = value
            origins[name] = origin or keys[name]

    for name in ("num_hidden_layers", "hidden_size", "max_position_embeddings", "num_attention_heads",
                 "num_key_value_heads", "sliding_window"):  # fmt: skip
        value = _number(metadata, keys[name], integer=True)
        put(name, None if name == "sliding_window" and value == 0 else value)  # a window of 0: none
    put("rope_theta", _number(metadata, keys["rope_theta"]))
    put("rope_local_base_freq", _number(metadata, keys["rope_local_base_freq"]))
    if _number(metadata, keys["kv_lora_rank"], integer=True) is not None:
        _mla_dims(metadata, keys, arch, put)
    else:
        put("head_dim", _number(metadata, keys["head_dim"], integer=True))
        _rotary_dim(metadata, keys, config, put)
        if "rotary_dim" in config and config["model_type"] in WHOLE_HEAD_MODEL_TYPES:
            notes.append(
                ConfigWarning(
                    "gguf_partial_rotary_unspellable",
                    f"llama.cpp rotates {config['rotary_dim']} features of each head ({keys['rotary_dim']}), but "
                    f"{config['model_type']}'s rotary code in transformers rotates the whole head whatever the "
                    "config says: the resolved layers are what that config runs in transformers, not in llama.cpp.",
                    [],
                    {"rotary_dim": config["rotary_dim"], "gguf_key": keys["rotary_dim"]},
                )
            )
    _sliding_pattern(metadata, keys["sliding_window_pattern"], config, put)
    # what llama.cpp takes without the key, said outright so that no config class fills in its own (SmolLM3's
    # θ = 2e6, Gemma's head_dim = 256); with no origin, the comparison still reports the key as missing
    config.setdefault("rope_theta", LLAMA_CPP_THETA)
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    if "qk_rope_head_dim" not in config and "head_dim" not in config and heads and hidden:
        if not 1 <= hidden // heads <= MAX_HEAD_DIM:
            raise InvalidInput(
                ("metadata", keys["hidden_size"]),
                f"{keys['hidden_size']} / {keys['num_attention_heads']} = {hidden // heads} features per head; "
                f"must be 1 ... {MAX_HEAD_DIM} (or give {keys['head_dim']})",
            )
        config["head_dim"] = hidden // heads  # n_embd_head_k = n_embd / n_head
    switch = LLAMA_CPP_DEFAULTS_OFF.get(arch)
    defaults = {} if switch is not None and metadata.get(keys[switch]) == 0 else LLAMA_CPP_ARCH_DEFAULTS.get(arch, {})
    for name, value in defaults.items():
        if name not in config and not (name == "sliding_window_pattern" and "layer_types" in config):
            put(name, value, keys.get(name, NO_KEY))  # the key llama.cpp would have read, if there is one
    scaling, scaling_origins = _scaling(metadata, tensors, keys, config, notes)
    if scaling is not None:
        config["rope_scaling"] = scaling
        origins.update({f"rope_scaling.{name}": origin for name, origin in scaling_origins.items()})
    else:  # said outright: llama.cpp scales nothing, where a config class would fill in its own (gpt-oss's YaRN)
        config["rope_scaling"] = {"rope_type": "default"}
    return GgufConfig(config, origins, notes, keys | GGUF_TENSOR_FIELDS)


def _rotary_dim(metadata: Mapping[str, Any], keys: Mapping[str, str], config: dict[str, Any], put: Any) -> None:
    rotated = _number(metadata, keys["rotary_dim"], integer=True)
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    head_dim = config.get("head_dim") or (hidden // heads if heads and hidden else None)
    if rotated is not None and rotated != head_dim:
        put("rotary_dim", rotated)


def _mla_dims(metadata: Mapping[str, Any], keys: Mapping[str, str], arch: str, put: Any) -> None:
    """An MLA model's head as DeepSeek's config spells it: rope.dimension_count rotated features
    (qk_rope_head_dim) after qk_nope_head_dim unrotated ones. The whole query/key head is attention.key_length_mla
    in GGUFs written since llama.cpp absorbed MLA (key_length is then kv_lora_rank + the rotated part), and
    attention.key_length before."""
    rotated = _number(metadata, keys["rotary_dim"], integer=True)
    if rotated is None:
        raise InvalidInput(("metadata", keys["rotary_dim"]), "is required for MLA (the rotated part of each head)")
    whole_key = keys["qk_head_dim"] if keys["qk_head_dim"] in metadata else keys["head_dim"]
    whole = _number(metadata, whole_key, integer=True)
    if whole is None or whole < rotated:
        raise InvalidInput(("metadata", whole_key), f"must hold the whole head (at least {rotated} features)")
    put("qk_rope_head_dim", rotated, keys["rotary_dim"])
    put("qk_nope_head_dim", whole - rotated, whole_key)
    value_key = keys["v_head_dim"] if keys["v_head_dim"] in metadata else Keys.Attention.VALUE_LENGTH.format(arch=arch)
    put("v_head_dim", _number(metadata, value_key, integer=True), value_key)
    put("kv_lora_rank", _number(metadata, keys["kv_lora_rank"], integer=True))
    put("q_lora_rank", _number(metadata, keys["q_lora_rank"], integer=True))


def _sliding_pattern(metadata: Mapping[str, Any], key: str, config: dict[str, Any], put: Any) -> None:
    """``{arch}.attention.sliding_window_pattern``: n (every n-th layer global) or one bool per layer (true:
    sliding), as llama.cpp reads it."""
    pattern = metadata.get(key)
    if pattern is None or not config.get("sliding_window"):
        return
    if isinstance(pattern, list):
        if not all(isinstance(flag, bool) for flag in pattern):
            raise InvalidInput(("metadata", key), "must be a whole number or one boolean per layer")
        put("layer_types", ["sliding_attention" if flag else "full_attention" for flag in pattern], key)
    elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern >= 1:
        put("sliding_window_pattern", pattern, key)
    else:
        raise InvalidInput(("metadata", key), "must be a whole number or one boolean per layer")


def _scaling(
    metadata: Mapping[str, Any],
    tensors: Mapping[str, Sequence[float]],
    keys: Mapping[str, str],
    config: Mapping[str, Any],
    notes: list[ConfigWarning],
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The rope_scaling dict (and each field's GGUF key): rope.scaling.* for linear, YaRN and LongRoPE (its two
    factor tensors), the rope_freqs tensor for llama3, the sections for M-RoPE."""
    kind = metadata.get(keys["rope_type"])
    origins: dict[str, str] = {}
    scaling: dict[str, Any] = {}
    if kind is not None:
        if kind not in GGUF_SCALING_TYPES:
            raise InvalidInput(("metadata", keys["rope_type"]), f"{kind!r} is not one of {sorted(GGUF_SCALING_TYPES)}")
        scaling["rope_type"], origins["rope_type"] = GGUF_SCALING_TYPES[kind], keys["rope_type"]
        for name in ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor"):
            value = _number(metadata, keys[name], integer=name == "original_max_position_embeddings")
            if value is not None and scaling["rope_type"] != "default":
                scaling[name], origins[name] = value, keys[name]
        if scaling["rope_type"] in ("linear", "yarn") and "factor" not in scaling:
            scaling["factor"] = 1.0  # llama.cpp reads a missing factor as 1 (frequencies unscaled)
            notes.append(
                ConfigWarning(
                    "gguf_scaling_without_factor",
                    f"{keys['rope_type']} is {kind!r} but the GGUF has no {keys['factor']}: llama.cpp scales by 1.",
                    [],
                    {"rope_type": kind, "factor": None},
                )
            )
        log_mul = _number(metadata, keys["mscale_all_dim"])
        if log_mul is not None and scaling["rope_type"] == "yarn":
            tenths = metadata[Keys.General.ARCHITECTURE] in LOG_MUL_TENTHS_ARCHS
            mscale_all_dim = float(np.float32(log_mul / np.float32(0.1))) if tenths else log_mul
            scaling["mscale_all_dim"], origins["mscale_all_dim"] = mscale_all_dim, keys["mscale_all_dim"]
            scaling["mscale"], origins["mscale"] = (mscale_all_dim if tenths else 1.0), keys["mscale_all_dim"]
        if scaling["rope_type"] == "longrope":
            for name, tensor in GGUF_TENSOR_FIELDS.items():
                if tensor in tensors:
                    scaling[name], origins[name] = [float(v) for v in tensors[tensor]], tensor
    elif "rope_freqs.weight" in tensors:
        llama3 = _llama3_params(tensors["rope_freqs.weight"], metadata, keys, config, notes)
        if llama3 is not None:
            scaling.update(llama3)
            origins.update(dict.fromkeys(llama3, "rope_freqs.weight"))
    sections = metadata.get(keys["mrope_section"])
    if isinstance(sections, list) and len(sections) >= 3 and any(sections):
        scaling.setdefault("rope_type", "default")
        scaling["mrope_section"], origins["mrope_section"] = [int(v) for v in sections[:3]], keys["mrope_section"]
    if not scaling or scaling == {"rope_type": "default"}:
        return None, {}
    return scaling, origins


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


def _llama3_params(
    values: Sequence[float],
    metadata: Mapping[str, Any],
    keys: Mapping[str, str],
    config: Mapping[str, Any],
    notes: list[ConfigWarning],
) -> dict[str, Any] | None:
    """factor, low_freq_factor, high_freq_factor and original_max_position_embeddings that reproduce the llama3
    factors, or None (with a note) when no llama3 setting does. Only the wavelength bounds original/low and
    original/high are in the factors: original is the GGUF's original context length if it has one, else 8192
    (the converter's own assumption)."""
    factors = np.asarray(values, dtype=np.float64)  # (d/2,)
    base = float(config.get("rope_theta", 10000.0))
    dim = 2 * len(factors)
    original = _number(metadata, keys["original_max_position_embeddings"], integer=True) or LLAMA3_ORIGINAL_CONTEXT
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
        if high < low:
            continue
        expected = llama3_factors(base, dim, factor, low, high, original)
        if np.allclose(expected, factors, rtol=1e-4, atol=0):
            return {
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": original,
            }
    notes.append(
        ConfigWarning(
            "gguf_rope_freqs_not_llama3",
            f"rope_freqs.weight holds {len(factors)} per-pair factors that no llama3 setting reproduces (factor "
            f"{factor:g}, original context {original}); llama.cpp divides each pair's frequency by its factor, "
            "which posenc does not resolve: the table shows plain RoPE.",
            [],
            {"rope_freqs": [float(v) for v in factors[:16]], "values": len(factors)},
        )
    )
    return None


# ---------------------------------------------------------------------------------------------- comparing
def _v4_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config's compared fields, by their v4 names (``rope_scaling.factor``)."""
    text = text_config(convert_config(config, "v4"))
    scaling = text.get("rope_scaling") or {}
    fields: dict[str, Any] = {}
    for name in COMPARED_FIELDS:
        source, key = (scaling, name.split(".", 1)[1]) if name.startswith("rope_scaling.") else (text, name)
        value = source.get(key) if isinstance(source, Mapping) else None
        if value is None and name == "rope_scaling.rope_type" and isinstance(scaling, Mapping):
            value = scaling.get("type")  # the v4 dialect's older spelling (DeepSeek-V3's config.json)
        if value is not None:
            fields[name] = value
    fields.setdefault("rope_scaling.rope_type", "default")
    return fields


def _same(a: Any, b: Any) -> bool:
    """Equal as GGUF stores them: floats to float32 (a GGUF keeps float32), lists element by element."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool | str):
        return bool(np.float32(a) == np.float32(b)) or math.isclose(a, b, rel_tol=1e-6)
    return bool(a == b)


def compare_with_config(
    metadata: Mapping[str, Any], tensors: Mapping[str, Sequence[float]] | None, config: Mapping[str, Any]
) -> list[ConfigWarning]:
    """Every rope field of ``config`` (a Hugging Face config.json) that the GGUF dropped, renamed or changed, with
    both values (codes ``gguf_field_dropped``, ``gguf_field_renamed``, ``gguf_field_changed``), and the layers
    whose resolved rotations differ (``gguf_layers_differ``). Errors in ``config`` at ("against", ...)."""
    converted = config_from_gguf(metadata, tensors)
    with located(("against",)):
        expected = _v4_fields(config)
        reference = resolve_config(config)
    with located(("metadata",)):
        found = _v4_fields(converted.config)
    resolved = converted.resolve()
    arch = str(metadata[Keys.General.ARCHITECTURE])
    llama3 = expected.get("rope_scaling.rope_type") == "llama3"
    warnings: list[ConfigWarning] = []
    for name, wanted in expected.items():
        got = found.get(name) if name in converted.origins else None  # None: not in the GGUF (a default)
        if _same(wanted, "default" if got is None and name == "rope_scaling.rope_type" else got):
            continue
        short = COMPARED_FIELDS[name]
        key = converted.origins.get(name) or _expected_key(name, short, arch, llama3)
        evidence = {"field": name, "config": wanted, "gguf": got, "gguf_key": key}
        if got is not None:
            where = (
                key
                if key in metadata or key in (tensors or {})
                else f"llama.cpp's {arch} default" + ("; no GGUF key sets it" if key == NO_KEY else f": no {key}")
            )
            warnings.append(
                ConfigWarning(
                    "gguf_field_changed",
                    f"{name} is {wanted!r} in the config and {got!r} in the GGUF ({where}).",
                    [],
                    evidence,
                )
            )
            continue
        other = _other_spelling(metadata, short, arch)
        if other is not None:
            warnings.append(
                ConfigWarning(
                    "gguf_field_renamed",
                    f"{name} ({wanted!r} in the config) is in the GGUF as {other[0]} = {other[1]!r}, not as {key}: "
                    "llama.cpp reads only the latter.",
                    [],
                    {**evidence, "gguf": other[1], "gguf_key_found": other[0]},
                )
            )
            continue
        where = f"no {key} in the GGUF" if key else "llama.cpp has no GGUF key for it"
        warnings.append(
            ConfigWarning(
                "gguf_field_dropped",
                f"{name} is {wanted!r} in the config and missing from the GGUF ({where}).",
                [],
                evidence,
            )
        )
    warnings.extend(_layer_differences(reference.layers, resolved.layers))
    return warnings


def _expected_key(name: str, short: str | None, arch: str, llama3: bool) -> str | None:
    if llama3 and name.removeprefix("rope_scaling.") in (*LLAMA3_FIELDS, "rope_type"):
        return "rope_freqs.weight"  # llama.cpp's converter writes the llama3 scaling as this tensor only
    return GGUF_KEYS[short].format(arch=arch) if short is not None else None


def _other_spelling(metadata: Mapping[str, Any], short: str | None, arch: str) -> tuple[str, Any] | None:
    """The field under another spelling: an older key, or the right key under another architecture's prefix."""
    if short is None:
        return None
    for template in GGUF_OTHER_SPELLINGS.get(short, ()):
        key = template.format(arch=arch)
        if key in metadata:
            return key, metadata[key]
    suffix = GGUF_KEYS[short].removeprefix("{arch}")
    for key, value in metadata.items():
        if key.endswith(suffix) and key != GGUF_KEYS[short].format(arch=arch) and "." not in key.removesuffix(suffix):
            return key, value
    return None


def _layer_differences(config_layers: Sequence[LayerRope], gguf_layers: Sequence[LayerRope]) -> list[ConfigWarning]:
    """Layers whose resolved setups differ, grouped by the same differences."""
    if len(config_layers) != len(gguf_layers):
        return [
            ConfigWarning(
                "gguf_layers_differ",
                f"the config has {len(config_layers)} layers and the GGUF {len(gguf_layers)}.",
                [],
                {"config": {"layers": len(config_layers)}, "gguf": {"layers": len(gguf_layers)}},
            )
        ]
    groups: dict[str, tuple[list[int], dict[str, Any], dict[str, Any]]] = {}
    for ours, theirs in zip(config_layers, gguf_layers, strict=True):
        a, b = ours.to_json(), theirs.to_json()
        if a["method"] == b["method"] and a["method"] is not None:  # a param left at its default is the same value
            a["params"], b["params"] = (
                _with_defaults(a["method"], a["params"]),
                _with_defaults(b["method"], b["params"]),
            )
        differing = [name for name in LAYER_FIELDS if not _same_layer_value(a[name], b[name])]
        if differing:
            left, right = {name: a[name] for name in differing}, {name: b[name] for name in differing}
            entry = groups.setdefault(repr((left, right)), ([], left, right))
            entry[0].append(ours.layer)
    return [
        ConfigWarning(
            "gguf_layers_differ",
            f"{len(layers)} layer(s) resolve differently from the GGUF than from the config: {', '.join(left)}.",
            layers,
            {"config": left, "gguf": right},
        )
        for layers, left, right in groups.values()
    ]


def _with_defaults(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with every default of ``method``'s params filled in (as the method runs them)."""
    return get_method(method).parse_params(params).model_dump()


def _same_layer_value(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    return _same(a, b)
