"""Each status the gateway answers with becomes its exception class, carrying the problem details."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from posenc_client import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    Client,
    NotAcceptableError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitError,
    RetryEvent,
    ServerError,
    ServiceUnavailableError,
    ValidationError,
)

pytestmark = pytest.mark.integration
Call = Callable[..., Any]
API_KEY = "sdk-test-key"


def test_unknown_method_is_not_found(call: Call) -> None:
    with pytest.raises(NotFoundError) as caught:
        call(lambda c: c.methods.get("no_such_method"))
    error = caught.value
    assert error.status == 404
    assert error.title == "Not Found"
    assert "no_such_method" in (error.detail or "")
    assert error.problem.instance == "/v1/methods/no_such_method"
    assert b"no_such_method" in error.body
    assert isinstance(error, APIStatusError)
    assert isinstance(error, APIError)

    with pytest.raises(NotFoundError):
        call(lambda c: c.bias.compute("no_such_method", num_heads=1, query_length=2))


def test_unacceptable_media_type(call: Call) -> None:
    with pytest.raises(NotAcceptableError) as caught:
        call(lambda c: c.bias.compute("alibi", num_heads=1, query_length=2, accept="text/html"))
    assert caught.value.status == 406
    assert "application/octet-stream" in (caught.value.detail or "")


def test_output_over_budget_is_payload_too_large(call: Call) -> None:
    with pytest.raises(PayloadTooLargeError) as caught:
        call(lambda c: c.bias.compute("alibi", num_heads=64, query_length=65536))
    error = caught.value
    assert error.status == 413
    assert error.limit is not None
    assert error.size is not None
    assert error.size > error.limit
    assert "toeplitz" in (error.detail or "")


def test_invalid_fields_are_a_validation_error_naming_them(call: Call) -> None:
    with pytest.raises(ValidationError) as caught:
        call(lambda c: c.bias.compute("alibi", num_heads=0, query_length=4))
    error = caught.value
    assert error.status == 422
    assert [field.field for field in error.errors] == ["num_heads"]
    assert error.errors[0].loc == ("body", "num_heads")
    assert "num_heads" in str(error)

    with pytest.raises(ValidationError) as caught:
        call(lambda c: c.rotary.apply({"random": {"shape": [1, 1, 4, 8]}}, method="rope_yarn", rotate="query"))
    assert any(field.field.startswith("params.") for field in caught.value.errors)


# ------------------------------------------------------------------------------------------- API keys
@pytest.fixture(scope="module")
def keyed_gateway(start_compute_gateway: Any) -> Any:
    return start_compute_gateway(api_keys=[API_KEY])


def test_missing_or_wrong_key_is_an_authentication_error(call: Call, keyed_gateway: Any) -> None:
    with pytest.raises(AuthenticationError) as caught:
        call(lambda c: c.methods.list(), base_url=keyed_gateway.url)
    assert caught.value.status == 401
    assert "X-API-Key" in (caught.value.detail or "")
    with pytest.raises(AuthenticationError):
        call(lambda c: c.methods.list(), base_url=keyed_gateway.url, api_key="wrong")
    assert call(lambda c: c.methods.list(kind="rotary"), base_url=keyed_gateway.url, api_key=API_KEY)


def test_key_and_url_come_from_the_environment(keyed_gateway: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSENC_BASE_URL", keyed_gateway.url)
    monkeypatch.setenv("POSENC_API_KEY", API_KEY)
    with Client() as client:
        assert client.base_url == keyed_gateway.url
        assert client.methods.get("alibi").name == "alibi"


# ------------------------------------------------------------------------------------------ rate limits
def _wait_for_fresh_window(*, needed_s: float) -> None:
    """The limiter counts per wall-clock minute: make sure the next ``needed_s`` seconds stay in one."""
    remaining = 60 - time.time() % 60
    if remaining < needed_s:
        time.sleep(remaining + 0.05)


def test_rate_limited_key_gets_rate_limit_error(call: Call, start_compute_gateway: Any) -> None:
    limited = start_compute_gateway(api_keys=[API_KEY], rate_limit_per_minute=1)
    _wait_for_fresh_window(needed_s=5)
    call(lambda c: c.methods.get("alibi"), base_url=limited.url, api_key=API_KEY)
    with pytest.raises(RateLimitError) as caught:
        call(lambda c: c.methods.get("alibi"), base_url=limited.url, api_key=API_KEY, max_retries=0)
    error = caught.value
    assert error.status == 429
    assert error.retry_after is not None
    assert 1 <= error.retry_after <= 60
    assert error.headers["retry-after"] == str(int(error.retry_after))

    # A Retry-After longer than max_retry_after is not waited out: raised at once, no retry.
    events: list[RetryEvent] = []
    started = time.monotonic()
    with pytest.raises(RateLimitError):
        call(
            lambda c: c.methods.get("alibi"),
            base_url=limited.url,
            api_key=API_KEY,
            max_retries=2,
            max_retry_after=0.5,
            on_retry=events.append,
        )
    assert events == []
    assert time.monotonic() - started < 0.5


# ------------------------------------------------------------------------------------ saturated compute
@pytest.fixture
def saturated_gateway(start_compute_gateway: Any) -> Iterator[Any]:
    """One compute slot, no waiting for it, and the slot held by the test: every compute call is a 503."""
    gateway = start_compute_gateway(compute_concurrency=1, compute_wait_s=0)
    slots = gateway.app.state.compute_slots
    assert slots.try_acquire()
    yield gateway
    slots.release()


def test_saturated_compute_is_service_unavailable(call: Call, saturated_gateway: Any) -> None:
    with pytest.raises(ServiceUnavailableError) as caught:
        call(
            lambda c: c.bias.compute("alibi", num_heads=1, query_length=2),
            base_url=saturated_gateway.url,
            max_retries=0,
        )
    error = caught.value
    assert isinstance(error, ServerError)
    assert error.status == 503
    assert error.retry_after == 1.0
    assert "compute slots are busy" in (error.detail or "")


# --------------------------------------------------------------------------------- no answer at all
def _closed_port_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_unreachable_server_is_a_connection_error_after_retries(call: Call) -> None:
    events: list[RetryEvent] = []
    with pytest.raises(APIConnectionError) as caught:
        call(lambda c: c.methods.list(), base_url=_closed_port_url(), max_retries=2, on_retry=events.append)
    assert not isinstance(caught.value, APITimeoutError)
    assert [event.attempt for event in events] == [1, 2]
    assert all(event.status is None and event.error for event in events)
    assert 0.375 <= events[0].delay_s <= 0.5  # 0.5 s with jitter in (0.75, 1]
    assert 0.75 <= events[1].delay_s <= 1.0


def test_slow_answer_is_a_timeout(call: Call, start_compute_gateway: Any) -> None:
    gateway = start_compute_gateway(compute_concurrency=1, compute_wait_s=5)
    slots = gateway.app.state.compute_slots
    assert slots.try_acquire()  # the request now waits up to 5 s for a slot: longer than the client will
    try:
        with pytest.raises(APITimeoutError):
            call(
                lambda c: c.bias.compute("alibi", num_heads=1, query_length=2),
                base_url=gateway.url,
                timeout=0.3,
                max_retries=0,
            )
    finally:
        time.sleep(0.1)
        slots.release()
