"""Model configs: ``GET /v1/models`` (presets), ``POST /v1/models/resolve`` (a config.json -> per-layer rotary
setup and warnings). The fields mirror ``posenc.real_models.configs.LayerRope`` and ``ConfigWarning``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ResolveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    config: dict[str, Any] | None = Field(
        default=None,
        description="a model's config.json as published: Hugging Face v4 rope_scaling or v5 rope_parameters "
        "(flat or per layer type), text_config nesting, partial_rotary_factor, head_dim, no_rope_layers, sliding "
        "and chunked attention keys, M-RoPE and MLA keys, vLLM's rope type spellings",
    )
    preset: str | None = Field(default=None, description="a preset's name from GET /v1/models, in place of config")

    @model_validator(mode="after")
    def _one_source(self) -> ResolveRequest:
        if (self.config is None) == (self.preset is None):
            raise ValueError("give exactly one of 'config' or 'preset'")
        return self


class ConfigWarningOut(BaseModel):
    code: str = Field(description="the bug pattern, e.g. sliding_layers_scaled, rope_theta_outside_rope_parameters")
    message: str
    layers: list[int] = Field(description="the layers concerned (empty: the whole config)")
    evidence: dict[str, Any] = Field(description="the config values that show it")


class LayerRopeOut(BaseModel):
    layer: int
    layer_type: str = Field(
        description="full_attention, sliding_attention, chunked_attention, indexed_attention (DeepSeek Sparse "
        "Attention), linear_attention (no attention scores, no RoPE), or DeepSeek-V4's compressed_sparse_attention "
        "and heavily_compressed_attention"
    )
    method: str | None = Field(description="a registered rotary method, or null for a NoPE layer")
    params: dict[str, Any] = Field(description="in the method's own parameter names")
    head_dim: int
    rotary_dim: int = Field(description="features rotated per head (0 on NoPE layers)")
    rotary_slice: list[int] = Field(description="[start, stop) of the rotated features in a head")
    pairing: str = Field(description="half (rotate_half) or interleaved")
    attention_scale: float = Field(description="multiplies cos and sin (YaRN / LongRoPE): logits x its square")
    softmax_scale: float = Field(description="the logits' multiplier before the softmax")
    softmax_scale_source: str
    window: int | None = None
    chunk: int | None = None
    query_temperature: dict[str, Any] | None = None
    mrope_section: list[int] | None = None
    shared_key_rope: bool = Field(default=False, description="MLA: one rotated key part shared by all heads")
    compress_rate: int | None = Field(
        default=None,
        description="DeepSeek-V4's compressed layers: compressed key i is rotated at position i x compress_rate",
    )
    notes: list[str] = Field(
        default_factory=list, description="what else about the layer's attention a port must keep (gpt-oss's sinks)"
    )
    indexer: LayerRopeOut | None = Field(
        default=None,
        description="DeepSeek-V3.2 / GLM-5: the sparse-attention indexer's own rotation (its head, slice, pairing)",
    )


class EngineNoteOut(BaseModel):
    code: str = Field(description="the pattern: cos_sin_scale, mla_mscale_softmax, derived_max_length, ...")
    layers: list[int] = Field(description="the layers concerned (empty: the whole config)")
    huggingface: str = Field(description="what Hugging Face computes for this config (checked here)")
    elsewhere: str = Field(description="what the cited public threads show another engine did or does")
    sources: list[str] = Field(description="the threads (GitHub issues and pull requests)")


class ResolvedModel(BaseModel):
    model_type: str | None
    layers: list[LayerRopeOut]
    warnings: list[ConfigWarningOut]
    engine_notes: list[EngineNoteOut] = Field(
        default_factory=list,
        description="where engines are known to compute this config differently: Hugging Face's numbers, and "
        "as cited text what differs elsewhere",
    )


class ModelPreset(BaseModel):
    name: str
    model_type: str | None
    config: dict[str, Any] = Field(description="the rope-relevant fields of the model's published config.json")


class ModelPresetList(BaseModel):
    data: list[ModelPreset]
    count: int


# ------------------------------------------------------------------------------------------------ GGUF
# A GGUF header as it travels: the SDK reads the file locally (header only) and sends what it holds; these bound
# the JSON (a converted model has 30-60 keys; its per-layer arrays and its rope tensors are short).
MAX_GGUF_KEYS = 4096
MAX_GGUF_KEY_CHARS = 256
MAX_GGUF_STRING_CHARS = 4096
MAX_GGUF_ARRAY = 8192  # elements of one array value (per-layer arrays); the vocabulary is never sent
MAX_GGUF_VALUES = 1 << 16  # values in all the arrays together
MAX_GGUF_TENSOR_VALUES = 4096  # a rope tensor: one factor per rotary pair
GGUF_ROPE_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


class GgufRequest(BaseModel):
    """``POST /v1/models/gguf``: a GGUF's header metadata (as the SDK's ``read_gguf`` reads it) resolved per
    layer, and compared with a Hugging Face config of the same model when ``against`` is given."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    metadata: dict[str, Any] = Field(
        max_length=MAX_GGUF_KEYS,
        description="the GGUF's key/value metadata: general.architecture, {arch}.block_count, {arch}.rope.*, "
        "{arch}.attention.*; numbers, strings, booleans and arrays of them (strings up to "
        f"{MAX_GGUF_STRING_CHARS} characters, arrays up to {MAX_GGUF_ARRAY} values, {MAX_GGUF_VALUES} in all)",
    )
    tensors: dict[str, list[float]] = Field(
        default_factory=dict,
        max_length=len(GGUF_ROPE_TENSORS),
        description=f"the GGUF's rope tensors by name ({', '.join(GGUF_ROPE_TENSORS)}): one factor per rotary pair, "
        f"at most {MAX_GGUF_TENSOR_VALUES}",
    )
    against: dict[str, Any] | str | None = Field(
        default=None,
        description="a Hugging Face config.json of the same model (or a preset's name) to compare with: every rope "
        "field the conversion dropped, renamed or changed, and every layer that resolves differently, is a warning",
    )


class GgufResolved(ResolvedModel):
    config: dict[str, Any] = Field(description="the Hugging Face style config the GGUF's metadata maps to")
    against: str | None = Field(description="what the GGUF was compared with: 'config', a preset's name, or null")
