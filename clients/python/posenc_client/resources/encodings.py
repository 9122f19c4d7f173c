"""POST /v1/encodings: absolute encodings P (sinusoidal, axial, 2D/3D sinusoidal, learned, graph)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel

from posenc_client._backends import ReturnFormat
from posenc_client._results import EncodingResult
from posenc_client._transport import HTTPRequest
from posenc_client._uploads import build_body
from posenc_client.resources._base import AsyncResource, SyncResource
from posenc_client.resources._compute import (
    OCTET_STREAM,
    SAFETENSORS,
    compute_request,
    graph_json,
    grid_json,
    params_or_empty,
)

FloatDType = Literal["float32", "float64", "bfloat16", "float16"]


def _encoding_request(
    *,
    method: str,
    length: int | None,
    grid: Sequence[int] | None,
    graph: Mapping[str, Any] | BaseModel | None,
    prefix_tokens: int,
    dim: int,
    dtype: FloatDType,
    params: dict[str, Any] | None,
    accept: str | None,
) -> HTTPRequest:
    if sum(layout is not None for layout in (length, grid, graph)) != 1:
        raise ValueError("give exactly one of length= (1D methods), grid= (2D/3D methods) or graph= (graph methods)")
    fields = {  # None values are left out
        "method": method,
        "params": params_or_empty(params),
        "dim": dim,
        "dtype": dtype,
        "length": length,
        "grid": grid_json(grid),
        "graph": graph_json(graph),
        "prefix_tokens": prefix_tokens or None,
    }
    # octet-stream carries one tensor: with prefix tokens there are two (encoding and prefix)
    default_accept = SAFETENSORS if prefix_tokens else OCTET_STREAM
    return compute_request(
        "/v1/encodings",
        build_body(fields, {}, upload="json", binary_allowed=False),
        accept=accept or default_accept,
    )


class Encodings(SyncResource):
    def compute(
        self,
        method: str,
        *,
        dim: int,
        length: int | None = None,
        grid: Sequence[int] | None = None,
        graph: Mapping[str, Any] | BaseModel | None = None,
        prefix_tokens: int = 0,
        dtype: FloatDType = "float32",
        params: dict[str, Any] | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> EncodingResult:
        """encoding of shape (length, dim), (*grid, dim) for 2D/3D methods, or (num_nodes, dim) for graph
        methods. Give exactly one of:

        - length (1D methods);
        - grid: (H, W) or (T, H, W) (2D/3D methods);
        - graph (graph methods such as Laplacian PE): encode its nodes (N = num_nodes); a dict or a
          posenc_client.GraphIn with num_nodes, edges ((u, v) node id pairs), optional
          edge_features and directed (default false).

        prefix_tokens P > 0 also returns prefix (P, dim): the rows the method adds to the prefix tokens
        (CLS, registers) before the grid's, e.g. ViT's learned CLS position embedding (zeros for methods with
        no prefix entries). The response then holds two tensors, so the default media type is safetensors
        rather than octet-stream (which carries only encoding).
        """
        request = _encoding_request(
            method=method,
            length=length,
            grid=grid,
            graph=graph,
            prefix_tokens=prefix_tokens,
            dim=dim,
            dtype=dtype,
            params=params,
            accept=accept,
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
        graph: Mapping[str, Any] | BaseModel | None = None,
        prefix_tokens: int = 0,
        dtype: FloatDType = "float32",
        params: dict[str, Any] | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> EncodingResult:
        """Like Encodings.compute (graph and prefix_tokens included), awaited."""
        request = _encoding_request(
            method=method,
            length=length,
            grid=grid,
            graph=graph,
            prefix_tokens=prefix_tokens,
            dim=dim,
            dtype=dtype,
            params=params,
            accept=accept,
        )
        response = await self._client._request(request)
        return EncodingResult.from_response(response, fmt=self._format(return_format))
