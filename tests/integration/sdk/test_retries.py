"""Retries and backoff against a real gateway answering 503 (a held compute slot) and 429 (a rate limit)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from posenc_client import Client, RateLimitError, RetryEvent, ServiceUnavailableError

pytestmark = pytest.mark.integration
Call = Callable[..., Any]
API_KEY = "retry-test-key"


@pytest.fixture
def one_slot_gateway(start_compute_gateway: Any) -> Any:
    return start_compute_gateway(compute_concurrency=1, compute_wait_s=0)


def test_503_is_retried_after_retry_after_until_the_slot_frees(call: Call, one_slot_gateway: Any) -> None:
    slots = one_slot_gateway.app.state.compute_slots
    assert slots.try_acquire()
    events: list[RetryEvent] = []

    def on_retry(event: RetryEvent) -> None:
        events.append(event)
        if event.attempt == 2:  # free the slot while the client waits before its third attempt
            slots.release()

    started = time.monotonic()
    result = call(
        lambda c: c.bias.compute("alibi", num_heads=2, query_length=3),
        base_url=one_slot_gateway.url,
        max_retries=3,
        on_retry=on_retry,
    )
    elapsed = time.monotonic() - started
    assert result.bias.shape == (2, 3, 3)
    assert [(event.attempt, event.status) for event in events] == [(1, 503), (2, 503)]
    assert all(event.retry_after_s == 1.0 and event.delay_s == 1.0 for event in events)  # the hint, not backoff
    assert elapsed >= 2.0


def test_503_gives_up_after_max_retries(call: Call, one_slot_gateway: Any) -> None:
    slots = one_slot_gateway.app.state.compute_slots
    assert slots.try_acquire()
    events: list[RetryEvent] = []
    started = time.monotonic()
    try:
        with pytest.raises(ServiceUnavailableError):
            call(
                lambda c: c.bias.compute("alibi", num_heads=2, query_length=3),
                base_url=one_slot_gateway.url,
                max_retries=2,
                on_retry=events.append,
            )
    finally:
        slots.release()
    assert [event.attempt for event in events] == [1, 2]  # three attempts, two waits
    assert time.monotonic() - started >= 2.0


def test_429_waits_out_retry_after_then_succeeds(start_compute_gateway: Any) -> None:
    """The limiter counts per wall-clock minute: use the last seconds of one so Retry-After is short.

    Sync client only: the decision (wait the hint) is shared code, and the async loop's waiting is covered by
    the 503 tests above; a second run would cost up to another minute.
    """
    limited = start_compute_gateway(api_keys=[API_KEY], rate_limit_per_minute=1)
    events: list[RetryEvent] = []
    with Client(base_url=limited.url, api_key=API_KEY, on_retry=events.append) as client:
        time.sleep((57.2 - time.time() % 60) % 60)  # now 57.2-60 s into the minute: Retry-After <= 3 s
        client.methods.get("alibi")  # uses up this minute
        started = time.monotonic()
        info = client.methods.get("rope")
        elapsed = time.monotonic() - started
    assert info.name == "rope"
    assert len(events) == 1
    assert events[0].status == 429
    assert events[0].retry_after_s is not None
    assert 1.0 <= events[0].retry_after_s <= 3.0
    assert events[0].delay_s == events[0].retry_after_s
    assert elapsed >= events[0].retry_after_s

    no_retries = Client(base_url=limited.url, api_key=API_KEY, max_retries=0)
    with no_retries, pytest.raises(RateLimitError):
        no_retries.methods.get("rope")  # the new minute's one request is spent too
