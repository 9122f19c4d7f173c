"""POST /v1/attention: attention maps with any method applied by its kind, the output with v, and
statistics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel

from posenc_client._backends import ReturnFormat
from posenc_client._base_client import UploadMode
from posenc_client._results import AttentionResult
from posenc_client._transport import HTTPRequest
from posenc_client._uploads import TensorArg, build_body
from posenc_client.resources._base import AsyncResource, SyncResource
from posenc_client.resources._compute import SAFETENSORS, compute_request, graph_json, grid_json, params_or_empty

FloatDType = Literal["float32", "float64", "bfloat16", "float16"]


def _attention_request(
    q: Any,
    k: Any,
    *,
    v: Any,
    x: Any,
    method: str,
    params: dict[str, Any] | None,
    causal: bool | None,
    query_offset: int | None,
    key_padding_mask: Any,
    stats: bool,
    scale: float | None,
    pairing: Literal["half", "interleaved"] | None,
    dtype: FloatDType | None,
    upload: UploadMode,
    accept: str | None,
    grid: Sequence[int] | None = None,
    prefix_tokens: int = 0,
    positions: Any = None,
    graph: Mapping[str, Any] | BaseModel | None = None,
) -> HTTPRequest:
    fields = {  # None values are left out: the server's defaults apply (causal: its default by layout)
        "method": method,
        "params": params_or_empty(params),
        "causal": causal,
        "query_offset": query_offset,
        "grid": grid_json(grid),
        "prefix_tokens": prefix_tokens or None,
        "graph": graph_json(graph),
        "stats": stats,
        "scale": scale,
        "pairing": pairing,
        "dtype": dtype,
    }
    tensors = {
        "q": TensorArg(q, "float32"),
        "k": TensorArg(k, "float32"),
        "v": None if v is None else TensorArg(v, "float32"),
        "x": None if x is None else TensorArg(x, "float32"),
        "positions": None if positions is None else TensorArg(positions, "int64"),
        "key_padding_mask": None if key_padding_mask is None else TensorArg(key_padding_mask, "bool"),
    }
    body = build_body(fields, tensors, upload=upload, binary_allowed=True)
    return compute_request("/v1/attention", body, accept=accept or SAFETENSORS)


class Attention(SyncResource):
    def compute(
        self,
        q: Any,
        k: Any,
        *,
        method: str,
        v: Any = None,
        x: Any = None,
        params: dict[str, Any] | None = None,
        causal: bool | None = None,
        query_offset: int | None = None,
        grid: Sequence[int] | None = None,
        prefix_tokens: int = 0,
        positions: Any = None,
        graph: Mapping[str, Any] | BaseModel | None = None,
        key_padding_mask: Any = None,
        stats: bool = True,
        scale: float | None = None,
        pairing: Literal["half", "interleaved"] | None = None,
        dtype: FloatDType | None = None,
        upload: UploadMode | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> AttentionResult:
        """weights (B, H, Nq, Nk) and, with stats, per head entropy, mean_distance and
        mass_by_distance. q and k are (B, H, N, D); key_padding_mask (B, Nk) booleans, true = padding.
        Query i sits at position i + query_offset (default: Nk - Nq when Nk > Nq, the queries being the last
        tokens as in KV-cache decoding; else 0).

        causal: mask keys after the query (j > i + query_offset, in token order). Default None lets the
        server decide: true for 1D sequences, false when grid, positions or graph is given (token
        order is no direction there).

        Positions beyond 1D (at most one of grid, positions, graph):

        - grid: (rows, cols) for 2D methods, (frames, rows, cols) for 3D; the keys are prefix_tokens
          tokens, then this grid's in C order, so Nk = prefix_tokens + prod(grid).
        - prefix_tokens: tokens before the grid's or the graph's (CLS, registers, a graph's virtual token):
          not rotated, biased or encoded the way grid tokens are (identity rotation; the method's own prefix
          entries or 0). Needs a grid or a graph.
        - positions: int positions of the keys, (Nk,) for 1D methods or (Nk, A) coordinates for 2D/3D
          methods ((row, col) or (frame, row, col)); negative rows are prefix tokens (prefix p at -(p + 1)).
          Lists (of lists), numpy or torch integer arrays; sent like q and k (inline, or as the positions
          tensor of a safetensors upload).
        - graph: for graph methods (Graphormer, Laplacian PE), a dict or a posenc_client.GraphIn
          with num_nodes, edges ((u, v) node id pairs), optional edge_features (one categorical id,
          or a list of ids, per edge) and directed (default false); the keys are prefix_tokens tokens,
          then its nodes (positions = node ids).

        With a grid, positions or a graph the queries are the last Nq keys (or keys query_offset …).

        v (B, H, Nk, Dv) adds output (B, H, Nq, Dv), and for methods of kind attention (which
        replace the softmax) leftover (B, H, Nq), the mass given to no key. x (B, Nk, D_model) is the
        layer input, for methods that read it (MethodInfo.needs, e.g. FoX's gates). Tensor-valued
        params (torch tensors, numpy arrays: learned weights such as T5's table) are sent like q and k:
        inline, or as params.<name> tensors of a safetensors upload."""
        request = _attention_request(
            q,
            k,
            v=v,
            x=x,
            method=method,
            params=params,
            causal=causal,
            query_offset=query_offset,
            grid=grid,
            prefix_tokens=prefix_tokens,
            positions=positions,
            graph=graph,
            key_padding_mask=key_padding_mask,
            stats=stats,
            scale=scale,
            pairing=pairing,
            dtype=dtype,
            upload=self._upload(upload),
            accept=accept,
        )
        response = self._client._request(request)
        return AttentionResult.from_response(response, fmt=self._format(return_format))


class AsyncAttention(AsyncResource):
    async def compute(
        self,
        q: Any,
        k: Any,
        *,
        method: str,
        v: Any = None,
        x: Any = None,
        params: dict[str, Any] | None = None,
        causal: bool | None = None,
        query_offset: int | None = None,
        grid: Sequence[int] | None = None,
        prefix_tokens: int = 0,
        positions: Any = None,
        graph: Mapping[str, Any] | BaseModel | None = None,
        key_padding_mask: Any = None,
        stats: bool = True,
        scale: float | None = None,
        pairing: Literal["half", "interleaved"] | None = None,
        dtype: FloatDType | None = None,
        upload: UploadMode | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> AttentionResult:
        """Like Attention.compute (grid, prefix_tokens, positions and graph included), awaited."""
        request = _attention_request(
            q,
            k,
            v=v,
            x=x,
            method=method,
            params=params,
            causal=causal,
            query_offset=query_offset,
            grid=grid,
            prefix_tokens=prefix_tokens,
            positions=positions,
            graph=graph,
            key_padding_mask=key_padding_mask,
            stats=stats,
            scale=scale,
            pairing=pairing,
            dtype=dtype,
            upload=self._upload(upload),
            accept=accept,
        )
        response = await self._client._request(request)
        return AttentionResult.from_response(response, fmt=self._format(return_format))
