"""Guards in front of the compute: capacity, budgets, API keys and a per-key rate limit.

- Capacity: compute routes are plain ``def`` and run in the threadpool; torch in a thread cannot be
  cancelled, so the only real control is how many run at once. A slot is waited for at most
  ``compute_wait_s``; then the answer is 503 with Retry-After.
- Budgets: sizes are known from the request, so they are checked before anything is allocated (413).
- API keys (``X-API-Key``) are compared in constant time against every configured key.
- Rate limit: a fixed one-minute window per key, counted in Redis when ``redis_url`` is set (shared by
  every gateway process) and in memory otherwise.
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import Request, Security
from fastapi.security import APIKeyHeader
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from posenc.settings import Settings
from service.errors import ProblemError, problem_response
from service.metrics import Metrics

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------- capacity
class ComputeSlots:
    """A counting semaphore with a bounded wait, usable from the threadpool threads of ``def`` routes."""

    def __init__(self, capacity: int, wait_s: float, metrics: Metrics | None = None) -> None:
        self.capacity = capacity
        self.wait_s = wait_s
        self._semaphore = threading.BoundedSemaphore(capacity)
        self._metrics = metrics

    def try_acquire(self) -> bool:
        acquired = (
            self._semaphore.acquire(timeout=self.wait_s) if self.wait_s > 0 else self._semaphore.acquire(blocking=False)
        )
        if acquired and self._metrics is not None:
            self._metrics.slots_in_use.inc()
        return acquired

    def release(self) -> None:
        self._semaphore.release()
        if self._metrics is not None:
            self._metrics.slots_in_use.dec()

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Run the body in a slot, or raise a 503 problem if none frees up within ``wait_s``."""
        if not self.try_acquire():
            if self._metrics is not None:
                self._metrics.slots_rejected.inc()
            retry_after = max(1, math.ceil(self.wait_s))
            raise ProblemError(
                503,
                f"all {self.capacity} compute slots are busy; retry after {retry_after} s, "
                "or submit a job (POST /v1/jobs)",
                headers={"Retry-After": str(retry_after)},
            )
        try:
            yield
        finally:
            self.release()


# ---------------------------------------------------------------------------------------------- body size
class BodyTooLarge(StarletteHTTPException):
    """An HTTPException so FastAPI's body parsing re-raises it untouched; the handler renders a 413."""

    def __init__(self) -> None:
        super().__init__(status_code=413)


class BodySizeLimit:
    """Cap request bodies at ``max_bytes``: refuse a declared Content-Length up front, and count the
    bytes of chunked bodies as they arrive (Starlette's own limiter answers in text/plain, and every
    error here is problem details)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(request, int(declared))(scope, receive, send)
            return
        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge
            return message

        await self.app(scope, counted_receive, send)

    def _refuse(self, request: Request, size: int) -> ASGIApp:
        return problem_response(
            request,
            413,
            f"the request body is {size} bytes, over the limit of {self.max_bytes} bytes; {BODY_HINT}",
            size=size,
            limit=self.max_bytes,
        )


BODY_HINT = (
    "send large tensors as application/vnd.safetensors, generate them on the server with "
    "{'random': {'shape', 'seed'}}, or run the work as a job (POST /v1/jobs)"
)


# ------------------------------------------------------------------------------------------------ budgets
def check_output_budget(size: int, settings: Settings, hint: str) -> None:
    """``size`` is every byte the request would allocate (outputs plus workspace); ``hint`` says how to get
    under the limit (``Prepared.budget_hint``: a smaller request, or the same one as a compute job)."""
    limit = settings.max_output_bytes
    if size > limit:
        raise ProblemError(
            413,
            f"this request would allocate {size} bytes (outputs and workspace), over the limit of {limit} "
            f"bytes; {hint}",
            size=size,
            limit=limit,
        )


def check_json_budget(elements: int, settings: Settings) -> None:
    limit = settings.max_json_elements
    if elements > limit:
        raise ProblemError(
            413,
            f"the response has {elements} elements, over the application/json limit of {limit}; ask for a "
            "binary type (Accept: application/octet-stream, application/vnd.safetensors or "
            "application/x-npy) or make the request smaller",
            size=elements,
            limit=limit,
        )


def check_input_budget(elements: int, settings: Settings, jobs_hint: str) -> None:
    """``jobs_hint`` says how to run the request as a job (``Prepared.jobs_hint``)."""
    limit = settings.max_input_elements
    if elements > limit:
        raise ProblemError(
            413,
            f"the input tensors have {elements} elements in total, over the limit of {limit}; "
            f"make them smaller, {jobs_hint}",
            size=elements,
            limit=limit,
        )


# ------------------------------------------------------------------------------------- keys, rate limit
api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="needed when keys are configured")


def _digest(value: str) -> bytes:
    # Equal-length digests make compare_digest's time independent of where the strings differ.
    return hashlib.sha256(value.encode()).digest()


def key_is_valid(candidate: str, keys: list[str]) -> bool:
    presented = _digest(candidate)
    matched = False
    for key in keys:  # no early exit: the time does not say which key (if any) matched
        matched |= secrets.compare_digest(presented, _digest(key))
    return matched


class RateLimiter:
    """Fixed one-minute windows per identity; Redis INCR + EXPIRE when configured, else a local dict."""

    def __init__(self, per_minute: int | None, redis_url: str | None) -> None:
        self.per_minute = per_minute
        self.redis_url = redis_url
        self._redis: object | None = None
        self._counts: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    async def retry_after(self, identity: str) -> int | None:
        """Count one request; None if allowed, else the seconds until the window resets."""
        if self.per_minute is None:
            return None
        now = time.time()
        window = int(now // 60)
        count = await self._count_redis(identity, window) if self.redis_url else None
        if count is None:
            count = self._count_local(identity, window)
        if count > self.per_minute:
            return max(1, math.ceil((window + 1) * 60 - now))
        return None

    def _count_local(self, identity: str, window: int) -> int:
        with self._lock:
            for stale in [key for key in self._counts if key[1] < window]:
                del self._counts[stale]
            self._counts[(identity, window)] = self._counts.get((identity, window), 0) + 1
            return self._counts[(identity, window)]

    async def _count_redis(self, identity: str, window: int) -> int | None:
        from redis.asyncio import Redis  # imported on first use: the gateway runs without Redis too

        if self._redis is None:
            assert self.redis_url is not None
            self._redis = Redis.from_url(self.redis_url, socket_timeout=1.0)
        client = self._redis
        assert isinstance(client, Redis)
        key = f"posenc:ratelimit:{identity}:{window}"
        try:
            async with client.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                pipe.expire(key, 120)  # outlives its window; the window index in the key does the reset
                count, _ = await pipe.execute()
            return int(count)
        except Exception:  # Redis down: count locally rather than fail every request
            logger.warning("rate limit: Redis unavailable, counting in memory", exc_info=True)
            return None

    async def close(self) -> None:
        from redis.asyncio import Redis

        if isinstance(self._redis, Redis):
            await self._redis.aclose()
            self._redis = None


async def authenticate(request: Request, api_key: Annotated[str | None, Security(api_key_header)] = None) -> None:
    """401 without a valid key (when keys are configured); 429 over the per-key rate limit."""
    settings: Settings = request.app.state.settings
    identity = request.client.host if request.client else "unknown"
    if settings.api_keys:
        if not api_key or not key_is_valid(api_key, settings.api_keys):
            raise ProblemError(
                401,
                "missing or invalid API key; send it in the X-API-Key header",
                headers={"WWW-Authenticate": "APIKey"},
            )
        identity = "key:" + _digest(api_key).hex()[:32]  # never the key itself, not even in Redis
    limiter: RateLimiter = request.app.state.rate_limiter
    retry_after = await limiter.retry_after(identity)
    if retry_after is not None:
        raise ProblemError(
            429,
            f"more than {limiter.per_minute} requests this minute; retry after {retry_after} s",
            headers={"Retry-After": str(retry_after)},
        )
