"""What each model type's own code does with its config: one record per Hugging Face ``model_type``.

A config.json leaves keys out, and the model type's config class in transformers fills them in (its class
defaults), and its rotary and attention code reads some keys and ignores others. The resolver
(``posenc.real_models.configs``) asks one record for all of it: the defaults, the per-layer-type rope dicts, the
pairing, which partial-rotation keys the rotary code ignores, the NoPE layers, the attention extras, the class's
M-RoPE sections, and the architecture name llama.cpp gives the model (``gguf_arch``). An unknown model type gets
the generic record (nothing filled, nothing ignored, half pairing): what a reader of config.json alone assumes.

The facts are transformers 5.23's (``models/<x>/configuration_<x>.py`` and ``modeling_<x>.py``, cited per record)
and llama.cpp's (``convert_hf_to_gguf.py``: the ``model_arch`` each converter class registers, its name from
gguf-py's ``MODEL_ARCH_NAMES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class LayerTypeRope:
    """How a model type's transformers config class fills its one rope dict per layer type
    (``convert_rope_params_to_dict`` in configuration_gemma3.py / configuration_olmo3.py, transformers 5): a v4
    rope_scaling goes to the full layers; a dict without rope_theta gets, for the full layers, the top-level
    rope_theta (else ``full_theta``) and for the sliding layers ``sliding_theta_key``'s value (else
    ``sliding_theta``); a flat v5 rope_parameters (not keyed by layer type) is not read at all."""

    full_theta: float
    sliding_theta: float
    sliding_theta_key: str | None  # None: the class reads the top-level rope_theta once, for the full layers


def _frozen(values: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(values or {}))


@dataclass(frozen=True)
class ModelTypeRecord:
    """One model type as its transformers code runs it (``model_type`` is the text model's)."""

    model_type: str
    config_class: str | None = None  # the transformers config class (text part) the facts are read from
    gguf_arch: str | None = None  # llama.cpp's architecture name (None: llama.cpp does not convert it)
    aliases: tuple[str, ...] = ()  # other model_type spellings that run this code (a multimodal wrapper's)
    # keys the class fills in where config.json leaves them out (its class defaults), in config.json's spelling
    defaults: Mapping[str, Any] = field(default_factory=_frozen)
    # the class keys its rope dicts by layer type and fills them so (Gemma 3, Olmo 3)
    layer_type_rope: LayerTypeRope | None = None
    interleaved: bool = False  # rotary pairs are adjacent features unless the config says rope_interleave: false
    # keys of the text config the rotary and attention code never read (Qwen2-VL: head_dim is hidden / heads, and
    # partial rotation is ignored for every rope type)
    ignored_keys: frozenset[str] = frozenset()
    # the default rope type's init function ignores partial rotation (Llama's compute_default_rope_parameters and
    # its copies), where the scaled rope types' init functions narrow the frequencies and no longer fit the head
    default_rope_whole_head: bool = False
    sliding_unscaled: bool = False  # sliding-window layers are trained unscaled with their own θ
    nope_mla: bool = False  # the MLA layers are trained without position (no rotary embedding in the model code)
    attention_sinks: bool = False  # a learned logit per head joins the softmax denominator (gpt-oss's sinks)
    regimes: bool = False  # rope parameters keyed by regime (main / compress), not by layer type (DeepSeek-V4)
    unit_softmax: bool = False  # the attention multiplies the logits by 1 (q and k RMS-normalised per head)
    indexer_interleaved: bool = False  # the sparse-attention indexer rotates interleaved pairs
    proportional_global: bool = False  # the global layers' partial_rotary_factor is proportional RoPE's
    # the rotary class's M-RoPE sections where the rope dict gives none, and whether its code interleaves them
    mrope_section: tuple[int, int, int] | None = None
    mrope_interleaved: bool = False
    # the attention reads no_rope_layers / no_rope_layer_interval (Llama 4, SmolLM3: ``use_rope`` per layer)
    reads_no_rope_layers: bool = False
    # the class builds layer_types when the config gives none: a rope dict keyed by those layer types is read per
    # layer type (``nested_rope_parameter_keys`` in modeling_rope_utils.py); a class that builds none reads every
    # rope dict flat unless the config itself lists layer_types
    declares_layer_types: bool = False
    # the rotary embedding keeps one set of frequencies per layer type and reads rope_parameters[layer_type]
    # (Gemma 3, Gemma 4, Olmo 3): a flat rope dict fails there unless the class rewrites it (layer_type_rope)
    rope_per_layer_type: bool = False
    # the class's own layer pattern when the config gives no layer_types: every n-th layer full attention, the
    # others sliding, and the last layer forced to full attention (Gemma 4)
    sliding_pattern: int | None = None
    last_layer_full: bool = False
    # MLA: the default rope type's frequencies span head_dim (qk_nope + qk_rope), not the rope part, so the
    # attention cannot apply them (Mistral 4: its partial_rotary_factor narrows only the scaled rope types)
    default_rope_spans_head: bool = False
    # the rope types the config class accepts (None: every one transformers knows); Phi3Config.validate_rope
    # refuses any but default and longrope
    rope_types: tuple[str, ...] | None = None
    # older rope-type spellings the config class renames before transformers reads them (Phi3Config: "su";
    # Qwen2VLTextConfig / Qwen2_5_VLTextConfig: "mrope"); any other spelling outside TRANSFORMERS_ROPE_TYPES is
    # vLLM's, which transformers cannot load
    renamed_rope_types: tuple[str, ...] = ()
    # the class's max_position_embeddings, what a rope type that needs a length reads where config.json gives none
    max_position_embeddings: int | None = None

    @property
    def known(self) -> bool:
        """Whether the record holds a model type's facts (not the generic record's assumptions)."""
        return self.config_class is not None

    @property
    def reads_mrope_section(self) -> bool:
        """Whether a rope dict's mrope_section is read: by the M-RoPE models' rotary classes, and by a generic
        reader (vLLM runs M-RoPE wherever a rope dict has sections)."""
        return self.mrope_section is not None or not self.known

    @property
    def partial_rotary_ignored(self) -> bool | None:
        """None: the rotary code reads partial rotation; False: only the default rope type ignores it; True: every
        rope type ignores it."""
        if "partial_rotary_factor" in self.ignored_keys:
            return True
        return False if self.default_rope_whole_head else None


# the rope types transformers' rope code knows (modeling_rope_utils: "default" and ROPE_INIT_FUNCTIONS' keys)
TRANSFORMERS_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")

GENERIC = ModelTypeRecord(model_type="", reads_no_rope_layers=True)

# One record per model type. Each comment names the transformers file and class the facts come from; "default
# rope reads no partial" is the rotary class's compute_default_rope_parameters (dim = head_dim), where the scaled
# rope types' init functions in modeling_rope_utils.py read partial_rotary_factor.
_MLA = {"qk_rope_head_dim": 64, "qk_nope_head_dim": 128}
_YARN_MISTRAL = {"beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1}
RECORDS: tuple[ModelTypeRecord, ...] = (
    # models/llama: LlamaConfig (θ 1e4); default rope reads no partial
    ModelTypeRecord("llama", "LlamaConfig", "llama", default_rope_whole_head=True),
    # models/mistral: MistralConfig; llama.cpp converts MistralForCausalLM with LlamaModel ("llama")
    # (Mistral3Config's text_config is a MistralConfig unless it names its own model_type, e.g. ministral3)
    ModelTypeRecord("mistral", "MistralConfig", "llama", aliases=("mistral3",), default_rope_whole_head=True),
    # models/llama4: Llama4TextConfig (default_theta 5e5, no_rope_layer_interval 4: no_rope_layers absent means
    # every 4th layer NoPE; attention_chunk_size 8192; layer_types chunked where RoPE); Llama4TextAttention reads
    # use_rope = no_rope_layers[layer_idx]; Llama4TextRotaryEmbedding rotates complex (adjacent) pairs
    ModelTypeRecord(
        "llama4_text", "Llama4TextConfig", "llama4", aliases=("llama4",),
        defaults=_frozen({"rope_theta": 500_000.0, "no_rope_layer_interval": 4, "attention_chunk_size": 8192}),
        interleaved=True, default_rope_whole_head=True, reads_no_rope_layers=True, declares_layer_types=True,
    ),
    # models/ministral3: Ministral3Config.__post_init__ (no rope dict: YaRN factor 16 from 16384 at θ 1e6, with
    # llama_4_scaling_beta 0.1); llama.cpp: "mistral3"
    ModelTypeRecord(
        "ministral3", "Ministral3Config", "mistral3",
        defaults=_frozen({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1_000_000.0, "factor": 16.0,
                                              "original_max_position_embeddings": 16384, **_YARN_MISTRAL}}),
        default_rope_whole_head=True,
    ),
    # models/mistral4: Mistral4Config.__post_init__ (MLA, rope_interleave true; no rope dict: YaRN factor 128 from
    # 8192 at θ 1e4; its partial_rotary_factor is qk_rope / head_dim, the MLA rope part)
    ModelTypeRecord(
        "mistral4", "Mistral4Config", "mistral4",
        defaults=_frozen({"rope_parameters": {"rope_type": "yarn", "rope_theta": 10_000.0, "factor": 128.0,
                                              "original_max_position_embeddings": 8192, **_YARN_MISTRAL}}),
        interleaved=True, default_rope_spans_head=True,
    ),
    # models/qwen2, qwen3, qwen2_moe, qwen3_moe: θ 1e4; default rope reads no partial
    ModelTypeRecord("qwen2", "Qwen2Config", "qwen2", default_rope_whole_head=True, declares_layer_types=True),
    ModelTypeRecord("qwen3", "Qwen3Config", "qwen3", default_rope_whole_head=True, declares_layer_types=True),
    ModelTypeRecord(
        "qwen2_moe", "Qwen2MoeConfig", "qwen2moe", default_rope_whole_head=True, declares_layer_types=True
    ),
    ModelTypeRecord("qwen3_moe", "Qwen3MoeConfig", "qwen3moe", default_rope_whole_head=True),
    # models/qwen3_next: Qwen3NextConfig (partial_rotary_factor 0.25, full_attention_interval 4, head_dim 256)
    ModelTypeRecord(
        "qwen3_next", "Qwen3NextConfig", "qwen3next",
        defaults=_frozen({"partial_rotary_factor": 0.25, "full_attention_interval": 4, "head_dim": 256}),
        declares_layer_types=True,
    ),
    # models/qwen2_vl: Qwen2VLTextConfig (default_theta 1e6); Qwen2VLRotaryEmbedding: mrope_section defaults to
    # [16, 24, 24] whatever the rope type; the text config takes no head_dim (the attention's is hidden_size /
    # num_attention_heads) and no partial_rotary_factor (the rotary turns the whole head for every rope type)
    ModelTypeRecord(
        "qwen2_vl", "Qwen2VLTextConfig", "qwen2vl", aliases=("qwen2_vl_text",),
        defaults=_frozen({"rope_theta": 1_000_000.0}),
        ignored_keys=frozenset({"head_dim", "partial_rotary_factor"}), mrope_section=(16, 24, 24),
        declares_layer_types=True, renamed_rope_types=("mrope",),
    ),
    # models/qwen2_5_vl: Qwen2_5_VLTextConfig, Qwen2_5_VLRotaryEmbedding: as Qwen2-VL
    ModelTypeRecord(
        "qwen2_5_vl", "Qwen2_5_VLTextConfig", "qwen2vl", aliases=("qwen2_5_vl_text",),
        defaults=_frozen({"rope_theta": 1_000_000.0}),
        ignored_keys=frozenset({"head_dim", "partial_rotary_factor"}), mrope_section=(16, 24, 24),
        declares_layer_types=True, renamed_rope_types=("mrope",),
    ),
    # models/qwen3_vl: Qwen3VLTextConfig (default_theta 5e5); Qwen3VLTextRotaryEmbedding: mrope_section defaults to
    # [24, 20, 20], always interleaved (recomposition_frequencies); default rope reads no partial
    ModelTypeRecord(
        "qwen3_vl_text", "Qwen3VLTextConfig", "qwen3vl", aliases=("qwen3_vl",),
        defaults=_frozen({"rope_theta": 500_000.0}), default_rope_whole_head=True,
        mrope_section=(24, 20, 20), mrope_interleaved=True,
    ),
    # models/gemma, models/gemma2: GemmaConfig / Gemma2Config (head_dim 256; Gemma 2: every 2nd layer full)
    ModelTypeRecord(
        "gemma", "GemmaConfig", "gemma", defaults=_frozen({"head_dim": 256}), default_rope_whole_head=True
    ),
    ModelTypeRecord(
        "gemma2", "Gemma2Config", "gemma2", defaults=_frozen({"head_dim": 256}), default_rope_whole_head=True,
        declares_layer_types=True, sliding_pattern=2,
    ),
    # models/gemma3: Gemma3TextConfig (head_dim 256, default_theta {"global": 1e6, "local": 1e4},
    # rope_local_base_freq: the sliding layers' θ; sliding_window_pattern 6); Gemma3RotaryEmbedding per layer type
    ModelTypeRecord(
        "gemma3_text", "Gemma3TextConfig", "gemma3", aliases=("gemma3",),
        defaults=_frozen({"head_dim": 256, "rope_theta": 1_000_000.0}),
        layer_type_rope=LayerTypeRope(1_000_000.0, 10_000.0, "rope_local_base_freq"),
        default_rope_whole_head=True, sliding_unscaled=True, declares_layer_types=True, rope_per_layer_type=True,
        sliding_pattern=6,
    ),
    # models/gemma4: Gemma4TextConfig.__post_init__ (head_dim 256, global_head_dim 512, rope_parameters per layer
    # type when none is given: sliding default at 1e4, full proportional with partial_rotary_factor 0.25 at 1e6;
    # every 6th layer full, the last forced full); Gemma4TextRotaryEmbedding reads rope_parameters[layer_type] and
    # its default rope reads no partial; Gemma4TextAttention: scaling 1.0 (q_norm, k_norm)
    ModelTypeRecord(
        "gemma4_text", "Gemma4TextConfig", "gemma4", aliases=("gemma4",),
        defaults=_frozen({
            "head_dim": 256,
            "global_head_dim": 512,
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                   "rope_theta": 1_000_000.0},
            },
        }),
        default_rope_whole_head=True, sliding_unscaled=True, unit_softmax=True, proportional_global=True,
        declares_layer_types=True, rope_per_layer_type=True, sliding_pattern=6, last_layer_full=True,
    ),
    # models/olmo, olmo2: OlmoConfig / Olmo2Config (θ 1e4, one rope dict); llama.cpp's "olmo2" converts Olmo 2 and 3
    ModelTypeRecord("olmo", "OlmoConfig", "olmo", default_rope_whole_head=True),
    ModelTypeRecord("olmo2", "Olmo2Config", "olmo2", default_rope_whole_head=True),
    # models/olmo3: Olmo3Config (default_theta 5e5 for both layer types; every 4th layer full)
    ModelTypeRecord(
        "olmo3", "Olmo3Config", "olmo2", defaults=_frozen({"rope_theta": 500_000.0}),
        layer_type_rope=LayerTypeRope(500_000.0, 500_000.0, None), default_rope_whole_head=True,
        sliding_unscaled=True, declares_layer_types=True, rope_per_layer_type=True, sliding_pattern=4,
    ),
    # models/smollm3: SmolLM3Config (default_theta 2e6, no_rope_layer_interval 4); SmolLM3Attention reads use_rope
    ModelTypeRecord(
        "smollm3", "SmolLM3Config", "smollm3",
        defaults=_frozen({"rope_theta": 2_000_000.0, "no_rope_layer_interval": 4}), default_rope_whole_head=True,
        reads_no_rope_layers=True, declares_layer_types=True,
    ),
    # models/cohere (default_theta 5e5; llama.cpp "command-r"), granite, starcoder2, phimoe (1e6), ernie4_5 (5e5),
    # seed_oss, bitnet (5e5): default rope reads no partial
    ModelTypeRecord(
        "cohere", "CohereConfig", "command-r", defaults=_frozen({"rope_theta": 500_000.0}),
        default_rope_whole_head=True,
    ),
    ModelTypeRecord("granite", "GraniteConfig", "granite", default_rope_whole_head=True),
    ModelTypeRecord("starcoder2", "Starcoder2Config", "starcoder2", default_rope_whole_head=True),
    ModelTypeRecord(
        "phimoe", "PhimoeConfig", "phimoe", defaults=_frozen({"rope_theta": 1_000_000.0}),
        default_rope_whole_head=True,
    ),
    ModelTypeRecord(
        "ernie4_5", "Ernie4_5Config", "ernie4_5", defaults=_frozen({"rope_theta": 500_000.0}),
        default_rope_whole_head=True,
    ),
    ModelTypeRecord("seed_oss", "SeedOssConfig", "seed_oss", default_rope_whole_head=True),
    ModelTypeRecord(
        "bitnet", "BitNetConfig", "bitnet", defaults=_frozen({"rope_theta": 500_000.0}),
        default_rope_whole_head=True,
    ),
    # models/glm, glm4, glm4_moe: partial_rotary_factor 0.5
    ModelTypeRecord("glm", "GlmConfig", "chatglm", defaults=_frozen({"partial_rotary_factor": 0.5})),
    ModelTypeRecord("glm4", "Glm4Config", "glm4", defaults=_frozen({"partial_rotary_factor": 0.5})),
    ModelTypeRecord("glm4_moe", "Glm4MoeConfig", "glm4moe", defaults=_frozen({"partial_rotary_factor": 0.5})),
    # models/phi: PhiConfig (0.5); models/phi3: Phi3Config; persimmon (0.5), stablelm (0.25), nemotron (0.5)
    ModelTypeRecord("phi", "PhiConfig", "phi2", defaults=_frozen({"partial_rotary_factor": 0.5})),
    ModelTypeRecord("phi3", "Phi3Config", "phi3", rope_types=("default", "longrope"), renamed_rope_types=("su",)),
    ModelTypeRecord("persimmon", "PersimmonConfig", None, defaults=_frozen({"partial_rotary_factor": 0.5})),
    ModelTypeRecord("stablelm", "StableLmConfig", "stablelm", defaults=_frozen({"partial_rotary_factor": 0.25})),
    ModelTypeRecord("nemotron", "NemotronConfig", "nemotron", defaults=_frozen({"partial_rotary_factor": 0.5})),
    # models/gpt_oss: GptOssConfig (head_dim 64, default_theta 1.5e5, its YaRN; every 2nd layer full); default rope
    # reads no partial; GptOssAttention.sinks
    ModelTypeRecord(
        "gpt_oss", "GptOssConfig", "gpt-oss",
        defaults=_frozen({
            "head_dim": 64,
            "rope_theta": 150_000.0,
            "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                             "truncate": False, "original_max_position_embeddings": 4096},
        }),
        default_rope_whole_head=True, attention_sinks=True, declares_layer_types=True, sliding_pattern=2,
    ),
    # models/deepseek_v3, deepseek_v2, deepseek_v32, glm_moe_dsa: MLA, head_dim = qk_rope_head_dim, rope_interleave
    # true; their compute_default_rope_parameters reads no partial rotation, the scaled init functions do.
    # Kimi K2's config.json says kimi_k2 for DeepSeek-V3's code (Kimi_K25Config reads its text_config so).
    # (class defaults: qk_rope_head_dim 64, qk_nope_head_dim 128 (GLM-5: 192); the sparse indexer's
    # index_head_dim 128)
    ModelTypeRecord(
        "deepseek_v3", "DeepseekV3Config", "deepseek2", aliases=("kimi_k2", "kimi_k25"),
        defaults=_frozen(_MLA), interleaved=True, default_rope_whole_head=True,
    ),
    ModelTypeRecord(
        "deepseek_v2", "DeepseekV2Config", "deepseek2", defaults=_frozen(_MLA), interleaved=True,
        default_rope_whole_head=True,
    ),
    ModelTypeRecord(
        "deepseek_v32", "DeepseekV32Config", None, defaults=_frozen({**_MLA, "index_head_dim": 128}),
        interleaved=True, default_rope_whole_head=True, declares_layer_types=True,
    ),
    # models/glm_moe_dsa: GlmMoeDsaIndexer rotates interleaved pairs (DeepSeek-V3.2's in halves)
    ModelTypeRecord(
        "glm_moe_dsa", "GlmMoeDsaConfig", "glm-dsa",
        defaults=_frozen({**_MLA, "qk_nope_head_dim": 192, "index_head_dim": 128}), interleaved=True,
        default_rope_whole_head=True, indexer_interleaved=True, declares_layer_types=True,
    ),
    # models/deepseek_v4: DeepseekV4Config (rope per regime), DeepseekV4Attention.sinks
    ModelTypeRecord(
        "deepseek_v4", "DeepseekV4Config", None, attention_sinks=True, regimes=True, declares_layer_types=True
    ),
    # models/kimi_linear: KimiLinearConfig; its MLA attention has no rotary embedding
    ModelTypeRecord("kimi_linear", "KimiLinearConfig", "kimi-linear", nope_mla=True, declares_layer_types=True),
)  # fmt: skip

# each class's max_position_embeddings (its dataclass default), by model type
_MAX_POSITIONS = {
    "llama": 2048, "mistral": 131072, "llama4_text": 131072, "ministral3": 262144, "mistral4": 1048576,
    "qwen2": 32768, "qwen3": 32768, "qwen2_moe": 32768, "qwen3_moe": 32768, "qwen3_next": 32768,
    "qwen2_vl": 32768, "qwen2_5_vl": 32768, "qwen3_vl_text": 128000, "gemma": 8192, "gemma2": 8192,
    "gemma3_text": 131072, "gemma4_text": 131072, "olmo": 2048, "olmo2": 2048, "olmo3": 2048, "smollm3": 32768,
    "cohere": 8192, "granite": 2048, "starcoder2": 4096, "phimoe": 131072, "ernie4_5": 131072, "seed_oss": 524288,
    "bitnet": 2048, "glm": 131072, "glm4": 131072, "glm4_moe": 131072, "phi": 2048, "phi3": 4096,
    "persimmon": 16384, "stablelm": 4096, "nemotron": 4096, "gpt_oss": 131072, "deepseek_v3": 4096,
    "deepseek_v2": 2048, "deepseek_v32": 163840, "glm_moe_dsa": 202752, "deepseek_v4": 1048576,
    "kimi_linear": 1048576,
}  # fmt: skip
RECORDS = tuple(replace(record, max_position_embeddings=_MAX_POSITIONS.get(record.model_type)) for record in RECORDS)

_BY_NAME: dict[str, ModelTypeRecord] = {}
for _record in RECORDS:
    for _name in (_record.model_type, *_record.aliases):
        if _name in _BY_NAME:
            raise ValueError(f"model type {_name!r} has two records")
        _BY_NAME[_name] = _record


def model_type_record(model_type: str | None) -> ModelTypeRecord:
    """The record of ``model_type`` (an alias gives its record); an unknown or missing one the generic record,
    named after what was asked."""
    if model_type is None:
        return GENERIC
    record = _BY_NAME.get(model_type)
    return record if record is not None else replace(GENERIC, model_type=model_type)


def known_model_types() -> list[str]:
    """Every model_type spelling with a record of its own (aliases included), sorted."""
    return sorted(_BY_NAME)


# ------------------------------------------------------------------------- views by fact, derived from the records
# (the names other modules import; each keyed by every spelling, aliases included)
def _spellings(record: ModelTypeRecord) -> tuple[str, ...]:
    return (record.model_type, *record.aliases)


def _where(fact: str) -> frozenset[str]:
    return frozenset(name for record in RECORDS if getattr(record, fact) for name in _spellings(record))


INTERLEAVED_MODEL_TYPES = _where("interleaved")
SLIDING_UNSCALED_MODEL_TYPES = _where("sliding_unscaled")
NOPE_MLA_MODEL_TYPES = _where("nope_mla")
ATTENTION_SINK_MODEL_TYPES = _where("attention_sinks")
REGIME_MODEL_TYPES = _where("regimes")
UNIT_SOFTMAX_MODEL_TYPES = _where("unit_softmax")
INDEXER_INTERLEAVED_MODEL_TYPES = _where("indexer_interleaved")
PROPORTIONAL_MODEL_TYPES = _where("proportional_global")
# model type -> whether its rotary code ignores partial rotation for every rope type (True) or for the default
# rope type only (False); absent: it reads partial rotation
WHOLE_HEAD_MODEL_TYPES: dict[str, bool] = {
    name: ignored
    for record in RECORDS
    if (ignored := record.partial_rotary_ignored) is not None
    for name in _spellings(record)
}
LAYER_TYPE_ROPE_MODEL_TYPES: dict[str, LayerTypeRope] = {
    name: record.layer_type_rope
    for record in RECORDS
    if record.layer_type_rope is not None
    for name in _spellings(record)
}
# the class defaults, by the record's own model type (the text config's)
MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    record.model_type: dict(record.defaults) for record in RECORDS if record.defaults
}
# model type -> llama.cpp's architecture name, and back (the first record of an architecture wins the way back)
GGUF_ARCHS: dict[str, str] = {
    name: record.gguf_arch for record in RECORDS if record.gguf_arch is not None for name in _spellings(record)
}
ARCH_MODEL_TYPES: dict[str, str] = {}
for _record in RECORDS:
    if _record.gguf_arch is not None:
        ARCH_MODEL_TYPES.setdefault(_record.gguf_arch, _record.model_type)
