"""Guards in front of the compute: capacity, budgets, API keys and a per-key rate limit.

- Capacity: compute runs on ``compute_concurrency`` threads of its own (tiny work, which costs less than the
  hand-off, on the event loop); torch in a thread cannot be cancelled, so the only real control is how many
  run at once. A slot is waited for (on the event loop, first come, first served) at most
  ``compute_wait_s``; then the answer is 503 with Retry-After.
- Budgets: sizes are known from the request, so they are checked before anything is allocated (413).
- API keys (``X-API-Key``) are hashed and compared in constant time against the digest of every configured
  key (the gateway holds only digests). A key's principal owns the jobs it creates (its owner id is a digest
  prefix); admin keys see every job; without keys there is one tenant that sees everything.
- Failed authentications (no key, a wrong key) are counted per client address: after
  ``auth_failures_per_minute`` of them, the address's requests without a valid key get 429 for the rest of
  the minute. A valid key is never refused by that count (many clients may share an address, a proxy's):
  it is looked up first and is then subject only to its own rate limit. So a blocked address still learns
  whether a key is right; what stops guessing is the keys' length, not this count.
- Rate limit: a fixed one-minute window per key, counted in Redis when ``redis_url`` is set (shared by
  every gateway process) and in memory otherwise; the failure count uses the same windows, in buckets of its
  own (``authfail:<address>``), apart from every key's.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Request, Security
from fastapi.security import APIKeyHeader
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from posenc.compute.cost import Budgets, Plan
from posenc.errors import located
from posenc.jobstore import ANONYMOUS
from posenc.settings import KEY_DIGEST_PREFIX, Settings, key_digest_form
from service.errors import ProblemError, problem_response
from service.metrics import Metrics
from service.transport import SAFETENSORS_TYPES, content_type

logger = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


# ----------------------------------------------------------------------------------------------- capacity
class ComputeSlots:
    """``capacity`` compute threads, and the slots that admit requests to them.

    A request waits for a slot on the event loop (``run``), at most ``wait_s``, then gets a 503; with a slot
    its work runs on one of the ``capacity`` threads of a pool of its own. The pool is no larger than the slots,
    so 32 concurrent small requests do not become 32 threads taking turns with the event loop for the GIL,
    as the shared threadpool of ``def`` routes would make them. ``try_acquire`` and ``release`` also work from
    any thread (tests hold a slot to saturate the gateway)."""

    def __init__(self, capacity: int, wait_s: float, metrics: Metrics | None = None) -> None:
        self.capacity = capacity
        self.wait_s = wait_s
        self._semaphore = threading.BoundedSemaphore(capacity)
        self._metrics = metrics
        self._executor: ThreadPoolExecutor | None = None  # made on first use, again after close()
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self._waiters_lock = threading.Lock()

    def try_acquire(self) -> bool:
        """Take a slot, blocking this thread up to ``wait_s`` (not for the event loop: see ``acquire``)."""
        acquired = (
            self._semaphore.acquire(timeout=self.wait_s) if self.wait_s > 0 else self._semaphore.acquire(blocking=False)
        )
        if acquired:
            self._taken()
        return acquired

    async def acquire(self) -> bool:
        """Take a slot within ``wait_s`` without blocking the event loop. Waiters are served first come, first
        served: a freed slot is handed to the oldest waiter, never to a request that arrives after it."""
        loop = asyncio.get_running_loop()
        handed: asyncio.Future[None] = loop.create_future()
        with self._waiters_lock:
            if not self._waiters and self._semaphore.acquire(blocking=False):
                self._taken()
                return True
            if self.wait_s <= 0:
                return False
            self._waiters.append((loop, handed))
        try:
            await asyncio.wait_for(handed, self.wait_s)
        except TimeoutError:
            with self._waiters_lock:
                if (loop, handed) in self._waiters:
                    self._waiters.remove((loop, handed))
            return False  # a slot handed over as the wait ended finds the future cancelled and moves on
        self._taken()
        return True

    def release(self) -> None:
        if self._metrics is not None:
            self._metrics.slots_in_use.dec()
        self._free_slot()

    def _free_slot(self) -> None:
        """The slot to the oldest waiter (on its event loop), or back to the semaphore when none waits."""
        with self._waiters_lock:
            if not self._waiters:
                self._semaphore.release()
                return
            loop, handed = self._waiters.popleft()
        loop.call_soon_threadsafe(self._hand_over, handed)

    def _hand_over(self, handed: asyncio.Future[None]) -> None:
        if handed.done():  # its wait ended first: the slot goes to the next one
            self._free_slot()
        else:
            handed.set_result(None)

    async def run(self, work: Callable[[], T], *, inline: bool = False) -> T:
        """``work`` on a compute thread once a slot is free, or a 503 problem if none frees up within ``wait_s``.
        ``inline``: run it on the event loop instead (work known to be tiny: the hand-off to a thread and back
        would cost more than the work; a small JSON bias is served 1.5x as often per second this way)."""
        if not await self.acquire():
            if self._metrics is not None:
                self._metrics.slots_rejected.inc()
            raise self._busy()
        try:
            if inline:
                return work()
            return await asyncio.get_running_loop().run_in_executor(self._threads(), work)
        finally:
            self.release()

    async def serve(
        self, settings: Settings, make_plan: Callable[[], Plan[T]], answer: Callable[[T], R], body: Any = None
    ) -> R:
        """A request planned (validated, resolved, costed), checked against the budgets (413), run, and its
        ``answer`` encoded, all in a compute slot: for routes whose planning itself is work (a model config to
        resolve) and whose answers are JSON built in Python. Errors name their field under ``body``; the input
        tensors ``body`` declares (random specs in raw params too) are checked before any planning."""
        budgets = Budgets.from_settings(settings)

        def work() -> R:
            with located(("body",)):
                budgets.check_declared(body)
                plan = make_plan()
                budgets.check(plan.cost, plan.hint)
                return answer(plan.run())

        return await self.run(work)

    @contextmanager
    def held(self) -> Iterator[None]:
        """A slot held by this (threadpool) thread for a block of synchronous work, or the 503 of ``run``."""
        if not self.try_acquire():
            if self._metrics is not None:
                self._metrics.slots_rejected.inc()
            raise self._busy()
        try:
            yield
        finally:
            self.release()

    def _busy(self) -> ProblemError:
        retry_after = max(1, math.ceil(self.wait_s))
        return ProblemError(
            503,
            f"all {self.capacity} compute slots are busy; retry after {retry_after} s, or submit a job (POST /v1/jobs)",
            headers={"Retry-After": str(retry_after)},
        )

    def _threads(self) -> ThreadPoolExecutor:
        with self._waiters_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self.capacity, thread_name_prefix="posenc-compute")
            return self._executor

    def close(self) -> None:
        """Stop the compute threads (the app's shutdown); an app started again makes new ones."""
        with self._waiters_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def _taken(self) -> None:
        if self._metrics is not None:
            self._metrics.slots_in_use.inc()


# ---------------------------------------------------------------------------------------------- body size
# The bases annotate ``headers`` differently (a dict; an optional mapping); the dict ProblemError sets is both.
class BodyTooLarge(ProblemError, StarletteHTTPException):  # type: ignore[misc]
    """A body that grew past its cap while being read (a chunked body: no Content-Length to refuse it by).

    A Starlette HTTPException, so that FastAPI's body parsing re-raises it untouched rather than answering 400;
    a ProblemError first in the method resolution order, so that the handlers render it as this problem, with
    its own limit and hint (the JSON cap or the body cap), not as a bare 413.
    """

    def __init__(self, detail: str, *, size: int, limit: int) -> None:
        StarletteHTTPException.__init__(self, status_code=413, detail=detail)
        ProblemError.__init__(self, 413, detail, size=size, limit=limit)


class BodySizeLimit:
    """Cap request bodies: a safetensors body at ``max_bytes``, any other (JSON, the one other kind a route
    reads) at the app's ``settings.max_json_body_bytes`` too. A declared Content-Length over the cap is refused
    before a byte is read, and a chunked body is counted as it arrives (Starlette's own limiter answers in
    text/plain, and every error here is problem details).

    JSON has a cap of its own because parsed JSON is several times its size in memory (a Python value per number
    until each tensor's values become an array), while a safetensors body is used as it arrived.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        limit, hint = self._cap(request)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            size = int(declared)
            detail = f"the request body is {size} bytes, over the limit of {limit} bytes; {hint}"
            await problem_response(request, 413, detail, size=size, limit=limit)(scope, receive, send)
            return
        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    detail = f"the request body is over the limit of {limit} bytes ({received} so far); {hint}"
                    raise BodyTooLarge(detail, size=received, limit=limit)
            return message

        await self.app(scope, counted_receive, send)

    def _cap(self, request: Request) -> tuple[int, str]:
        """This body's cap, and what to do above it: the JSON cap unless the body is a safetensors file."""
        if content_type(request.headers) in SAFETENSORS_TYPES:
            return self.max_bytes, BODY_HINT
        settings: Settings = request.app.state.settings
        if settings.max_json_body_bytes >= self.max_bytes:
            return self.max_bytes, BODY_HINT
        return settings.max_json_body_bytes, json_body_hint(self.max_bytes)


BODY_HINT = (
    "send large tensors as application/vnd.safetensors, generate them on the server with "
    "{'random': {'shape', 'seed'}}, or run the work as a job (POST /v1/jobs)"
)


def json_body_hint(max_bytes: int) -> str:
    """Why JSON bodies have a lower cap, and the two ways round it (the setting is named for operators)."""
    return (
        "JSON bodies are capped at max_json_body_bytes because parsed JSON takes several times its size in memory; "
        f"send large tensors in an application/vnd.safetensors body (POST /v1/rotary and /v1/attention, up to "
        f"{max_bytes} bytes) or generate them on the server with {{'random': {{'shape', 'seed'}}}}"
    )


# ------------------------------------------------------------------------------------------------ budgets
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


# ------------------------------------------------------------------------------------- keys, rate limit
api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="needed when keys are configured")

OWNER_ID_HEX_DIGITS = 32  # 128 bits of the key's SHA-256: collision-free for any number of keys in practice


@dataclass(frozen=True)
class Principal:
    """Who a request acts for: ``owner`` owns the jobs it creates; ``sees_all`` reads and cancels every job
    (admin keys, and the single tenant when no keys are configured)."""

    owner: str
    sees_all: bool = False

    @property
    def job_filter(self) -> str | None:
        """The owner whose jobs this principal may see; None for all (``JobStore.get``'s ``owner``)."""
        return None if self.sees_all else self.owner


SINGLE_TENANT = Principal(owner=ANONYMOUS, sees_all=True)


def _configured_digest(key: str) -> bytes:
    """``Settings`` holds every key as ``sha256:<hex>`` (``posenc.settings.key_digest_form``)."""
    return bytes.fromhex(key_digest_form(key).removeprefix(KEY_DIGEST_PREFIX))


def _matches(presented: bytes, digests: list[bytes]) -> bool:
    matched = False
    for digest in digests:  # no early exit: the time does not say which key (if any) matched
        matched |= secrets.compare_digest(presented, digest)
    return matched


class KeyRing:
    """The configured API keys as SHA-256 digests only: a presented key is hashed and compared, in constant
    time, with every one of them. The owner id of a key is a prefix of its digest, never the key."""

    def __init__(self, keys: list[str], admin_keys: list[str]) -> None:
        self._keys = [_configured_digest(key) for key in keys]
        self._admin_keys = [_configured_digest(key) for key in admin_keys]

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyRing:
        return cls(settings.api_keys, settings.admin_api_keys)

    @property
    def enabled(self) -> bool:
        return bool(self._keys or self._admin_keys)

    def identify(self, presented: str) -> Principal | None:
        """The principal of a presented key, or None when it is no configured key."""
        digest = hashlib.sha256(presented.encode()).digest()
        is_key, is_admin = _matches(digest, self._keys), _matches(digest, self._admin_keys)
        if not (is_key or is_admin):
            return None
        return Principal(owner=digest.hex()[:OWNER_ID_HEX_DIGITS], sees_all=is_admin)


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
            return _window_left(now, window)
        return None

    async def exhausted(self, identity: str) -> int | None:
        """Without counting: None while ``identity`` has used less than its limit this window, else the seconds
        until the window resets. Lets a caller refuse before doing the work that would be counted."""
        if self.per_minute is None:
            return None
        now = time.time()
        window = int(now // 60)
        count = await self._read_redis(identity, window) if self.redis_url else None
        if count is None:
            with self._lock:
                count = self._counts.get((identity, window), 0)
        return _window_left(now, window) if count >= self.per_minute else None

    def _count_local(self, identity: str, window: int) -> int:
        with self._lock:
            for stale in [key for key in self._counts if key[1] < window]:
                del self._counts[stale]
            self._counts[(identity, window)] = self._counts.get((identity, window), 0) + 1
            return self._counts[(identity, window)]

    def _client(self) -> Any:
        from redis.asyncio import Redis  # imported on first use: the gateway runs without Redis too

        if self._redis is None:
            assert self.redis_url is not None
            self._redis = Redis.from_url(self.redis_url, socket_timeout=1.0)
        return self._redis

    async def _count_redis(self, identity: str, window: int) -> int | None:
        key = f"posenc:ratelimit:{identity}:{window}"
        try:
            async with self._client().pipeline(transaction=True) as pipe:
                pipe.incr(key)
                pipe.expire(key, 120)  # outlives its window; the window index in the key does the reset
                count, _ = await pipe.execute()
            return int(count)
        except Exception:  # Redis down: count locally rather than fail every request
            logger.warning("rate limit: Redis unavailable, counting in memory", exc_info=True)
            return None

    async def _read_redis(self, identity: str, window: int) -> int | None:
        try:
            raw = await self._client().get(f"posenc:ratelimit:{identity}:{window}")
        except Exception:  # Redis down: fall back to the local count, as _count_redis does
            logger.warning("rate limit: Redis unavailable, reading the count in memory", exc_info=True)
            return None
        return 0 if raw is None else int(raw)

    async def close(self) -> None:
        from redis.asyncio import Redis

        if isinstance(self._redis, Redis):
            await self._redis.aclose()
            self._redis = None


def _window_left(now: float, window: int) -> int:
    return max(1, math.ceil((window + 1) * 60 - now))


def _client_address(request: Request) -> str:
    """Failed authentications are counted per address: the peer, as the ASGI server reports it."""
    return request.client.host if request.client else "unknown"


def _too_many_failures(limiter: RateLimiter, retry_after: int) -> ProblemError:
    # X-Should-Retry: false: the SDK would otherwise wait and send the same wrong key again.
    return ProblemError(
        429,
        f"more than {limiter.per_minute} failed authentications from this address this minute "
        f"(auth_failures_per_minute, POSENC_AUTH_FAILURES_PER_MINUTE); retry after {retry_after} s",
        headers={"Retry-After": str(retry_after), "X-Should-Retry": "false"},
    )


async def identify(request: Request, api_key: str | None) -> Principal:
    """The principal of a request: the single tenant without keys; else the key's, or 401. A valid key is
    looked up first and always passes (its own rate limit is ``authenticate``'s); a request without one from an
    address whose failures this minute reached ``auth_failures_per_minute`` gets 429 instead of 401, and is
    not counted again."""
    keyring: KeyRing = request.app.state.keyring
    if not keyring.enabled:
        return SINGLE_TENANT
    principal = keyring.identify(api_key) if api_key else None
    if principal is not None:
        return principal
    failures: RateLimiter = request.app.state.auth_failures
    metrics: Metrics = request.app.state.metrics
    address = _client_address(request)
    blocked = await failures.exhausted("authfail:" + address)
    if blocked is not None:
        metrics.auth_failures.labels("blocked").inc()
        raise _too_many_failures(failures, blocked)
    metrics.auth_failures.labels("missing" if not api_key else "invalid").inc()
    retry_after = await failures.retry_after("authfail:" + address)
    if retry_after is not None:
        raise _too_many_failures(failures, retry_after)
    raise ProblemError(
        401,
        "missing or invalid API key; send it in the X-API-Key header",
        headers={"WWW-Authenticate": "APIKey"},
    )


async def authenticate(request: Request, api_key: Annotated[str | None, Security(api_key_header)] = None) -> Principal:
    """Every /v1 route: 401 without a valid key (when keys are configured); 429 over the per-key rate limit.
    Returns who the request acts for (FastAPI caches it per request, so routes may depend on it again)."""
    principal = await identify(request, api_key)
    keyring: KeyRing = request.app.state.keyring
    # never the key itself, not even in Redis: the owner id is a digest prefix
    identity = "key:" + principal.owner if keyring.enabled else _client_address(request)
    limiter: RateLimiter = request.app.state.rate_limiter
    retry_after = await limiter.retry_after(identity)
    if retry_after is not None:
        raise ProblemError(
            429,
            f"more than {limiter.per_minute} requests this minute; retry after {retry_after} s",
            headers={"Retry-After": str(retry_after)},
        )
    return principal


async def require_key_unless_public(
    request: Request, api_key: Annotated[str | None, Security(api_key_header)] = None
) -> None:
    """``/metrics``: with keys configured it needs one, unless ``public_health`` opens it."""
    settings: Settings = request.app.state.settings
    if not settings.public_health:
        await identify(request, api_key)


async def health_details_allowed(
    request: Request, api_key: Annotated[str | None, Security(api_key_header)] = None
) -> bool:
    """``/readyz``: whether to show details (worker hostnames and queues, which dependency failed). Always
    without keys or with ``public_health``; with keys, to a valid key only. No key: the status code alone (a
    load balancer's probe needs no key); a wrong key: 401, counted as a failed authentication."""
    settings: Settings = request.app.state.settings
    keyring: KeyRing = request.app.state.keyring
    if settings.public_health or not keyring.enabled:
        return True
    if not api_key:
        return False
    await identify(request, api_key)
    return True
