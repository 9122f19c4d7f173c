"""M-RoPE position ids: the (temporal, height, width) ids Qwen-VL models give a sequence of text, image and video
segments (Wang et al. 2024, "Qwen2-VL"; Qwen2.5-VL's absolute time; Qwen3-VL's per-frame timestamps).

Rule (as the models' ``get_rope_index`` computes it, checked against Hugging Face transformers in the tests):

- text: t = h = w = the running position p, p + 1, ... (1D RoPE);
- an image or video grid (T, H, W) of patches, merged by ``spatial_merge_size`` m into (T, H/m, W/m) tokens in
  (t, h, w) C order: h = p + row, w = p + col, t = p + τ(frame) with τ(f) = f (Qwen2-VL, and still images),
  floor(f · tokens_per_second · seconds_per_grid) (Qwen2.5-VL videos); Qwen3-VL splits a video into single
  frames (each (1, H, W), separated in the text by their timestamps) and gives each frame τ = 0;
- after a grid the running position advances by max(H, W)/m (``advance="max_hw"``, transformers 5.x), or to one
  past the largest id the grid used (``advance="max_id"``, the rule of earlier releases and of the Qwen2-VL
  paper). The two differ when a video's temporal ids outrun its spatial ones; ``mrope_position_ids`` reports that
  in its warnings, because text after such a video then starts at another position than the model was trained
  with ("off by a frame").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from posenc.errors import InvalidInput, Loc
from posenc.schemas.compute import MAX_ROTARY_POSITION

# Position ids stay below 2^26, the largest position the rotary routes take (rotary angles n·ω are exact to float32
# rounding up to it), so that every id and the next position can be rotated; a sequence whose ids would pass it is
# refused, naming the segment's field that drives them.
MAX_POSITION_ID = MAX_ROTARY_POSITION

Rule = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]
Advance = Literal["max_hw", "max_id"]


@dataclass(frozen=True)
class Segment:
    """A run of tokens: ``text`` of ``length`` tokens, or an ``image`` / ``video`` of ``grid`` (T, H, W) patches
    before the spatial merge; ``seconds_per_grid``: a video's seconds per temporal grid step (Qwen2.5-VL)."""

    kind: Literal["text", "image", "video"]
    length: int = 0
    grid: tuple[int, int, int] | None = None
    seconds_per_grid: float = 1.0


@dataclass(frozen=True)
class PositionIds:
    ids: torch.Tensor  # (3, N) int64: temporal, height, width
    next_position: int  # where a following text token would start
    warnings: list[str] = field(default_factory=list)


def _vision_ids(start: int, grid: tuple[int, int, int], merge: int, interval: float) -> torch.Tensor:
    frames, rows, cols = grid[0], grid[1] // merge, grid[2] // merge
    temporal = (torch.arange(frames, dtype=torch.float64) * interval).floor().to(torch.int64) + start  # (T,)
    height = torch.arange(rows, dtype=torch.int64) + start  # (H',)
    width = torch.arange(cols, dtype=torch.int64) + start  # (W',)
    t, h, w = torch.meshgrid(temporal, height, width, indexing="ij")  # each (T, H', W')
    return torch.stack((t, h, w)).reshape(3, -1)  # (3, T·H'·W')


def _check(segment: Segment, index: int, merge: int) -> tuple[int, int, int] | None:
    loc = ("segments", index)
    if segment.kind == "text":
        if segment.length < 1:
            raise InvalidInput((*loc, "length"), f"a text segment needs at least one token, got {segment.length}")
        return None
    if segment.grid is None or len(segment.grid) != 3 or min(segment.grid) < 1:
        raise InvalidInput((*loc, "grid"), "an image or video segment needs grid (T, H, W) of positive sizes")
    if segment.grid[1] % merge or segment.grid[2] % merge:
        raise InvalidInput((*loc, "grid"), f"H and W must be multiples of spatial_merge_size {merge}")
    if segment.kind == "image" and segment.grid[0] != 1:
        raise InvalidInput((*loc, "grid"), f"an image has one temporal step (T = 1), got T = {segment.grid[0]}")
    return segment.grid


def _check_bound(end: float, loc: Loc, what: str) -> None:
    """Refuse ids that run to ``end`` (one past the largest) beyond ``MAX_POSITION_ID``, at ``loc``."""
    if not end <= MAX_POSITION_ID:
        raise InvalidInput(
            loc,
            f"{what} would reach position {int(end) - 1 if math.isfinite(end) else end}; position ids must stay "
            f"below {MAX_POSITION_ID} (2^26)",
        )


def mrope_position_ids(
    segments: Sequence[Segment],
    *,
    rule: Rule = "qwen2_5_vl",
    spatial_merge_size: int = 2,
    tokens_per_second: float = 2.0,
    advance: Advance = "max_hw",
) -> PositionIds:
    """The (3, N) M-RoPE position ids of the segments, by the model family's ``rule`` (module docstring). Every
    id is below ``MAX_POSITION_ID`` (the next position at most it): checked before each segment's ids are made,
    errors at ("segments", i, "length"), ("segments", i, "grid") or ("segments", i, "seconds_per_grid")."""
    if spatial_merge_size < 1:
        raise InvalidInput(("spatial_merge_size",), f"must be at least 1, got {spatial_merge_size}")
    if not segments:
        raise InvalidInput(("segments",), "give at least one segment")
    pieces: list[torch.Tensor] = []
    position = 0
    diverged: list[int] = []
    for index, segment in enumerate(segments):
        grid = _check(segment, index, spatial_merge_size)
        if grid is None:
            _check_bound(position + segment.length, ("segments", index, "length"), "the text's ids")
            pieces.append(torch.arange(segment.length, dtype=torch.int64).expand(3, -1) + position)  # (3, n)
            position += segment.length
            continue
        interval = tokens_per_second * segment.seconds_per_grid if rule == "qwen2_5_vl" else 1.0
        frames: list[tuple[int, int, int]] = [grid]
        if segment.kind == "video" and rule == "qwen3_vl":
            frames = [(1, grid[1], grid[2])] * grid[0]  # one group per frame, each its own start
        if segment.kind == "image":
            interval = 1.0  # still images have no time to space out
        for frame_grid in frames:
            extent = max(frame_grid[1], frame_grid[2]) // spatial_merge_size
            _check_bound(position + extent, ("segments", index, "grid"), "the grid's ids")
            if frame_grid[0] > 1:  # the temporal ids: position + floor(f · interval) for f < T, as they are made
                span = (frame_grid[0] - 1) * interval
                timed = segment.kind == "video" and rule == "qwen2_5_vl" and interval > 1
                _check_bound(
                    position + (math.floor(span) if math.isfinite(span) else span) + 1,
                    ("segments", index, "seconds_per_grid" if timed else "grid"),
                    "the temporal ids (frame · tokens_per_second · seconds_per_grid)" if timed else "the temporal ids",
                )
            ids = _vision_ids(position, frame_grid, spatial_merge_size, interval)  # (3, n)
            pieces.append(ids)
            by_extent = position + extent
            by_largest = int(ids.max()) + 1
            if by_extent != by_largest:
                diverged.append(index)
            position = by_extent if advance == "max_hw" else by_largest
    warnings = []
    if diverged:
        other = "max_id" if advance == "max_hw" else "max_hw"
        warnings.append(
            f"segments {sorted(set(diverged))}: the position after the grid differs between advance='max_hw' "
            f"(transformers 5.x) and advance='max_id' (earlier releases); the ids after it follow {advance!r}, "
            f"a model run with {other!r} sees other positions for every later token"
        )
    return PositionIds(ids=torch.cat(pieces, dim=1), next_position=position, warnings=warnings)
