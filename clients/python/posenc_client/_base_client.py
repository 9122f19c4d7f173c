"""What Client and AsyncClient share: configuration, headers, the retry policy and error mapping.

The two clients differ only in how they wait and send (time.sleep vs asyncio.sleep, a sync or an
async transport); every decision is made here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar, cast

from posenc_client._backends import ReturnFormat
from posenc_client._constants import (
    API_KEY_ENV,
    API_KEY_HEADER,
    BASE_URL_ENV,
    DEFAULT_BASE_URL,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    MAX_RETRY_AFTER_S,
    RETRY_COUNT_HEADER,
)
from posenc_client._exceptions import APIConnectionError, APIStatusError, ProblemDetails, error_class_for
from posenc_client._retry import RetryEvent, RetryPolicy, parse_retry_after
from posenc_client._transport import HTTPRequest, HTTPResponse
from posenc_client._version import __version__

logger = logging.getLogger("posenc_client")

UploadMode = Literal["auto", "json", "safetensors"]
ResourceT = TypeVar("ResourceT")
RetryHook = Callable[[RetryEvent], None]


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    base_url: str
    api_key: str | None
    timeout_s: float | None
    connect_timeout_s: float | None
    retry: RetryPolicy
    return_format: ReturnFormat
    upload: UploadMode
    on_retry: RetryHook | None
    default_headers: Mapping[str, str]

    @property
    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": f"posenc-client/{__version__}", **self.default_headers}
        if self.api_key:
            headers[API_KEY_HEADER] = self.api_key
        return headers


def resolve_options(
    *,
    base_url: str | None,
    api_key: str | None,
    timeout: float | None,
    connect_timeout: float | None,
    max_retries: int,
    max_retry_after: float,
    return_format: ReturnFormat,
    upload: UploadMode,
    on_retry: RetryHook | None,
    default_headers: Mapping[str, str] | None,
) -> ClientOptions:
    """Arguments win over the environment (POSENC_BASE_URL, POSENC_API_KEY), which wins over defaults."""
    resolved_url = base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    return ClientOptions(
        base_url=resolved_url.rstrip("/"),
        api_key=api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None,
        timeout_s=timeout,
        connect_timeout_s=connect_timeout,
        retry=RetryPolicy(max_retries=max_retries, max_retry_after_s=max_retry_after),
        return_format=return_format,
        upload=upload,
        on_retry=on_retry,
        default_headers=dict(default_headers or {}),
    )


class BaseClient:
    """Configuration and per-attempt decisions; subclasses own a transport and do the waiting."""

    _options: ClientOptions

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_after: float = MAX_RETRY_AFTER_S,
        return_format: ReturnFormat = "auto",
        upload: UploadMode = "auto",
        on_retry: RetryHook | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        """
        Args:
            base_url: the gateway; default $POSENC_BASE_URL, else http://127.0.0.1:8000.
            api_key: sent as X-API-Key; default $POSENC_API_KEY (none when unset).
            timeout: seconds for a whole request (None: no limit); connect_timeout for connecting.
            max_retries: retries after a connection error, timeout, 408, 429, 502, 503 or 504 (0: none).
            max_retry_after: the longest Retry-After the client waits out; a longer one raises at once.
            return_format: how tensors come back: "auto" (torch if installed, else numpy, else lists),
                "torch", "numpy" or "list"; each compute call can override it.
            upload: how input tensors travel: "auto" (inline JSON up to 4096 elements, else a safetensors
                body), "json" or "safetensors".
            on_retry: called with a RetryEvent before each wait (logging, metrics, tests).
            default_headers: extra headers on every request.
        """
        self._options = resolve_options(
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            connect_timeout=connect_timeout,
            max_retries=max_retries,
            max_retry_after=max_retry_after,
            return_format=return_format,
            upload=upload,
            on_retry=on_retry,
            default_headers=default_headers,
        )

    def _resource(self, name: str, build: Callable[[], ResourceT]) -> ResourceT:
        """The resource called name, built by build() on first use and kept for the client's life (the
        resources are properties, each with a docstring, so help(Client) describes them)."""
        cache: dict[str, Any] = self.__dict__.setdefault("_resources", {})
        if name not in cache:
            cache[name] = build()
        return cast(ResourceT, cache[name])

    @property
    def base_url(self) -> str:
        """The gateway this client talks to."""
        return self._options.base_url

    @property
    def max_retries(self) -> int:
        """How many times a failed request is retried (connection errors, 408, 429, 502, 503, 504)."""
        return self._options.retry.max_retries

    @property
    def options(self) -> ClientOptions:
        """Everything the client was configured with (base URL, key, timeouts, retry policy, formats)."""
        return self._options

    def _copy_options(self, **changes: object) -> ClientOptions:
        return replace(self._options, **changes)  # type: ignore[arg-type]

    # ------------------------------------------------------------------------------ per-attempt decisions
    @staticmethod
    def _attempt_request(request: HTTPRequest, *, retries_done: int) -> HTTPRequest:
        if retries_done == 0:
            return request
        return replace(request, headers={**request.headers, RETRY_COUNT_HEADER: str(retries_done)})

    def _delay_after_response(self, request: HTTPRequest, response: HTTPResponse, *, retries_done: int) -> float | None:
        """None: the response is final (success, or an error to raise). Else seconds to wait, then retry."""
        if response.status < 400:
            return None
        delay = self._options.retry.delay_after_status(
            status=response.status, headers=response.headers, retries_done=retries_done
        )
        if delay is not None:
            self._announce_retry(
                RetryEvent(
                    method=request.method,
                    url=response.url,
                    attempt=retries_done + 1,
                    delay_s=delay,
                    status=response.status,
                    retry_after_s=parse_retry_after(response.headers),
                )
            )
        return delay

    def _delay_after_connection_error(
        self, request: HTTPRequest, error: APIConnectionError, *, retries_done: int
    ) -> float | None:
        delay = self._options.retry.delay_after_connection_error(retries_done=retries_done)
        if delay is not None:
            self._announce_retry(
                RetryEvent(
                    method=request.method,
                    url=error.url,
                    attempt=retries_done + 1,
                    delay_s=delay,
                    status=None,
                    retry_after_s=None,
                    error=str(error),
                )
            )
        return delay

    def _announce_retry(self, event: RetryEvent) -> None:
        logger.info(
            "%s %s: attempt %d failed (%s); retrying in %.2f s",
            event.method,
            event.url,
            event.attempt,
            event.status if event.status is not None else event.error,
            event.delay_s,
        )
        if self._options.on_retry is not None:
            self._options.on_retry(event)

    @staticmethod
    def _raise_for_status(request: HTTPRequest, response: HTTPResponse) -> None:
        if response.status < 400:
            return
        body = bytes(response.content)  # error bodies are small problem documents
        problem = ProblemDetails.from_body(status=response.status, reason=response.reason, body=body)
        error_class: type[APIStatusError] = error_class_for(response.status)
        raise error_class(
            problem=problem,
            body=body,
            headers=response.headers,
            method=request.method,
            url=response.url,
        )
