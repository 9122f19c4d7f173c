"""When to retry a request and how long to wait first (pure functions; the clients do the sleeping).

Policy: retry connection errors, timeouts and the statuses in RETRYABLE_STATUSES (408, 429, 502, 503,
504), and a 409 that carries Retry-After (a job creation with the same Idempotency-Key still in progress), up
to max_retries times; X-Should-Retry: true|false from the server overrides the status rule.
Wait what the server's Retry-After (or Retry-After-Ms) says when it says something between 0 and
max_retry_after seconds; a longer hint is not waited out (the error is
raised at once, with retry_after on it). Without a hint, wait 0.5 s doubling up to 8 s, times a jitter
factor in (0.75, 1].
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

from posenc_client._constants import (
    DEFAULT_MAX_RETRIES,
    INITIAL_RETRY_DELAY_S,
    MAX_RETRY_AFTER_S,
    MAX_RETRY_DELAY_S,
    RETRYABLE_STATUSES,
)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from Retry-After-Ms, Retry-After (seconds or an HTTP date); None when absent or bad."""
    lowered = {key.lower(): value for key, value in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    max_retries: int = DEFAULT_MAX_RETRIES
    initial_delay_s: float = INITIAL_RETRY_DELAY_S
    max_delay_s: float = MAX_RETRY_DELAY_S
    max_retry_after_s: float = MAX_RETRY_AFTER_S
    retry_statuses: frozenset[int] = RETRYABLE_STATUSES

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")

    def backoff_s(self, *, retries_done: int) -> float:
        """Exponential backoff with jitter for the retry after retries_done earlier retries."""
        base = min(self.initial_delay_s * 2.0**retries_done, self.max_delay_s)
        return base * (1.0 - 0.25 * random.random())

    def delay_after_status(self, *, status: int, headers: Mapping[str, str], retries_done: int) -> float | None:
        """Seconds to wait before retrying after an error status, or None to give up and raise."""
        if retries_done >= self.max_retries:
            return None
        should_retry = {key.lower(): value for key, value in headers.items()}.get("x-should-retry")
        if should_retry == "false":
            return None
        hint = parse_retry_after(headers)
        # 409 with Retry-After: "the same Idempotency-Key is still being processed", worth coming back for.
        come_back_later = status == 409 and hint is not None
        if should_retry != "true" and status not in self.retry_statuses and not come_back_later:
            return None
        if hint is None:
            return self.backoff_s(retries_done=retries_done)
        if hint > self.max_retry_after_s:
            return None
        return hint

    def delay_after_connection_error(self, *, retries_done: int) -> float | None:
        if retries_done >= self.max_retries:
            return None
        return self.backoff_s(retries_done=retries_done)


@dataclass(frozen=True, kw_only=True)
class RetryEvent:
    """Passed to the on_retry hook before each wait: what failed, and how long until the retry."""

    method: str
    url: str
    attempt: int  # the attempt that failed, 1-based
    delay_s: float
    status: int | None  # None for a connection error or timeout
    retry_after_s: float | None  # the server's hint, if any
    error: str | None = None
