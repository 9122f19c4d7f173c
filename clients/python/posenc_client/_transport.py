"""HTTP transport: the only module that imports httpx.

Switching to the httpx2 fork (openai-python 3.x, Starlette's TestClient) is a change to the import line
below. Everything else in the SDK sees HTTPRequest / HTTPResponse and the SDK's own
connection errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import httpx

from posenc_client._exceptions import APIConnectionError, APITimeoutError

DOWNLOAD_CHUNK_BYTES = 1 << 20
UPLOAD_SLICE_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
class HTTPRequest:
    method: str
    path: str
    params: Mapping[str, str | int | float | bool] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    json_body: Any = None
    content: bytes | tuple[bytes | memoryview, ...] | None = None  # bytes, or pieces sent one after another


@dataclass(frozen=True, kw_only=True)
class HTTPResponse:
    status: int
    reason: str
    headers: dict[str, str]  # keys lower-cased
    content: bytes | bytearray  # a bytearray when read into one buffer sized from Content-Length (writable)
    url: str

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def media_type(self) -> str:
        return (self.header("content-type") or "").split(";")[0].strip().lower()


def _timeout(total_s: float | None, connect_s: float | None) -> httpx.Timeout:
    return httpx.Timeout(timeout=total_s, connect=connect_s)


def _build(request: HTTPRequest, *, asynchronous: bool = False) -> dict[str, Any]:
    """httpx's arguments for one attempt (a streamed body's iterator is made anew for each)."""
    kwargs: dict[str, Any] = {"headers": dict(request.headers)}
    if request.params:
        kwargs["params"] = {key: _query_value(value) for key, value in request.params.items()}
    if isinstance(request.content, tuple):
        # the pieces go out as they are, in slices, each copied once into the socket's send; with the length
        # declared, httpx sends a plain Content-Length body rather than a chunked one
        kwargs["headers"]["Content-Length"] = str(sum(memoryview(piece).nbytes for piece in request.content))
        slices = _upload_slices(request.content)
        kwargs["content"] = _async_slices(slices) if asynchronous else list(slices)
    elif request.content is not None:
        kwargs["content"] = request.content
    elif request.json_body is not None:
        kwargs["json"] = request.json_body
    return kwargs


def _upload_slices(pieces: tuple[bytes | memoryview, ...]) -> list[memoryview]:
    """Views of the pieces at most UPLOAD_SLICE_BYTES long: each is copied once on its way to the socket,
    so the memory a send takes beside the tensors is one slice, whatever their size."""
    slices: list[memoryview] = []
    for piece in pieces:
        view = memoryview(piece).cast("B")
        slices.extend(view[start : start + UPLOAD_SLICE_BYTES] for start in range(0, len(view), UPLOAD_SLICE_BYTES))
    return slices


async def _async_slices(slices: list[memoryview]) -> AsyncIterator[memoryview]:
    for piece in slices:
        yield piece


def _query_value(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _identity_length(raw: httpx.Response) -> int | None:
    """The body's length when it arrives as is (no content coding) and the server declared it, else None."""
    if raw.headers.get("content-encoding", "identity").lower() not in ("", "identity"):
        return None
    length = raw.headers.get("content-length")
    return int(length) if length is not None and length.isdigit() else None


def _into_buffer(size: int) -> tuple[bytearray, memoryview]:
    buffer = bytearray(size)
    return buffer, memoryview(buffer)


def _body_error(raw: httpx.Response, filled: int, size: int) -> httpx.TransportError:
    return httpx.RemoteProtocolError(f"the body ended after {filled} of {size} bytes", request=raw.request)


def _read_sync(raw: httpx.Response) -> bytes | bytearray:
    """The whole body: copied once, chunk by chunk as the socket delivers it, into one buffer of Content-Length
    bytes (no joining of chunks, no second copy); tensors are then views of it. Without a length: read()."""
    size = _identity_length(raw)
    if size is None:
        return raw.read()
    buffer, view = _into_buffer(size)
    filled = 0
    for chunk in raw.iter_raw():
        if filled + len(chunk) > size:
            raise _body_error(raw, filled + len(chunk), size)
        view[filled : filled + len(chunk)] = chunk
        filled += len(chunk)
    if filled != size:
        raise _body_error(raw, filled, size)
    return buffer


async def _read_async(raw: httpx.Response) -> bytes | bytearray:
    """_read_sync for the async client."""
    size = _identity_length(raw)
    if size is None:
        return await raw.aread()
    buffer, view = _into_buffer(size)
    filled = 0
    async for chunk in raw.aiter_raw():
        if filled + len(chunk) > size:
            raise _body_error(raw, filled + len(chunk), size)
        view[filled : filled + len(chunk)] = chunk
        filled += len(chunk)
    if filled != size:
        raise _body_error(raw, filled, size)
    return buffer


def _response(raw: httpx.Response, content: bytes | bytearray) -> HTTPResponse:
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
            with self._client.stream(request.method, request.path, **_build(request)) as raw:
                return _response(raw, _read_sync(raw))
        except httpx.TransportError as exc:
            raise _connection_error(exc, request, self._base_url + request.path) from exc

    def download(self, request: HTTPRequest, *, sink: IO[bytes]) -> HTTPResponse:
        """Stream a 2xx body into sink; an error body is read whole and returned as content."""
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
            async with self._client.stream(request.method, request.path, **_build(request, asynchronous=True)) as raw:
                return _response(raw, await _read_async(raw))
        except httpx.TransportError as exc:
            raise _connection_error(exc, request, self._base_url + request.path) from exc

    async def download(self, request: HTTPRequest, *, sink: IO[bytes]) -> HTTPResponse:
        try:
            async with self._client.stream(request.method, request.path, **_build(request, asynchronous=True)) as raw:
                if raw.status_code >= 400:
                    return _response(raw, await raw.aread())
                async for chunk in raw.aiter_bytes(DOWNLOAD_CHUNK_BYTES):
                    sink.write(chunk)
                return _response(raw, b"")
        except httpx.TransportError as exc:
            raise _connection_error(exc, request, self._base_url + request.path) from exc

    async def aclose(self) -> None:
        await self._client.aclose()
