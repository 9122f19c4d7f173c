"""Client (blocking) and AsyncClient (asyncio): the same options, resources and retry policy.

Each resource is a read-only property with a one-line docstring, so help(Client) lists what it offers."""

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
    """Blocking client. Use it as a context manager, or call close() when done.

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
    @property
    def methods(self) -> Methods:
        """The registered methods: list(kind=...) and get(name), with parameter schemas, conventions and papers."""
        from posenc_client.resources.methods import Methods

        return self._resource("methods", lambda: Methods(self))

    @property
    def tasks(self) -> Tasks:
        """The job tasks: list() gives each task's family, unit, size fields and metrics, the suites and patterns."""
        from posenc_client.resources.tasks import Tasks

        return self._resource("tasks", lambda: Tasks(self))

    @property
    def models(self) -> Models:
        """Real models' configs: presets (list, get), resolve(config) into per-layer rotations, convert, gguf."""
        from posenc_client.resources.models import Models

        return self._resource("models", lambda: Models(self))

    @property
    def rope(self) -> Rope:
        """Rotary diagnostics: frequencies, precision, compare, decode, serve_check, temperature, position_ids."""
        from posenc_client.resources.rope import Rope

        return self._resource("rope", lambda: Rope(self))

    @property
    def bias(self) -> Bias:
        """Attention biases of the bias methods (ALiBi, T5, KERPLE, FIRE, ...): compute(), or save() to a file."""
        from posenc_client.resources.bias import Bias

        return self._resource("bias", lambda: Bias(self))

    @property
    def rotary(self) -> Rotary:
        """Rotary methods (RoPE and its scalings) applied to q and k: apply(), with the cos/sin tables on request."""
        from posenc_client.resources.rotary import Rotary

        return self._resource("rotary", lambda: Rotary(self))

    @property
    def encodings(self) -> Encodings:
        """Absolute encodings P (sinusoidal, axial, 2D/3D, learned, graph): compute()."""
        from posenc_client.resources.encodings import Encodings

        return self._resource("encodings", lambda: Encodings(self))

    @property
    def attention(self) -> Attention:
        """Attention maps with any method applied by its kind, the output with v, and statistics: compute()."""
        from posenc_client.resources.attention import Attention

        return self._resource("attention", lambda: Attention(self))

    @property
    def jobs(self) -> Jobs:
        """Queued jobs (train, extrapolate, benchmark, compute): create, get, list, wait, cancel, events, artifacts."""
        from posenc_client.resources.jobs import Jobs

        return self._resource("jobs", lambda: Jobs(self))

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
        """Stream a body to target (via a .part file, so a failed download leaves nothing behind)."""
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
        """Close the HTTP connections (the with block does it on exit)."""
        if "_transport" in self.__dict__:
            self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


class AsyncClient(BaseClient):
    """asyncio client with the same resources; use it in "async with", or await client.close() when done."""

    @cached_property
    def _transport(self) -> AsyncTransport:
        return AsyncTransport(
            base_url=self._options.base_url,
            timeout_s=self._options.timeout_s,
            connect_timeout_s=self._options.connect_timeout_s,
            headers=self._options.headers,
        )

    @property
    def methods(self) -> AsyncMethods:
        """The registered methods: list(kind=...) and get(name), with parameter schemas, conventions and papers."""
        from posenc_client.resources.methods import AsyncMethods

        return self._resource("methods", lambda: AsyncMethods(self))

    @property
    def tasks(self) -> AsyncTasks:
        """The job tasks: list() gives each task's family, unit, size fields and metrics, the suites and patterns."""
        from posenc_client.resources.tasks import AsyncTasks

        return self._resource("tasks", lambda: AsyncTasks(self))

    @property
    def models(self) -> AsyncModels:
        """Real models' configs: presets (list, get), resolve(config) into per-layer rotations, convert, gguf."""
        from posenc_client.resources.models import AsyncModels

        return self._resource("models", lambda: AsyncModels(self))

    @property
    def rope(self) -> AsyncRope:
        """Rotary diagnostics: frequencies, precision, compare, decode, serve_check, temperature, position_ids."""
        from posenc_client.resources.rope import AsyncRope

        return self._resource("rope", lambda: AsyncRope(self))

    @property
    def bias(self) -> AsyncBias:
        """Attention biases of the bias methods (ALiBi, T5, KERPLE, FIRE, ...): compute(), or save() to a file."""
        from posenc_client.resources.bias import AsyncBias

        return self._resource("bias", lambda: AsyncBias(self))

    @property
    def rotary(self) -> AsyncRotary:
        """Rotary methods (RoPE and its scalings) applied to q and k: apply(), with the cos/sin tables on request."""
        from posenc_client.resources.rotary import AsyncRotary

        return self._resource("rotary", lambda: AsyncRotary(self))

    @property
    def encodings(self) -> AsyncEncodings:
        """Absolute encodings P (sinusoidal, axial, 2D/3D, learned, graph): compute()."""
        from posenc_client.resources.encodings import AsyncEncodings

        return self._resource("encodings", lambda: AsyncEncodings(self))

    @property
    def attention(self) -> AsyncAttention:
        """Attention maps with any method applied by its kind, the output with v, and statistics: compute()."""
        from posenc_client.resources.attention import AsyncAttention

        return self._resource("attention", lambda: AsyncAttention(self))

    @property
    def jobs(self) -> AsyncJobs:
        """Queued jobs (train, extrapolate, benchmark, compute): create, get, list, wait, cancel, events, artifacts."""
        from posenc_client.resources.jobs import AsyncJobs

        return self._resource("jobs", lambda: AsyncJobs(self))

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
        """Close the HTTP connections (the async with block does it on exit)."""
        if "_transport" in self.__dict__:
            await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()
