"""POST /v1/bias: the bias matrix of a bias method (ALiBi, T5, KERPLE, FIRE, Sandwich, ...)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from posenc_client._backends import ReturnFormat
from posenc_client._results import BiasResult
from posenc_client._transport import HTTPRequest
from posenc_client._uploads import build_body
from posenc_client.resources._base import AsyncResource, SyncResource
from posenc_client.resources._compute import OCTET_STREAM, compute_request, graph_json, grid_json, params_or_empty

FloatDType = Literal["float32", "float64", "bfloat16", "float16"]


def _bias_request(
    *,
    method: str,
    num_heads: int,
    query_length: int | None,
    grid: Sequence[int] | None,
    graph: Mapping[str, Any] | BaseModel | None,
    prefix_tokens: int,
    key_length: int | None,
    query_offset: int | None,
    causal: bool | None,
    dtype: FloatDType,
    form: Literal["dense", "toeplitz"],
    params: dict[str, Any] | None,
    accept: str | None,
) -> HTTPRequest:
    if sum(layout is not None for layout in (query_length, grid, graph)) != 1:
        raise ValueError("give exactly one of query_length= (1D), grid= (2D/3D) or graph= (graph methods)")
    fields = {  # None values are left out: the server's defaults apply (causal: its default by layout)
        "method": method,
        "params": params_or_empty(params),
        "num_heads": num_heads,
        "query_length": query_length,
        "grid": grid_json(grid),
        "graph": graph_json(graph),
        "prefix_tokens": prefix_tokens or None,
        "key_length": key_length,
        "query_offset": query_offset,
        "causal": causal,
        "dtype": dtype,
        "form": form,
    }
    return compute_request(
        "/v1/bias", build_body(fields, {}, upload="json", binary_allowed=False), accept=accept or OCTET_STREAM
    )


FILE_TYPES = {".npy": "application/x-npy", ".safetensors": "application/vnd.safetensors"}


def media_type_for(path: str | Path) -> str:
    """The Accept type matching the file name: .npy, .safetensors, anything else raw bytes."""
    return FILE_TYPES.get(Path(path).suffix.lower(), OCTET_STREAM)


class Bias(SyncResource):
    def compute(
        self,
        method: str,
        *,
        num_heads: int,
        query_length: int | None = None,
        grid: Sequence[int] | None = None,
        graph: Mapping[str, Any] | BaseModel | None = None,
        prefix_tokens: int = 0,
        key_length: int | None = None,
        query_offset: int | None = None,
        causal: bool | None = None,
        dtype: FloatDType = "float32",
        form: Literal["dense", "toeplitz"] = "dense",
        params: dict[str, Any] | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> BiasResult:
        """bias of shape (H, Nq, Nk), or (H, Nq + Nk - 1) with form="toeplitz".

        Give exactly one layout of the tokens:

        - query_length (1D methods): Nq query tokens against key_length keys (default Nq). Query i sits
          at position i + query_offset; by default the queries are the last Nq of the Nk keys (Nk - Nq, as
          a KV-cache decode step), or 0 when Nq >= Nk.
        - grid (2D/3D methods): (rows, cols) or (frames, rows, cols); self-attention of prefix_tokens
          tokens, then the grid's in C order: (H, P + prod(grid), P + prod(grid)), dense form only.
        - graph (graph methods such as Graphormer): a dict or a posenc_client.GraphIn with
          num_nodes, edges ((u, v) node id pairs), optional edge_features (one categorical id, or a
          list of ids, per edge) and directed (default false); the tokens are prefix_tokens tokens,
          then its nodes: (H, P + num_nodes, P + num_nodes).

        prefix_tokens (with a grid or a graph): tokens before the grid's or the graph's (CLS, registers, a
        graph's virtual token), not biased the way grid tokens are (the method's own prefix entries or 0).

        causal: mask keys after the query (j > i + query_offset) with -inf and use the method's causal
        form. Default None lets the server decide: true for 1D sequences, false for a grid or a graph (token
        order is no direction there).

        accept overrides the media type asked for (default application/octet-stream).
        """
        request = _bias_request(
            method=method,
            num_heads=num_heads,
            query_length=query_length,
            grid=grid,
            graph=graph,
            prefix_tokens=prefix_tokens,
            key_length=key_length,
            query_offset=query_offset,
            causal=causal,
            dtype=dtype,
            form=form,
            params=params,
            accept=accept,
        )
        response = self._client._request(request)
        return BiasResult.from_response(response, fmt=self._format(return_format))

    def save(
        self,
        method: str,
        path: str | Path,
        *,
        num_heads: int,
        query_length: int | None = None,
        grid: Sequence[int] | None = None,
        graph: Mapping[str, Any] | BaseModel | None = None,
        prefix_tokens: int = 0,
        key_length: int | None = None,
        query_offset: int | None = None,
        causal: bool | None = None,
        dtype: FloatDType = "float32",
        form: Literal["dense", "toeplitz"] = "dense",
        params: dict[str, Any] | None = None,
    ) -> Path:
        """Stream the bias into a file: .npy, .safetensors (with the meta), else raw bytes.

        The arguments are those of Bias.compute (one of query_length, grid or graph)."""
        request = _bias_request(
            method=method,
            num_heads=num_heads,
            query_length=query_length,
            grid=grid,
            graph=graph,
            prefix_tokens=prefix_tokens,
            key_length=key_length,
            query_offset=query_offset,
            causal=causal,
            dtype=dtype,
            form=form,
            params=params,
            accept=media_type_for(path),
        )
        self._client._download(request, Path(path))
        return Path(path)


class AsyncBias(AsyncResource):
    async def compute(
        self,
        method: str,
        *,
        num_heads: int,
        query_length: int | None = None,
        grid: Sequence[int] | None = None,
        graph: Mapping[str, Any] | BaseModel | None = None,
        prefix_tokens: int = 0,
        key_length: int | None = None,
        query_offset: int | None = None,
        causal: bool | None = None,
        dtype: FloatDType = "float32",
        form: Literal["dense", "toeplitz"] = "dense",
        params: dict[str, Any] | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> BiasResult:
        """Like Bias.compute (query_length, grid or graph; prefix_tokens), awaited."""
        request = _bias_request(
            method=method,
            num_heads=num_heads,
            query_length=query_length,
            grid=grid,
            graph=graph,
            prefix_tokens=prefix_tokens,
            key_length=key_length,
            query_offset=query_offset,
            causal=causal,
            dtype=dtype,
            form=form,
            params=params,
            accept=accept,
        )
        response = await self._client._request(request)
        return BiasResult.from_response(response, fmt=self._format(return_format))

    async def save(
        self,
        method: str,
        path: str | Path,
        *,
        num_heads: int,
        query_length: int | None = None,
        grid: Sequence[int] | None = None,
        graph: Mapping[str, Any] | BaseModel | None = None,
        prefix_tokens: int = 0,
        key_length: int | None = None,
        query_offset: int | None = None,
        causal: bool | None = None,
        dtype: FloatDType = "float32",
        form: Literal["dense", "toeplitz"] = "dense",
        params: dict[str, Any] | None = None,
    ) -> Path:
        """Stream the bias into a file: .npy, .safetensors (with the meta), else raw bytes.

        The arguments are those of Bias.compute (one of query_length, grid or graph)."""
        request = _bias_request(
            method=method,
            num_heads=num_heads,
            query_length=query_length,
            grid=grid,
            graph=graph,
            prefix_tokens=prefix_tokens,
            key_length=key_length,
            query_offset=query_offset,
            causal=causal,
            dtype=dtype,
            form=form,
            params=params,
            accept=media_type_for(path),
        )
        await self._client._download(request, Path(path))
        return Path(path)
