"""RoPE diagnostics: ``/v1/rope/*`` requests and answers (position ids, config conversion; the probes of
``posenc.rope_diagnostics``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_SEGMENT_TOKENS = 1 << 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SegmentIn(_Strict):
    kind: Literal["text", "image", "video"]
    length: int = Field(default=0, ge=0, le=MAX_SEGMENT_TOKENS, description="text: its tokens")
    grid: list[int] | None = Field(
        default=None, min_length=3, max_length=3, description="image / video: (T, H, W) patches before the merge"
    )
    seconds_per_grid: float = Field(default=1.0, gt=0, description="video: seconds per temporal grid step")

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
    config: dict[str, Any]
    to: Literal["v4", "v5"] = Field(description="Hugging Face v4 (rope_scaling) or v5 (rope_parameters)")


class ConvertResponse(BaseModel):
    config: dict[str, Any]
