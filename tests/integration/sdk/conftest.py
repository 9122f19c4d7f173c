"""Fixtures for the SDK's end-to-end tests: real gateways over real sockets, nothing of the server mocked.

- ``start_gateway(**settings)`` runs ``service.main.create_app(settings)`` under uvicorn in a thread, on a
  free loopback port; tests that need a special configuration (API keys, a rate limit, one compute slot)
  start their own. ``gateway`` is the default one (no Redis: compute routes only).
- ``stack`` is the whole product for the job tests: ``posenc serve`` with a private redis-server, a real
  Celery worker and the gateway, in a temporary state directory.
- ``call`` runs one SDK call through ``Client`` and, in the other parametrisation, through ``AsyncClient``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from posenc.settings import Settings
from posenc_client import AsyncClient, Client
from service.main import create_app

REPO_ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent


@dataclass
class Gateway:
    url: str
    app: FastAPI


StartGateway = Callable[..., Gateway]


def isolated_settings(**overrides: Any) -> Settings:
    """Settings from explicit values only, never the developer's POSENC_* environment."""
    defaults: dict[str, Any] = {
        "redis_url": None,
        "api_keys": [],
        "rate_limit_per_minute": None,
        "cors_origins": [],
    }
    return Settings(**(defaults | overrides))


def _serve_in_thread(app: FastAPI) -> tuple[str, uvicorn.Server, threading.Thread]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the gateway did not start")
        time.sleep(0.02)
    return f"http://127.0.0.1:{port}", server, thread


@pytest.fixture(scope="session")
def _gateways() -> Iterator[list[tuple[uvicorn.Server, threading.Thread]]]:
    running: list[tuple[uvicorn.Server, threading.Thread]] = []
    yield running
    for server, _ in running:
        server.should_exit = True
    for _, thread in running:
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def start_gateway(
    _gateways: list[tuple[uvicorn.Server, threading.Thread]], tmp_path_factory: pytest.TempPathFactory
) -> StartGateway:
    def start(**overrides: Any) -> Gateway:
        overrides.setdefault("state_dir", tmp_path_factory.mktemp("gateway-state"))
        app = create_app(settings=isolated_settings(**overrides))
        url, server, thread = _serve_in_thread(app)
        _gateways.append((server, thread))
        return Gateway(url=url, app=app)

    return start


@pytest.fixture(scope="session")
def gateway(start_gateway: StartGateway) -> Gateway:
    return start_gateway()


@pytest.fixture(params=["sync", "async"])
def call(request: pytest.FixtureRequest, gateway: Gateway) -> Callable[..., Any]:
    """``call(lambda client: client.bias.compute(...), **client_options)``: the same call through Client or
    AsyncClient (whose methods return coroutines, awaited here)."""

    def run(fn: Callable[[Any], Any], *, base_url: str | None = None, **options: Any) -> Any:
        url = base_url or gateway.url
        if request.param == "sync":
            with Client(base_url=url, **options) as client:
                return fn(client)

        async def main() -> Any:
            async with AsyncClient(base_url=url, **options) as client:
                return await fn(client)

        return asyncio.run(main())

    return run


# ------------------------------------------------------------------------------------------- the full stack
@dataclass
class Stack:
    url: str
    state_dir: Path
    process: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """``posenc serve``: private redis-server + supervised Celery worker + gateway (the README's command)."""
    state_dir = tmp_path_factory.mktemp("stack-state")
    port = _free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("POSENC_")}
    env |= {"POSENC_STATE_DIR": str(state_dir), "POSENC_DATA_DIR": str(REPO_ROOT.parent / "shared" / "data")}
    log = (state_dir / "serve.log").open("wb")
    process = subprocess.Popen(
        [str(VENV_BIN / "posenc"), "serve", "--port", str(port), "--state-dir", str(state_dir)],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not _ready(url):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"posenc serve did not become ready:\n{(state_dir / 'serve.log').read_text()}")
        time.sleep(0.5)
    try:
        yield Stack(url=url, state_dir=state_dir, process=process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
