"""GGUF files (llama.cpp's model format) read as model configs: the header's key/value metadata, mapped back to a
Hugging Face style config that ``resolve_config`` resolves, and compared with the config the GGUF was made from.

The file itself is read where it is, by the client (``posenc_client._gguf.read_gguf``: the header only, and of
the tensor data only the small rope tensors, ``rope_freqs.weight`` among them: llama.cpp's Llama 3 converter writes
the llama3 per-pair factors as a tensor, not as metadata); what travels, and what this module takes, is
``{"metadata": {key: value}, "tensors": {rope tensor: [values]}}``, bounded by ``check_metadata``.

- ``config_from_gguf(metadata, tensors)``: the keys llama.cpp's ``convert_hf_to_gguf.py`` writes, mapped back to
  the Hugging Face fields (``GGUF_KEYS``: one table of every spelling) as llama.cpp's loader reads them: its
  defaults and fallbacks, and the keys it reads for some architectures only (``posenc.real_models.gguf_llama_cpp``:
  a missing scaling type is linear, rope.scale_linear stands in for the factor, Phi-3's LongRoPE tensors apply
  without a type, YaRN's betas are 32 and 1 outside mistral3 and grok); the llama3 factors back to
  factor / low_freq_factor / high_freq_factor where they fit the llama3 formula.
- ``compare_with_config(metadata, tensors, config)``: every rope field the conversion dropped, renamed, changed or
  wrote where llama.cpp does not read it, with both values, and every layer whose resolved rotation differs, by
  frequencies and scales (``posenc.real_models.gguf_compare``).

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

from posenc.errors import FieldErrors, InvalidInput, Loc
from posenc.real_models.config_fields import MAX_HEAD_DIM
from posenc.real_models.configs import ConfigWarning, ResolvedConfig, resolve_config
from posenc.real_models.gguf_llama_cpp import (
    LAST_LAYER_NOPE_WHEN_OFF,
    LLAMA3_ORIGINAL_CONTEXT,
    LLAMA_CPP_ARCH_DEFAULTS,
    LLAMA_CPP_DEFAULTS_OFF,
    LLAMA_CPP_THETA,
    LLAMA_CPP_YARN_TRUNCATES,
    LOG_MUL_TENTHS_ARCHS,
    SCALE_LINEAR_KEY,
    YARN_BETA_ARCHS,
    YARN_BETA_DEFAULTS,
    fit_llama3,
    yarn_attention_factor,
)
from posenc.real_models.model_types import ARCH_MODEL_TYPES, model_type_record
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
    "attention_factor": Keys.Rope.SCALING_ATTN_FACTOR,  # rope_attn_factor (LongRoPE's; multiplies YaRN's own)
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
NO_KEY = "(no GGUF key)"  # the origin of a default that no key of the file could have set
# older or other spellings of the same fields: found in a GGUF, they are a rename llama.cpp does not read
# (rope.scale_linear is not one: llama.cpp's loader falls back on it for the factor)
GGUF_OTHER_SPELLINGS: dict[str, tuple[str, ...]] = {}
GGUF_SCALING_TYPES = {"none": "default", "linear": "linear", "yarn": "yarn", "longrope": "longrope"}


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
    key of every mapped field under the file's architecture (``GGUF_KEYS`` formatted), given or not; ``ignored``:
    the fields whose key the file has but llama.cpp's loader does not read for its architecture (field -> (key, the
    file's value, the value llama.cpp runs instead))."""

    config: dict[str, Any]
    origins: dict[str, str]
    notes: list[ConfigWarning]
    keys: Mapping[str, str] = field(default_factory=dict)
    ignored: Mapping[str, tuple[str, Any, Any]] = field(default_factory=dict)

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
        if "rotary_dim" in config and model_type_record(config["model_type"]).partial_rotary_ignored is not None:
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
    off = switch is not None and metadata.get(keys[switch]) == 0
    defaults = {} if off else LLAMA_CPP_ARCH_DEFAULTS.get(arch, {})
    for name, value in defaults.items():
        if name not in config and not (name == "sliding_window_pattern" and "layer_types" in config):
            put(name, value, keys.get(name, NO_KEY))  # the key llama.cpp would have read, if there is one
    if off and arch in LAST_LAYER_NOPE_WHEN_OFF and config.get("num_hidden_layers"):
        # models/llama4.cpp: n_no_rope_layer_step = n_layer, so (il + 1) % step == 0 on the last layer only
        put("no_rope_layer_interval", config["num_hidden_layers"], keys["sliding_window"])
    ignored: dict[str, tuple[str, Any, Any]] = {}
    scaling, scaling_origins = _scaling(metadata, tensors, keys, config, notes, ignored)
    if scaling is not None:
        config["rope_scaling"] = scaling
        origins.update({f"rope_scaling.{name}": origin for name, origin in scaling_origins.items()})
    else:  # said outright: llama.cpp scales nothing, where a config class would fill in its own (gpt-oss's YaRN)
        config["rope_scaling"] = {"rope_type": "default"}
    return GgufConfig(config, origins, notes, keys | GGUF_TENSOR_FIELDS, ignored)


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
    ignored: dict[str, tuple[str, Any, Any]],
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The rope_scaling dict (and each field's GGUF key) as llama.cpp's loader reads the file (load_hparams in
    src/llama-model.cpp): a missing rope.scaling.type is linear, the factor is rope.scaling.factor or else
    rope.scale_linear; LongRoPE's factor tensors make it LongRoPE where the type is missing or longrope (Phi-3's
    converter writes no type; llama_model::get_rope_factors applies them); the rope_freqs tensor is llama3's
    factors; YaRN's betas and attention factor as each architecture reads them."""
    arch = str(metadata[Keys.General.ARCHITECTURE])
    type_key = keys["rope_type"]
    kind = metadata.get(type_key)
    if kind is not None and kind not in GGUF_SCALING_TYPES:
        raise InvalidInput(("metadata", type_key), f"{kind!r} is not one of {sorted(GGUF_SCALING_TYPES)}")
    factor_key = keys["factor"] if keys["factor"] in metadata else SCALE_LINEAR_KEY.format(arch=arch)
    factor = _number(metadata, factor_key)
    factor = None if factor == 0 else factor  # load_hparams: a factor of 0 is no scaling
    longrope = {name: tensor for name, tensor in GGUF_TENSOR_FIELDS.items() if tensor in tensors}
    origins: dict[str, str] = {}
    scaling: dict[str, Any] = {}
    if kind is not None:
        rope_type = GGUF_SCALING_TYPES[kind]
        origins["rope_type"] = type_key
    elif longrope:
        rope_type = "longrope"  # Phi-3's converter writes the tensors and no type: llama.cpp runs the factors
        origins["rope_type"] = next(iter(longrope.values()))
    elif factor is not None and factor != 1:
        rope_type = "linear"
        origins["rope_type"] = factor_key
        notes.append(
            ConfigWarning(
                "gguf_scaling_type_missing",
                f"the GGUF has {factor_key} = {factor:g} and no {type_key}: llama.cpp reads the type as linear and "
                f"divides every frequency by {factor:g}.",
                [],
                {"gguf_key": factor_key, "factor": factor},
            )
        )
    else:
        rope_type = None
    if rope_type is not None:
        scaling["rope_type"] = rope_type
    if rope_type in ("linear", "yarn"):
        if factor is None:
            notes.append(
                ConfigWarning(
                    "gguf_scaling_without_factor",
                    f"{type_key} is {kind!r} but the GGUF has no {keys['factor']}: llama.cpp scales by 1.",
                    [],
                    {"rope_type": kind, "factor": None},
                )
            )
        scaling["factor"] = factor if factor is not None else 1.0
        if factor is not None:
            origins["factor"] = factor_key
    if rope_type in ("yarn", "longrope"):
        original = _number(metadata, keys["original_max_position_embeddings"], integer=True)
        if original is not None:  # load_hparams: n_ctx_orig_yarn, else n_ctx_train
            origins["original_max_position_embeddings"] = keys["original_max_position_embeddings"]
        if (original or config.get("max_position_embeddings")) is None:
            # src/llama-model.cpp load_hparams: n_ctx_orig_yarn is the file's original context, else n_ctx_train
            # (LLM_KV_CONTEXT_LENGTH, a key the loader requires); a file with neither does not load
            raise InvalidInput(
                ("metadata", keys["original_max_position_embeddings"]),
                f"is required for {kind or rope_type} scaling (or {keys['max_position_embeddings']}, which llama.cpp "
                "takes in its place and requires)",
            )
        scaling["original_max_position_embeddings"] = original or config.get("max_position_embeddings")
    attn_factor = _number(metadata, keys["attention_factor"])
    if rope_type == "yarn":
        _yarn(metadata, keys, arch, scaling, origins, ignored, attn_factor)
    if rope_type == "longrope":
        for name, tensor in longrope.items():
            scaling[name], origins[name] = [float(v) for v in tensors[tensor]], tensor
        # load_hparams: rope_attn_factor is 1 unless rope.scaling.attn_factor says otherwise
        scaling["attention_factor"] = 1.0 if attn_factor is None else attn_factor
        if attn_factor is not None:
            origins["attention_factor"] = keys["attention_factor"]
    if rope_type is None and "rope_freqs.weight" in tensors:
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


def _yarn(
    metadata: Mapping[str, Any],
    keys: Mapping[str, str],
    arch: str,
    scaling: dict[str, Any],
    origins: dict[str, str],
    ignored: dict[str, tuple[str, Any, Any]],
    attn_factor: float | None,
) -> None:
    """YaRN's betas, mscale and attention factor as ``arch``'s loader runs them (gguf_llama_cpp's tables)."""
    reads_betas = YARN_BETA_ARCHS.get(arch)
    for name, default in (reads_betas or YARN_BETA_DEFAULTS).items():
        value = _number(metadata, keys[name])
        if reads_betas is not None and value is not None:
            scaling[name], origins[name] = value, keys[name]
            continue
        scaling[name], origins[name] = default, NO_KEY
        if value is not None and not math.isclose(value, default, rel_tol=1e-6):
            ignored[name] = (keys[name], value, default)
    scaling["truncate"], origins["truncate"] = LLAMA_CPP_YARN_TRUNCATES, NO_KEY  # ggml_rope_yarn_corr_dims
    log_mul = _number(metadata, keys["mscale_all_dim"])
    mscale_all_dim, mscale = 0.0, 1.0
    if log_mul is not None:
        tenths = arch in LOG_MUL_TENTHS_ARCHS
        mscale_all_dim = float(np.float32(log_mul / np.float32(0.1))) if tenths else log_mul
        mscale = mscale_all_dim if tenths and mscale_all_dim != 1 else 1.0
        scaling["mscale_all_dim"], origins["mscale_all_dim"] = mscale_all_dim, keys["mscale_all_dim"]
        scaling["mscale"], origins["mscale"] = mscale, keys["mscale_all_dim"]
    yarn_attn_key = Keys.Rope.SCALING_YARN_ATTN_FACTOR.format(arch=arch)
    runs = yarn_attention_factor(float(scaling["factor"]), mscale, mscale_all_dim, attn_factor or 1.0)
    if attn_factor is not None and attn_factor != 1:
        scaling["attention_factor"], origins["attention_factor"] = runs, keys["attention_factor"]
    written = _number(metadata, yarn_attn_key)
    if written is not None and not math.isclose(written, runs, rel_tol=1e-6):
        ignored["attention_factor"] = (yarn_attn_key, written, runs)


def _llama3_params(
    values: Sequence[float],
    metadata: Mapping[str, Any],
    keys: Mapping[str, str],
    config: Mapping[str, Any],
    notes: list[ConfigWarning],
) -> dict[str, Any] | None:
    """The llama3 params that reproduce the per-pair factors (``gguf_llama_cpp.fit_llama3``), or None with a note
    when no llama3 setting does: original is the GGUF's original context length if it has one, else 8192 (the
    converter's own assumption)."""
    original = _number(metadata, keys["original_max_position_embeddings"], integer=True) or LLAMA3_ORIGINAL_CONTEXT
    if all(math.isclose(float(v), 1.0, rel_tol=1e-6) for v in values):
        return None
    fitted = fit_llama3(values, float(config.get("rope_theta", LLAMA_CPP_THETA)), original)
    if fitted is None:
        notes.append(
            ConfigWarning(
                "gguf_rope_freqs_not_llama3",
                f"rope_freqs.weight holds {len(values)} per-pair factors that no llama3 setting reproduces (factor "
                f"{max(values):g}, original context {original}); llama.cpp divides each pair's frequency by its "
                "factor, which posenc does not resolve: the table shows plain RoPE.",
                [],
                {"rope_freqs": [float(v) for v in values[:16]], "values": len(values)},
            )
        )
    return fitted


def compare_with_config(
    metadata: Mapping[str, Any], tensors: Mapping[str, Sequence[float]] | None, config: Mapping[str, Any]
) -> list[ConfigWarning]:
    """Every rope field of ``config`` the GGUF dropped, renamed, changed or holds where llama.cpp does not read
    it, and the layers whose rotations differ (``posenc.real_models.gguf_compare.compare``)."""
    from posenc.real_models.gguf_compare import compare  # that module maps the file with this one

    return compare(metadata, tensors, config)
