"""``/v1/rope/*``: diagnostics of rotary setups (M-RoPE position ids, and the probes added with them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from posenc_client._models import PositionIdsResponse
from posenc_client._transport import HTTPRequest
from posenc_client.resources._base import AsyncResource, SyncResource

JSON_ACCEPT = {"Accept": "application/json"}
Rule = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]


def _position_ids_request(
    segments: Sequence[Mapping[str, Any]],
    rule: Rule,
    spatial_merge_size: int,
    tokens_per_second: float,
    advance: Literal["max_hw", "max_id"],
) -> HTTPRequest:
    body = {
        "segments": [dict(segment) for segment in segments],
        "rule": rule,
        "spatial_merge_size": spatial_merge_size,
        "tokens_per_second": tokens_per_second,
        "advance": advance,
    }
    return HTTPRequest(method="POST", path="/v1/rope/position_ids", headers=JSON_ACCEPT, json_body=body)


class Rope(SyncResource):
    def position_ids(
        self,
        segments: Sequence[Mapping[str, Any]],
        *,
        rule: Rule = "qwen2_5_vl",
        spatial_merge_size: int = 2,
        tokens_per_second: float = 2.0,
        advance: Literal["max_hw", "max_id"] = "max_hw",
    ) -> PositionIdsResponse:
        """Qwen-VL M-RoPE (t, h, w) ids, ``ids`` (3, N), of segments like ``{"kind": "text", "length": 5}``,
        ``{"kind": "image", "grid": [1, 28, 28]}``, ``{"kind": "video", "grid": [8, 28, 28],
        "seconds_per_grid": 1.0}``, by the model family's own rule; ``warnings`` where the two position-advance
        rules of transformers' releases disagree."""
        request = _position_ids_request(segments, rule, spatial_merge_size, tokens_per_second, advance)
        return PositionIdsResponse.model_validate_json(self._client._request(request).content)


class AsyncRope(AsyncResource):
    async def position_ids(
        self,
        segments: Sequence[Mapping[str, Any]],
        *,
        rule: Rule = "qwen2_5_vl",
        spatial_merge_size: int = 2,
        tokens_per_second: float = 2.0,
        advance: Literal["max_hw", "max_id"] = "max_hw",
    ) -> PositionIdsResponse:
        request = _position_ids_request(segments, rule, spatial_merge_size, tokens_per_second, advance)
        return PositionIdsResponse.model_validate_json((await self._client._request(request)).content)
