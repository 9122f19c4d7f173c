"""HTTP transport: the only module that imports httpx.

Switching to the ``httpx2`` fork (openai-python 3.x, Starlette's TestClient) is a change to the import line
below. Everything else in the SDK sees :class:`HTTPRequest` / :class:`HTTPResponse` and the SDK's own
connection errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import httpx

from posenc_client._exceptions import APIConnectionError, APITimeoutError

DOWNLOAD_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
class HTTPRequest:
    method: str
    path: str
    params: Mapping[str, str | int | float | bool] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    json_body: Any = None
    content: bytes | None = None


@dataclass(frozen=True, kw_only=True)
class HTTPResponse:
    status: int
    reason: str
    headers: dict[str, str]  # keys lower-cased
    content: bytes
    url: str

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def media_type(self) -> str:
        return (self.header("content-type") or "").split(";")[0].strip().lower()


def _timeout(total_s: float | None, connect_s: float | None) -> httpx.Timeout:
    return httpx.Timeout(timeout=total_s, connect=connect_s)


def _build(request: HTTPRequest) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"headers": dict(request.headers)}
    if request.params:
        kwargs["params"] = {key: _query_value(value) for key, value in request.params.items()}
    if request.content is not None:
        kwargs["content"] = request.content
    elif request.json_body is not None:
        kwargs["json"] = request.json_body
    return kwargs


def _query_value(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _response(raw: httpx.Response, content: bytes) -> HTTPResponse:
    return HTTPResponse(
        status=raw.status_code,
        reason=raw.reason_phrase,
        headers={key.lower(): value for key, value in raw.headers.items()},
        content=content,
        url=str(raw.request.url),
    )


def _connection_error(exc: httpx.TransportError, request: HTTPRequest, url: str) -> APIConnectionError:
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"{request.method} {url} timed out: {exc!r}", method=request.method, url=url)
    return APIConnectionError(
        f"{request.method} {url}: could not reach the server ({exc!r})", method=request.method, url=url
    )


class SyncTransport:
    def __init__(
        self,
        *,
        base_url: str,
        timeout_s: float | None,
        connect_timeout_s: float | None,
        headers: Mapping[str, str],
    ) -> None:
        self._base_url = base_url
        self._client = httpx.Client(
            base_url=base_url, timeout=_timeout(timeout_s, connect_timeout_s), headers=dict(headers)
        )

    def send(self, request: HTTPRequest) -> HTTPResponse:
        try:
            raw = self._client.request(request.method, request.path, **_build(request))
        except httpx.TransportError as exc:
            raise _connection_error(exc, request, self._base_url + request.path) from exc
        return _response(raw, raw.content)

    def download(self, request: HTTPRequest, *, sink: IO[bytes]) -> HTTPResponse:
        """Stream a 2xx body into ``sink``; an error body is read whole and returned as content."""
        try:
            with self._client.stream(request.method, request.path, **_build(request)) as raw:
                if raw.status_code >= 400:
                    return _response(raw, raw.read())
                for chunk in raw.iter_bytes(DOWNLOAD_CHUNK_BYTES):
                    sink.write(chunk)
                return _response(raw, b"")
        except httpx.TransportError as exc:
            raise _connection_error(exc, request, self._base_url + request.path) from exc

    def close(self) -> None:
        self._client.close()


class AsyncTransport:
    def __init__(
        self,
        *,
        base_url: str,
        timeout_s: float | None,
        connect_timeout_s: float | None,
        headers: Mapping[str, str],
    ) -> None:
        self._base_url = base_url
        self._client = httpx.AsyncClient(
            base_url=base_url, timeout=_timeout(timeout_s, connect_timeout_s), headers=dict(headers)
        )

    async def send(self, request: HTTPRequest) -> HTTPResponse:
        try:
            raw = await self._client.request(request.method, request.path, **_build(request))
        except httpx.TransportError as exc:
            raise _connection_error(exc, request, self._base_url + request.path) from exc
        return _response(raw, raw.content)

    async def download(self, request: HTTPRequest, *, sink: IO[bytes]) -> HTTPResponse:
        try:
            async with self._client.stream(request.method, request.path, **_build(request)) as raw:
                if raw.status_code >= 400:
                    return _response(raw, await raw.aread())
                async for chunk in raw.aiter_bytes(DOWNLOAD_CHUNK_BYTES):
                    sink.write(chunk)
                return _response(raw, b"")
        except httpx.TransportError as exc:
            raise _connection_error(exc, request, self._base_url + request.path) from exc

    async def aclose(self) -> None:
        await self._client.aclose()
