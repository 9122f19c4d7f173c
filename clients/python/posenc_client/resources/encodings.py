"""``POST /v1/encodings``: absolute encodings P (sinusoidal, axial, 2D/3D sinusoidal, learned)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from posenc_client._backends import ReturnFormat
from posenc_client._results import EncodingResult
from posenc_client._transport import HTTPRequest
from posenc_client._uploads import build_body
from posenc_client.resources._base import AsyncResource, SyncResource
from posenc_client.resources._compute import OCTET_STREAM, compute_request, params_or_empty

FloatDType = Literal["float32", "float64", "bfloat16", "float16"]


def _encoding_request(
    *,
    method: str,
    length: int | None,
    grid: Sequence[int] | None,
    dim: int,
    dtype: FloatDType,
    params: dict[str, Any] | None,
    accept: str | None,
) -> HTTPRequest:
    if (length is None) == (grid is None):
        raise ValueError("give exactly one of length= (1D methods) or grid= (2D/3D methods)")
    body: dict[str, Any] = {"method": method, "params": params_or_empty(params), "dim": dim, "dtype": dtype}
    if length is not None:
        body["length"] = length
    else:
        body["grid"] = list(grid or ())
    return compute_request(
        "/v1/encodings", build_body(body, {}, upload="json", binary_allowed=False), accept=accept or OCTET_STREAM
    )


class Encodings(SyncResource):
    def compute(
        self,
        method: str,
        *,
        dim: int,
        length: int | None = None,
        grid: Sequence[int] | None = None,
        dtype: FloatDType = "float32",
        params: dict[str, Any] | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> EncodingResult:
        """``encoding`` of shape (length, dim), or (*grid, dim) for 2D/3D methods."""
        request = _encoding_request(
            method=method, length=length, grid=grid, dim=dim, dtype=dtype, params=params, accept=accept
        )
        response = self._client._request(request)
        return EncodingResult.from_response(response, fmt=self._format(return_format))


class AsyncEncodings(AsyncResource):
    async def compute(
        self,
        method: str,
        *,
        dim: int,
        length: int | None = None,
        grid: Sequence[int] | None = None,
        dtype: FloatDType = "float32",
        params: dict[str, Any] | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> EncodingResult:
        request = _encoding_request(
            method=method, length=length, grid=grid, dim=dim, dtype=dtype, params=params, accept=accept
        )
        response = await self._client._request(request)
        return EncodingResult.from_response(response, fmt=self._format(return_format))
