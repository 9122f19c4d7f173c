"""The failed-authentication bucket (per address) and the rate-limit buckets (per key) are apart: the failures of
an address refuse its requests without a valid key, never a valid key, which only its own rate limit refuses.

Through the real app on a real Redis, with the gateway of ``test_tenancy`` (its keys and fixture); every request
of a TestClient comes from one address, as the clients behind one proxy do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from tests.integration.http.test_tenancy import A, B, away_from_the_minute_boundary
from tests.integration.http.test_tenancy import tenants as tenants  # the fixture, for this module's tests

pytestmark = pytest.mark.integration

FAILURES, PER_KEY = 20, 5


def bad(attempt: int) -> dict[str, str]:
    """No key, or a wrong one, in turn."""
    return {"X-API-Key": f"guess-{attempt}"} if attempt % 2 else {}


def test_failures_of_an_address_refuse_bad_requests_only(
    tenants: Callable[..., TestClient], wire: Any, redis_url: str
) -> None:
    client = tenants(auth_failures_per_minute=FAILURES, rate_limit_per_minute=PER_KEY)
    away_from_the_minute_boundary()
    for attempt in range(FAILURES):
        wire.problem(client.get("/v1/methods", headers=bad(attempt)), 401)
    for attempt in range(FAILURES, FAILURES + 4):  # over the limit: 429, keyless or not, right away
        blocked = client.get("/v1/methods", headers=bad(attempt))
        assert "POSENC_AUTH_FAILURES_PER_MINUTE" in wire.problem(blocked, 429)["detail"]
        assert blocked.headers["x-should-retry"] == "false"

    # The same address, the same minute: a valid key is served, up to its own limit and no further.
    for _ in range(PER_KEY):
        assert client.get("/v1/methods", headers=A).status_code == 200
    over = client.get("/v1/methods", headers=A)
    detail = wire.problem(over, 429)["detail"]
    assert f"more than {PER_KEY} requests this minute" in detail
    assert "failed authentications" not in detail
    assert 1 <= int(over.headers["retry-after"]) <= 60
    assert "x-should-retry" not in over.headers  # this one is worth retrying after the wait

    # Another key's bucket is its own; the address is still refused without a valid key, uncounted.
    assert client.get("/v1/methods", headers=B).status_code == 200
    wire.problem(client.get("/v1/methods"), 429)
    counts = redis.Redis.from_url(redis_url, decode_responses=True)
    (failures,) = counts.keys("posenc:ratelimit:authfail:*")
    assert int(counts.get(failures) or 0) == FAILURES
    assert len(counts.keys("posenc:ratelimit:key:*")) == 2

    # Counted in Redis: another gateway process sees both buckets as they are.
    other = tenants(auth_failures_per_minute=FAILURES, rate_limit_per_minute=PER_KEY)
    wire.problem(other.get("/v1/methods", headers=bad(1)), 429)
    assert "requests this minute" in wire.problem(other.get("/v1/methods", headers=A), 429)["detail"]
    assert other.get("/v1/methods", headers=B).status_code == 200
