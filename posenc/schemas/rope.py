"""RoPE diagnostics: ``/v1/rope/*`` requests and answers (position ids, config conversion; the probes of
``posenc.real_models.diagnostics``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posenc.schemas.compute import ConfigOrPreset

MAX_SEGMENT_TOKENS = 1 << 20
# A video's seconds per temporal grid step: Qwen2.5-VL's temporal_patch_size / fps, 1-2 s for videos sampled at 1-2
# fps; an hour is far above any sampling and keeps frame · tokens_per_second · seconds_per_grid a finite number.
MAX_SECONDS_PER_GRID = 3600.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SegmentIn(_Strict):
    kind: Literal["text", "image", "video"]
    length: int = Field(default=0, ge=0, le=MAX_SEGMENT_TOKENS, description="text: its tokens")
    grid: list[int] | None = Field(
        default=None, min_length=3, max_length=3, description="image / video: (T, H, W) patches before the merge"
    )
    seconds_per_grid: float = Field(
        default=1.0,
        gt=0,
        le=MAX_SECONDS_PER_GRID,
        description="video: seconds per temporal grid step (at most an hour); the ids it makes must stay below 2^26",
    )

    @model_validator(mode="after")
    def _sizes(self) -> SegmentIn:
        if self.grid is not None and any(not 1 <= size <= 4096 for size in self.grid):
            raise ValueError("grid sizes must be between 1 and 4096")
        return self


class PositionIdsRequest(_Strict):
    segments: list[SegmentIn] = Field(min_length=1, max_length=4096)
    rule: Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"] = "qwen2_5_vl"
    spatial_merge_size: int = Field(default=2, ge=1, le=64)
    tokens_per_second: float = Field(default=2.0, gt=0, le=1000, description="Qwen2.5-VL's vision_config value")
    advance: Literal["max_hw", "max_id"] = Field(
        default="max_hw",
        description="the position after a grid: start + max(H, W)/m (transformers 5.x) or one past its largest id",
    )


class PositionIdsResponse(BaseModel):
    ids: list[list[int]] = Field(description="(3, N): temporal, height and width ids")
    next_position: int
    warnings: list[str]


class ConvertRequest(_Strict):
    config: ConfigOrPreset
    to: Literal["v4", "v5"] = Field(description="Hugging Face v4 (rope_scaling) or v5 (rope_parameters)")


class ConvertResponse(BaseModel):
    config: dict[str, Any]


# ------------------------------------------------------------------------------------------- diagnostics
MAX_COMPARE_POSITION = 1 << 20  # a scan of every position; max_request_work decides how far at a rotary_dim
MAX_DECODE_TOKENS = 8192  # decode costs O(steps · length · d) once a scaling changes with the length
MAX_TRAIN_LENGTH = 1 << 26


class SetupIn(_Strict):
    """One layer's rotation: a method with params, rotary_dim and pairing; or a model config and a layer."""

    method: str | None = Field(default=None, description="a registered rotary method")
    params: dict[str, Any] = Field(default_factory=dict, description="the method's params")
    rotary_dim: int = Field(default=128, ge=2, le=8192, description="rotated features per head; even")
    pairing: Literal["half", "interleaved"] | None = Field(
        default=None, description="half or interleaved; default the method's own (GET /v1/methods: pairings)"
    )
    config: ConfigOrPreset | None = Field(default=None, description="a model's config.json or a preset's name")
    layer: int | None = Field(default=None, ge=0, le=1023)

    @model_validator(mode="after")
    def _method_or_config(self) -> SetupIn:
        if (self.method is None) == (self.config is None):
            raise ValueError("give exactly one of 'method' (with params, rotary_dim, pairing) or 'config' (with layer)")
        if self.config is not None and self.layer is None:
            raise ValueError("'config' needs 'layer'")
        return self


class FrequenciesRequest(_Strict):
    setup: SetupIn
    train_length: int = Field(ge=1, le=MAX_TRAIN_LENGTH, description="the training context the pairs are read at")


class PrecisionRequest(_Strict):
    setup: SetupIn
    dtype: Literal["float32", "bfloat16", "float16", "float64"] = "bfloat16"
    positions_bands: list[list[int]] | None = Field(
        default=None, max_length=16, description="[start, stop) bands; default [0,1k), [1k,8k), [8k,64k), [64k,1M)"
    )
    positions_per_band: int = Field(default=256, ge=2, le=1024)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)


class CompareRequest(_Strict):
    setup_a: SetupIn
    setup_b: SetupIn
    max_position: int = Field(ge=0, le=MAX_COMPARE_POSITION)
    tolerance_angle: float = Field(default=1e-3, ge=0)
    tolerance_logit: float = Field(default=1e-3, ge=0)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)


class DecodeRequest(_Strict):
    setup: SetupIn
    prefill: int = Field(ge=1, le=MAX_DECODE_TOKENS)
    steps: int = Field(ge=1, le=MAX_DECODE_TOKENS)
    tolerance: float = Field(default=1e-9, ge=0)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)

    @model_validator(mode="after")
    def _bounded(self) -> DecodeRequest:
        if self.prefill + self.steps > MAX_DECODE_TOKENS:
            raise ValueError(f"prefill + steps must be at most {MAX_DECODE_TOKENS}")
        return self


class PermutationRequest(_Strict):
    head_dim: int = Field(ge=2, le=8192)
    to: Literal["half", "interleaved"] = Field(description="half: Meta/interleaved rows -> Hugging Face")
    rotary_dim: int | None = Field(default=None, ge=2, le=8192)


class PermutationResponse(BaseModel):
    order: list[int] = Field(description="within each head: new row r = old row order[r]")


class TemperatureRequest(_Strict):
    config: ConfigOrPreset = Field(description="a model's config.json or a preset's name")
    layer: int = Field(ge=0, le=1023)
    length: int = Field(ge=1, le=1 << 20, description="positions offset ... offset + length - 1")
    offset: int = Field(default=0, ge=0, le=1 << 40, description="the first position (tokens already cached)")


class TemperatureResponse(BaseModel):
    applies: bool = Field(
        description="whether the layer scales its queries (Llama 4: the NoPE layers; Mistral 3: the RoPE layers)"
    )
    temperature: list[float] = Field(description="per position: the factor on q (1 where it does not apply)")
    formula: str | None


# ------------------------------------------------------------------------------------------- serving simulator
MAX_SERVE_TOKENS = 4096  # tokens of one layout (the sequence, a batch row, the packed stream); costed below that


class ServeSetupIn(SetupIn):
    """A layer's use of positions: a method (rotary, or a bias method such as ALiBi) with params, rotary_dim (q and
    k features per head, rotated or not) and pairing; or a model config and a layer (a NoPE layer included)."""

    method: str | None = Field(default=None, description="a registered rotary or bias method")


class ServeCheckRequest(_Strict):
    setup: ServeSetupIn
    heads: int = Field(default=4, ge=1, le=64, description="attention heads (bias methods give each its slope)")
    length: int = Field(default=64, ge=2, le=MAX_SERVE_TOKENS, description="tokens of the prefill / decode sequence")
    chunk_sizes: list[int] | None = Field(
        default=None,
        min_length=1,
        max_length=8,
        description="chunked prefill's chunk sizes, each 1 ... length; default [length/4]",
    )
    prefill: int | None = Field(
        default=None, ge=1, le=MAX_SERVE_TOKENS, description="tokens before token-by-token decode; default length/2"
    )
    batch_lengths: list[int] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description=f"a left-padded batch's row lengths, each 1 ... {MAX_SERVE_TOKENS}; default [length, length/2]",
    )
    documents: list[int] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description=f"packed documents' lengths, {MAX_SERVE_TOKENS} tokens in all; default two of length/2",
    )
    sinks: int = Field(default=4, ge=0, le=MAX_SERVE_TOKENS, description="the eviction cache's sink tokens")
    window: int | None = Field(
        default=None, ge=1, le=MAX_SERVE_TOKENS, description="the eviction cache's recent tokens; default length/4"
    )
    requests: list[int] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description=f"requests a transformers model serves one after another (a forward each), each 1 ... "
        f"{MAX_SERVE_TOKENS} tokens: its dynamic rotary state carries across them and into the transformers_* "
        "variants of the prefill / decode sequence; default [length, length/2]",
    )
    tolerance: float = Field(default=1e-9, ge=0, description="a logit error above it is wrong")
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
