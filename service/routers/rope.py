"""RoPE diagnostics: plain ``def`` routes (CPU-bound, run in the threadpool), the same transport and error rules
as the compute routes; the math is in ``posenc``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from posenc.errors import located
from posenc.model_configs import convert_config
from posenc.mrope_positions import Segment, mrope_position_ids
from posenc.schemas.errors import Problem
from posenc.schemas.rope import ConvertRequest, ConvertResponse, PositionIdsRequest, PositionIdsResponse

router = APIRouter(prefix="/v1", tags=["rope"])
_PROBLEMS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "missing or invalid X-API-Key"},
    422: {"model": Problem, "description": "invalid request; the error names the field"},
    429: {"model": Problem, "description": "rate limited; see Retry-After"},
}


@router.post("/rope/position_ids", name="position_ids", response_model=PositionIdsResponse, responses=_PROBLEMS)
def position_ids(request: PositionIdsRequest) -> PositionIdsResponse:
    """Qwen-VL M-RoPE (t, h, w) position ids of text, image and video segments, by the model's own rule."""
    segments = [
        Segment(
            kind=segment.kind,
            length=segment.length,
            grid=None if segment.grid is None else (segment.grid[0], segment.grid[1], segment.grid[2]),
            seconds_per_grid=segment.seconds_per_grid,
        )
        for segment in request.segments
    ]
    with located(("body",)):
        result = mrope_position_ids(
            segments,
            rule=request.rule,
            spatial_merge_size=request.spatial_merge_size,
            tokens_per_second=request.tokens_per_second,
            advance=request.advance,
        )
    return PositionIdsResponse(ids=result.ids.tolist(), next_position=result.next_position, warnings=result.warnings)


@router.post("/models/convert", name="convert", response_model=ConvertResponse, responses=_PROBLEMS)
def convert(request: ConvertRequest) -> ConvertResponse:
    """The config in the other Hugging Face dialect (v4 rope_scaling <-> v5 rope_parameters); it resolves to the
    same layers."""
    with located(("body", "config")):
        return ConvertResponse(config=convert_config(request.config, request.to))
