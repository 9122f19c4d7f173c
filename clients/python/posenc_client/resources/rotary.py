"""POST /v1/rotary: rotate q (and k) by their positions with RoPE or one of its scalings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from posenc_client._backends import ReturnFormat
from posenc_client._base_client import UploadMode
from posenc_client._results import RotaryResult
from posenc_client._transport import HTTPRequest
from posenc_client._uploads import TensorArg, build_body
from posenc_client.resources._base import AsyncResource, SyncResource
from posenc_client.resources._compute import SAFETENSORS, compute_request, grid_json, params_or_empty
from posenc_client.resources.models import ConfigSource, config_or_preset

FloatDType = Literal["float32", "float64", "bfloat16", "float16"]


def _rotary_request(
    q: Any,
    k: Any,
    *,
    method: str | None,
    params: dict[str, Any] | None,
    positions: Any,
    offset: int,
    pairing: Literal["half", "interleaved"] | None,
    rotate: Literal["both", "query"],
    rotary_dim: int | None,
    return_tables: bool,
    dtype: FloatDType | None,
    upload: UploadMode,
    accept: str | None,
    grid: Sequence[int] | None = None,
    prefix_tokens: int = 0,
    config: ConfigSource | None = None,
    layer: int | None = None,
) -> HTTPRequest:
    if config is not None:
        if method is not None or params is not None or pairing is not None or rotary_dim is not None:
            raise ValueError("with config, the layer's method, params, pairing and rotary_dim come from the config")
        if layer is None:
            raise ValueError("config needs layer, the index of the layer to rotate for")
    fields = {
        "method": method if config is not None or method is not None else "rope",
        "params": None if config is not None else params_or_empty(params),
        "config": None if config is None else config_or_preset(config),
        "layer": layer,
        "grid": grid_json(grid),
        "prefix_tokens": prefix_tokens or None,
        "offset": offset,
        "pairing": pairing,
        "rotate": rotate,
        "rotary_dim": rotary_dim,
        "return_tables": return_tables,
        "dtype": dtype,
    }
    tensors = {
        "q": TensorArg(q, "float32"),
        "k": None if k is None else TensorArg(k, "float32"),
        "positions": None if positions is None else TensorArg(positions, "int64"),
    }
    body = build_body(fields, tensors, upload=upload, binary_allowed=True)
    return compute_request("/v1/rotary", body, accept=accept or SAFETENSORS)


class Rotary(SyncResource):
    def apply(
        self,
        q: Any,
        k: Any = None,
        *,
        method: str | None = None,
        params: dict[str, Any] | None = None,
        config: ConfigSource | None = None,
        layer: int | None = None,
        positions: Any = None,
        grid: Sequence[int] | None = None,
        prefix_tokens: int = 0,
        offset: int = 0,
        pairing: Literal["half", "interleaved"] | None = None,
        rotate: Literal["both", "query"] = "both",
        rotary_dim: int | None = None,
        return_tables: bool = False,
        dtype: FloatDType | None = None,
        upload: UploadMode | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> RotaryResult:
        """Rotated q and k (B, H, N, D), plus cos/sin (N, rotary_dim/2) with return_tables.

        q, k and positions: torch tensors, numpy arrays, nested lists, or {"random": {"shape": [...],
        "seed": 0}} to have the server generate them. k may be omitted with rotate="query".

        The tokens' positions (default arange(N) + offset), at most one of:

        - positions: int positions (N,), or (N, A) coordinates for 2D/3D methods ((row, col) or
          (frame, row, col)); negative rows are prefix tokens, left unrotated (prefix p at -(p + 1)). Sent like
          q and k: inline, or as the positions tensor of a safetensors upload.
        - grid: (rows, cols) for 2D methods, (frames, rows, cols) for 3D: the tokens are prefix_tokens
          tokens, then this grid's in C order (N = prefix_tokens + prod(grid)).

        prefix_tokens (with a grid): tokens before the grid's (CLS, registers), not rotated (identity).

        method (default "rope") and params, or a model's config (a config.json path, its dict or a
        preset's name) and layer: that layer's method, params, rotated slice and pairing, as
        client.models.resolve reports them. pairing defaults to the method's own (half, rotate_half, for
        all but the block rotations).
        """
        request = _rotary_request(
            q,
            k,
            method=method,
            params=params,
            config=config,
            layer=layer,
            positions=positions,
            grid=grid,
            prefix_tokens=prefix_tokens,
            offset=offset,
            pairing=pairing,
            rotate=rotate,
            rotary_dim=rotary_dim,
            return_tables=return_tables,
            dtype=dtype,
            upload=self._upload(upload),
            accept=accept,
        )
        response = self._client._request(request)
        return RotaryResult.from_response(response, fmt=self._format(return_format))


class AsyncRotary(AsyncResource):
    async def apply(
        self,
        q: Any,
        k: Any = None,
        *,
        method: str | None = None,
        params: dict[str, Any] | None = None,
        config: ConfigSource | None = None,
        layer: int | None = None,
        positions: Any = None,
        grid: Sequence[int] | None = None,
        prefix_tokens: int = 0,
        offset: int = 0,
        pairing: Literal["half", "interleaved"] | None = None,
        rotate: Literal["both", "query"] = "both",
        rotary_dim: int | None = None,
        return_tables: bool = False,
        dtype: FloatDType | None = None,
        upload: UploadMode | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> RotaryResult:
        """Like Rotary.apply ((N, A) positions, grid and prefix_tokens included), awaited."""
        request = _rotary_request(
            q,
            k,
            method=method,
            params=params,
            config=config,
            layer=layer,
            positions=positions,
            grid=grid,
            prefix_tokens=prefix_tokens,
            offset=offset,
            pairing=pairing,
            rotate=rotate,
            rotary_dim=rotary_dim,
            return_tables=return_tables,
            dtype=dtype,
            upload=self._upload(upload),
            accept=accept,
        )
        response = await self._client._request(request)
        return RotaryResult.from_response(response, fmt=self._format(return_format))
