"""M-RoPE position ids checked against the models' own rule: Hugging Face transformers' ``get_rope_index`` of
Qwen2-VL, Qwen2.5-VL and Qwen3-VL (a pinned test-only dependency), called on token-type ids built from the same
segments."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

from posenc.errors import InvalidInput
from posenc.real_models.mrope_positions import Segment, mrope_position_ids

MODELS: dict[str, Any] = {"qwen2_vl": Qwen2VLModel, "qwen2_5_vl": Qwen2_5_VLModel, "qwen3_vl": Qwen3VLModel}
MERGE, TOKENS_PER_SECOND = 2, 2


def transformers_ids(rule: str, segments: list[Segment]) -> torch.Tensor:
    """(3, N) from the model class's own get_rope_index, on a stand-in ``self`` holding only its config."""
    model = MODELS[rule]
    types: list[int] = []
    images: list[tuple[int, int, int]] = []
    videos: list[tuple[int, int, int]] = []
    seconds: list[float] = []
    for segment in segments:
        if segment.kind == "text":
            types += [0] * segment.length
            continue
        assert segment.grid is not None
        t, h, w = segment.grid
        code = 1 if segment.kind == "image" else 2
        if rule == "qwen3_vl" and code == 2:  # its video tokens come one frame at a time, between timestamps
            for frame in range(t):
                types += [code] * (h * w // MERGE**2)
                if frame < t - 1:
                    types += [0]  # the timestamp between frames
            videos.append(segment.grid)
            continue
        types += [code] * (t * h * w // MERGE**2)
        (images if code == 1 else videos).append(segment.grid)
        seconds += [segment.seconds_per_grid] if code == 2 else []
    vision = SimpleNamespace(spatial_merge_size=MERGE, tokens_per_second=TOKENS_PER_SECOND)
    stand_in = SimpleNamespace(config=SimpleNamespace(vision_config=vision))
    stand_in.get_vision_position_ids = lambda *a, **k: model.get_vision_position_ids(stand_in, *a, **k)
    token_types = torch.tensor([types])  # (1, N)
    position_ids, _ = model.get_rope_index(
        stand_in,
        torch.zeros_like(token_types),
        token_types,
        image_grid_thw=torch.tensor(images) if images else None,
        video_grid_thw=torch.tensor(videos) if videos else None,
        second_per_grid_ts=torch.tensor(seconds) if seconds else None,
    )
    ids: torch.Tensor = position_ids[:, 0]  # (3, N)
    return ids


def as_qwen3(segments: list[Segment]) -> list[Segment]:
    """Qwen3-VL's input: a video's frames separated by one timestamp token each."""
    out: list[Segment] = []
    for segment in segments:
        if segment.kind == "video" and segment.grid is not None:
            t, h, w = segment.grid
            for frame in range(t):
                out.append(Segment("video", grid=(1, h, w)))
                if frame < t - 1:
                    out.append(Segment("text", length=1))
        else:
            out.append(segment)
    return out


SEQUENCES = {
    "text only": [Segment("text", length=7)],
    "image in text": [Segment("text", length=3), Segment("image", grid=(1, 4, 6)), Segment("text", length=4)],
    "video in text": [
        Segment("text", length=2),
        Segment("video", grid=(3, 4, 4), seconds_per_grid=0.5),
        Segment("text", length=3),
    ],
    "long video": [Segment("video", grid=(8, 2, 2), seconds_per_grid=1.0), Segment("text", length=2)],
    "two images": [Segment("image", grid=(1, 2, 4)), Segment("text", length=1), Segment("image", grid=(1, 6, 2))],
}


@pytest.mark.parametrize("rule", sorted(MODELS))
@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_position_ids_match_the_models_own_rule(rule: str, name: str) -> None:
    segments = SEQUENCES[name]
    if rule == "qwen3_vl":
        segments = as_qwen3(segments)
    ours = mrope_position_ids(segments, rule=rule, spatial_merge_size=MERGE, tokens_per_second=TOKENS_PER_SECOND)  # type: ignore[arg-type]
    expected = transformers_ids(rule, segments)
    assert torch.equal(ours.ids, expected), (ours.ids, expected)


def test_text_ids_are_one_dimensional_and_the_grid_is_row_major() -> None:
    ids = mrope_position_ids([Segment("text", length=2), Segment("image", grid=(1, 4, 4))], spatial_merge_size=2).ids
    assert ids[:, :2].tolist() == [[0, 1], [0, 1], [0, 1]]
    assert ids[:, 2:].tolist() == [[2, 2, 2, 2], [2, 2, 3, 3], [2, 3, 2, 3]]


def test_a_video_whose_time_outruns_its_grid_warns_that_the_two_advance_rules_differ() -> None:
    long_video = [Segment("video", grid=(8, 2, 2), seconds_per_grid=1.0), Segment("text", length=1)]
    now = mrope_position_ids(long_video, rule="qwen2_5_vl", spatial_merge_size=2, tokens_per_second=2)
    before = mrope_position_ids(
        long_video, rule="qwen2_5_vl", spatial_merge_size=2, tokens_per_second=2, advance="max_id"
    )
    assert now.warnings
    assert before.warnings
    assert int(now.ids[0, -1]) == 1  # max(H, W)/m = 1 past the start
    assert int(before.ids[0, -1]) == 15  # one past τ(7) = 7 · 2 · 1 = 14
    square = [Segment("image", grid=(1, 4, 4)), Segment("text", length=1)]
    assert not mrope_position_ids(square).warnings


@pytest.mark.parametrize(
    ("segments", "loc"),
    [
        ([Segment("text", length=0)], ("segments", 0, "length")),
        ([Segment("image", grid=(2, 4, 4))], ("segments", 0, "grid")),
        ([Segment("video", grid=(1, 3, 4))], ("segments", 0, "grid")),
        ([], ("segments",)),
    ],
)
def test_bad_segments_name_the_field(segments: list[Segment], loc: tuple[str | int, ...]) -> None:
    with pytest.raises(InvalidInput) as raised:
        mrope_position_ids(segments)
    assert raised.value.loc == loc
