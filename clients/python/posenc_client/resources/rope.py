"""/v1/rope/*: diagnostics of rotary setups (M-RoPE position ids, and the probes added with them)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from posenc_client._models import PositionIdsResponse, TemperatureResponse
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


def _post(path: str, body: dict[str, Any]) -> HTTPRequest:
    return HTTPRequest(method="POST", path=f"/v1/rope/{path}", headers=JSON_ACCEPT, json_body=body)


def _json(content: bytes | bytearray) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(content)
    return value


Setup = Mapping[str, Any]  # {"method", "params", "rotary_dim", "pairing"} or {"config", "layer"}


def _diagnostic(name: str, setup: Setup | None = None, **fields: Any) -> HTTPRequest:
    body = {key: value for key, value in fields.items() if value is not None}
    if setup is not None:
        body["setup"] = dict(setup)
    return _post(name, body)


class Rope(SyncResource):
    def frequencies(self, setup: Setup, *, train_length: int) -> dict[str, Any]:
        """Per pair: ω, wavelength, rotations over train_length, wraps, band (YaRN ramp, Llama 3 bands).
        setup: {"method", "params", "rotary_dim", "pairing"} or {"config", "layer"}."""
        return _json(self._client._request(_diagnostic("frequencies", setup, train_length=train_length)).content)

    def precision(self, setup: Setup, *, dtype: str = "bfloat16", **options: Any) -> dict[str, Any]:
        """The error of rotating in dtype against float64 per band of positions (positions_bands,
        positions_per_band, seed)."""
        request = _diagnostic("precision", setup, dtype=dtype, **options)
        return _json(self._client._request(request).content)

    def compare(self, setup_a: Setup, setup_b: Setup, *, max_position: int, **options: Any) -> dict[str, Any]:
        """The first position where two setups' angles or logits part (tolerance_angle, tolerance_logit)."""
        request = _diagnostic(
            "compare", setup_a=dict(setup_a), setup_b=dict(setup_b), max_position=max_position, **options
        )
        return _json(self._client._request(request).content)

    def decode(self, setup: Setup, *, prefill: int, steps: int, **options: Any) -> dict[str, Any]:
        """KV-cache decoding against recomputation: error per step, the first step that diverges."""
        request = _diagnostic("decode", setup, prefill=prefill, steps=steps, **options)
        return _json(self._client._request(request).content)

    def serve_check(self, setup: Setup, **options: Any) -> dict[str, Any]:
        """A serving simulator: chunked prefill, decode, a left-padded batch, packed documents and a sink + window
        cache against full recomputation, per variant the largest logit error and the first wrong (sequence,
        query, key). setup: {"method", "params", "rotary_dim", "pairing"} (rotary or bias methods) or
        {"config", "layer"} (NoPE layers too); options heads, length, chunk_sizes, prefill,
        batch_lengths, documents, sinks, window, tolerance, seed."""
        return _json(self._client._request(_diagnostic("serve_check", setup, **options)).content)

    def temperature(
        self, config: Mapping[str, Any], *, layer: int, length: int, offset: int = 0
    ) -> TemperatureResponse:
        """The query temperature of a config's layer at positions offset ... offset + length - 1 (Llama 4's on its
        NoPE layers, Mistral 3's llama_4_scaling_beta on its RoPE layers; 1 where the layer has none)."""
        request = _post("temperature", {"config": dict(config), "layer": layer, "length": length, "offset": offset})
        return TemperatureResponse.model_validate_json(self._client._request(request).content)

    def permutation(
        self, head_dim: int, to: Literal["half", "interleaved"], *, rotary_dim: int | None = None
    ) -> list[int]:
        """Within each head, new q/k projection row r = old row order[r] (interleaved <-> half pairing)."""
        request = _post("permutation", {"head_dim": head_dim, "to": to, "rotary_dim": rotary_dim})
        order: list[int] = _json(self._client._request(request).content)["order"]
        return order

    def position_ids(
        self,
        segments: Sequence[Mapping[str, Any]],
        *,
        rule: Rule = "qwen2_5_vl",
        spatial_merge_size: int = 2,
        tokens_per_second: float = 2.0,
        advance: Literal["max_hw", "max_id"] = "max_hw",
    ) -> PositionIdsResponse:
        """Qwen-VL M-RoPE (t, h, w) ids, ids (3, N), of segments like {"kind": "text", "length": 5},
        {"kind": "image", "grid": [1, 28, 28]}, {"kind": "video", "grid": [8, 28, 28],
        "seconds_per_grid": 1.0}, by the model family's own rule; warnings where the two position-advance
        rules of transformers' releases disagree."""
        request = _position_ids_request(segments, rule, spatial_merge_size, tokens_per_second, advance)
        return PositionIdsResponse.model_validate_json(self._client._request(request).content)


class AsyncRope(AsyncResource):
    async def frequencies(self, setup: Setup, *, train_length: int) -> dict[str, Any]:
        request = _diagnostic("frequencies", setup, train_length=train_length)
        return _json((await self._client._request(request)).content)

    async def precision(self, setup: Setup, *, dtype: str = "bfloat16", **options: Any) -> dict[str, Any]:
        request = _diagnostic("precision", setup, dtype=dtype, **options)
        return _json((await self._client._request(request)).content)

    async def compare(self, setup_a: Setup, setup_b: Setup, *, max_position: int, **options: Any) -> dict[str, Any]:
        request = _diagnostic(
            "compare", setup_a=dict(setup_a), setup_b=dict(setup_b), max_position=max_position, **options
        )
        return _json((await self._client._request(request)).content)

    async def decode(self, setup: Setup, *, prefill: int, steps: int, **options: Any) -> dict[str, Any]:
        request = _diagnostic("decode", setup, prefill=prefill, steps=steps, **options)
        return _json((await self._client._request(request)).content)

    async def serve_check(self, setup: Setup, **options: Any) -> dict[str, Any]:
        return _json((await self._client._request(_diagnostic("serve_check", setup, **options))).content)

    async def temperature(
        self, config: Mapping[str, Any], *, layer: int, length: int, offset: int = 0
    ) -> TemperatureResponse:
        request = _post("temperature", {"config": dict(config), "layer": layer, "length": length, "offset": offset})
        return TemperatureResponse.model_validate_json((await self._client._request(request)).content)

    async def permutation(
        self, head_dim: int, to: Literal["half", "interleaved"], *, rotary_dim: int | None = None
    ) -> list[int]:
        request = _post("permutation", {"head_dim": head_dim, "to": to, "rotary_dim": rotary_dim})
        order: list[int] = _json((await self._client._request(request)).content)["order"]
        return order

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
