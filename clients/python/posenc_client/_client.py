"""``Client`` (blocking) and ``AsyncClient`` (asyncio): the same options, resources and retry policy."""

from __future__ import annotations

import asyncio
import os
import time
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from posenc_client._base_client import BaseClient
from posenc_client._exceptions import APIConnectionError
from posenc_client._transport import AsyncTransport, HTTPRequest, HTTPResponse, SyncTransport

if TYPE_CHECKING:
    from posenc_client.resources.attention import AsyncAttention, Attention
    from posenc_client.resources.bias import AsyncBias, Bias
    from posenc_client.resources.encodings import AsyncEncodings, Encodings
    from posenc_client.resources.jobs import AsyncJobs, Jobs
    from posenc_client.resources.methods import AsyncMethods, Methods
    from posenc_client.resources.models import AsyncModels, Models
    from posenc_client.resources.rope import AsyncRope, Rope
    from posenc_client.resources.rotary import AsyncRotary, Rotary
    from posenc_client.resources.tasks import AsyncTasks, Tasks


def _partial_path(target: Path) -> Path:
    return target.with_name(target.name + ".part")


class Client(BaseClient):
    """Blocking client. Use as a context manager, or call :meth:`close`.

    >>> with Client() as client:                      # POSENC_BASE_URL, POSENC_API_KEY
    ...     bias = client.bias.compute("alibi", num_heads=8, query_length=128).bias
    """

    @cached_property
    def _transport(self) -> SyncTransport:
        return SyncTransport(
            base_url=self._options.base_url,
            timeout_s=self._options.timeout_s,
            connect_timeout_s=self._options.connect_timeout_s,
            headers=self._options.headers,
        )

    # ---------------------------------------------------------------------------------------- resources
    @cached_property
    def methods(self) -> Methods:
        from posenc_client.resources.methods import Methods

        return Methods(self)

    @cached_property
    def tasks(self) -> Tasks:
        from posenc_client.resources.tasks import Tasks

        return Tasks(self)

    @cached_property
    def models(self) -> Models:
        from posenc_client.resources.models import Models

        return Models(self)

    @cached_property
    def rope(self) -> Rope:
        from posenc_client.resources.rope import Rope

        return Rope(self)

    @cached_property
    def bias(self) -> Bias:
        from posenc_client.resources.bias import Bias

        return Bias(self)

    @cached_property
    def rotary(self) -> Rotary:
        from posenc_client.resources.rotary import Rotary

        return Rotary(self)

    @cached_property
    def encodings(self) -> Encodings:
        from posenc_client.resources.encodings import Encodings

        return Encodings(self)

    @cached_property
    def attention(self) -> Attention:
        from posenc_client.resources.attention import Attention

        return Attention(self)

    @cached_property
    def jobs(self) -> Jobs:
        from posenc_client.resources.jobs import Jobs

        return Jobs(self)

    # ------------------------------------------------------------------------------------------ sending
    def _request(self, request: HTTPRequest) -> HTTPResponse:
        """Send with retries; return a 2xx/3xx response or raise the status's exception."""
        retries_done = 0
        while True:
            try:
                response = self._transport.send(self._attempt_request(request, retries_done=retries_done))
            except APIConnectionError as error:
                delay = self._delay_after_connection_error(request, error, retries_done=retries_done)
                if delay is None:
                    raise
            else:
                delay = self._delay_after_response(request, response, retries_done=retries_done)
                if delay is None:
                    self._raise_for_status(request, response)
                    return response
            time.sleep(delay)
            retries_done += 1

    def _download(self, request: HTTPRequest, target: Path) -> HTTPResponse:
        """Stream a body to ``target`` (via a ``.part`` file, so a failed download leaves nothing behind)."""
        partial = _partial_path(target)
        retries_done = 0
        try:
            while True:
                try:
                    with partial.open("wb") as sink:
                        response = self._transport.download(
                            self._attempt_request(request, retries_done=retries_done), sink=sink
                        )
                except APIConnectionError as error:
                    delay = self._delay_after_connection_error(request, error, retries_done=retries_done)
                    if delay is None:
                        raise
                else:
                    delay = self._delay_after_response(request, response, retries_done=retries_done)
                    if delay is None:
                        self._raise_for_status(request, response)
                        os.replace(partial, target)
                        return response
                time.sleep(delay)
                retries_done += 1
        finally:
            partial.unlink(missing_ok=True)

    # ---------------------------------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if "_transport" in self.__dict__:
            self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


class AsyncClient(BaseClient):
    """asyncio client with the same resources; use ``async with`` or ``await client.close()``."""

    @cached_property
    def _transport(self) -> AsyncTransport:
        return AsyncTransport(
            base_url=self._options.base_url,
            timeout_s=self._options.timeout_s,
            connect_timeout_s=self._options.connect_timeout_s,
            headers=self._options.headers,
        )

    @cached_property
    def methods(self) -> AsyncMethods:
        from posenc_client.resources.methods import AsyncMethods

        return AsyncMethods(self)

    @cached_property
    def tasks(self) -> AsyncTasks:
        from posenc_client.resources.tasks import AsyncTasks

        return AsyncTasks(self)

    @cached_property
    def models(self) -> AsyncModels:
        from posenc_client.resources.models import AsyncModels

        return AsyncModels(self)

    @cached_property
    def rope(self) -> AsyncRope:
        from posenc_client.resources.rope import AsyncRope

        return AsyncRope(self)

    @cached_property
    def bias(self) -> AsyncBias:
        from posenc_client.resources.bias import AsyncBias

        return AsyncBias(self)

    @cached_property
    def rotary(self) -> AsyncRotary:
        from posenc_client.resources.rotary import AsyncRotary

        return AsyncRotary(self)

    @cached_property
    def encodings(self) -> AsyncEncodings:
        from posenc_client.resources.encodings import AsyncEncodings

        return AsyncEncodings(self)

    @cached_property
    def attention(self) -> AsyncAttention:
        from posenc_client.resources.attention import AsyncAttention

        return AsyncAttention(self)

    @cached_property
    def jobs(self) -> AsyncJobs:
        from posenc_client.resources.jobs import AsyncJobs

        return AsyncJobs(self)

    async def _request(self, request: HTTPRequest) -> HTTPResponse:
        retries_done = 0
        while True:
            try:
                response = await self._transport.send(self._attempt_request(request, retries_done=retries_done))
            except APIConnectionError as error:
                delay = self._delay_after_connection_error(request, error, retries_done=retries_done)
                if delay is None:
                    raise
            else:
                delay = self._delay_after_response(request, response, retries_done=retries_done)
                if delay is None:
                    self._raise_for_status(request, response)
                    return response
            await asyncio.sleep(delay)
            retries_done += 1

    async def _download(self, request: HTTPRequest, target: Path) -> HTTPResponse:
        partial = _partial_path(target)
        retries_done = 0
        try:
            while True:
                try:
                    with partial.open("wb") as sink:
                        response = await self._transport.download(
                            self._attempt_request(request, retries_done=retries_done), sink=sink
                        )
                except APIConnectionError as error:
                    delay = self._delay_after_connection_error(request, error, retries_done=retries_done)
                    if delay is None:
                        raise
                else:
                    delay = self._delay_after_response(request, response, retries_done=retries_done)
                    if delay is None:
                        self._raise_for_status(request, response)
                        os.replace(partial, target)
                        return response
                await asyncio.sleep(delay)
                retries_done += 1
        finally:
            partial.unlink(missing_ok=True)

    async def close(self) -> None:
        if "_transport" in self.__dict__:
            await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()
