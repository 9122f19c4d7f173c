"""``POST /v1/bias``: the bias matrix of a bias method (ALiBi, T5, KERPLE, FIRE, Sandwich, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from posenc_client._backends import ReturnFormat
from posenc_client._results import BiasResult
from posenc_client._transport import HTTPRequest
from posenc_client._uploads import build_body
from posenc_client.resources._base import AsyncResource, SyncResource
from posenc_client.resources._compute import OCTET_STREAM, compute_request, params_or_empty

FloatDType = Literal["float32", "float64", "bfloat16", "float16"]


def _bias_request(
    *,
    method: str,
    num_heads: int,
    query_length: int,
    key_length: int | None,
    query_offset: int | None,
    causal: bool,
    dtype: FloatDType,
    form: Literal["dense", "toeplitz"],
    params: dict[str, Any] | None,
    accept: str | None,
) -> HTTPRequest:
    body = {
        "method": method,
        "params": params_or_empty(params),
        "num_heads": num_heads,
        "query_length": query_length,
        "causal": causal,
        "dtype": dtype,
        "form": form,
    }
    if key_length is not None:
        body["key_length"] = key_length
    if query_offset is not None:
        body["query_offset"] = query_offset
    return compute_request(
        "/v1/bias", build_body(body, {}, upload="json", binary_allowed=False), accept=accept or OCTET_STREAM
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
        query_length: int,
        key_length: int | None = None,
        query_offset: int | None = None,
        causal: bool = True,
        dtype: FloatDType = "float32",
        form: Literal["dense", "toeplitz"] = "dense",
        params: dict[str, Any] | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> BiasResult:
        """``bias`` of shape (H, Nq, Nk), or (H, Nq + Nk - 1) with ``form="toeplitz"``.

        Query i sits at position i + ``query_offset``; by default the queries are the last Nq of the Nk keys
        (Nk - Nq, as a KV-cache decode step), or 0 when Nq >= Nk.

        ``accept`` overrides the media type asked for (default application/octet-stream).
        """
        request = _bias_request(
            method=method,
            num_heads=num_heads,
            query_length=query_length,
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
        query_length: int,
        key_length: int | None = None,
        query_offset: int | None = None,
        causal: bool = True,
        dtype: FloatDType = "float32",
        form: Literal["dense", "toeplitz"] = "dense",
        params: dict[str, Any] | None = None,
    ) -> Path:
        """Stream the bias into a file: ``.npy``, ``.safetensors`` (with the meta), else raw bytes."""
        request = _bias_request(
            method=method,
            num_heads=num_heads,
            query_length=query_length,
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
        query_length: int,
        key_length: int | None = None,
        query_offset: int | None = None,
        causal: bool = True,
        dtype: FloatDType = "float32",
        form: Literal["dense", "toeplitz"] = "dense",
        params: dict[str, Any] | None = None,
        return_format: ReturnFormat | None = None,
        accept: str | None = None,
    ) -> BiasResult:
        request = _bias_request(
            method=method,
            num_heads=num_heads,
            query_length=query_length,
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
        query_length: int,
        key_length: int | None = None,
        query_offset: int | None = None,
        causal: bool = True,
        dtype: FloatDType = "float32",
        form: Literal["dense", "toeplitz"] = "dense",
        params: dict[str, Any] | None = None,
    ) -> Path:
        """Stream the bias into a file: ``.npy``, ``.safetensors`` (with the meta), else raw bytes."""
        request = _bias_request(
            method=method,
            num_heads=num_heads,
            query_length=query_length,
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
