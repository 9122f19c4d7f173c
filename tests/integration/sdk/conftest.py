"""Fixtures for the SDK's end-to-end tests: real gateways over real sockets, nothing of the server mocked.

- ``start_compute_gateway(**settings)`` runs ``service.main.create_app(settings)`` under uvicorn in a thread,
  on a free loopback port; tests that need a special configuration (API keys, a rate limit, one compute
  slot) start their own, and can reach into ``app.state`` (e.g. to hold the only compute slot).
  ``compute_gateway`` is the default one (no Redis: compute routes only).
- ``job_stack`` is the job side, from the shared fixtures of tests/integration/conftest.py: a private
  redis-server, a real ``posenc worker`` (Celery) and a uvicorn gateway subprocess.
- ``call`` runs one SDK call through ``Client`` and, in the other parametrisation, through ``AsyncClient``.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from posenc_client import AsyncClient, Client

from service.main import create_app

REPO_ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent


@dataclass
class Gateway:
    url: str
    app: FastAPI


StartComputeGateway = Callable[..., Gateway]


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
def start_compute_gateway(
    _gateways: list[tuple[uvicorn.Server, threading.Thread]],
    tmp_path_factory: pytest.TempPathFactory,
    isolated_settings: Callable[..., Any],
) -> StartComputeGateway:
    def start(**overrides: Any) -> Gateway:
        overrides.setdefault("state_dir", tmp_path_factory.mktemp("gateway-state"))
        app = create_app(settings=isolated_settings(**overrides))
        url, server, thread = _serve_in_thread(app)
        _gateways.append((server, thread))
        return Gateway(url=url, app=app)

    return start


@pytest.fixture(scope="session")
def compute_gateway(start_compute_gateway: StartComputeGateway) -> Gateway:
    return start_compute_gateway()


@pytest.fixture(params=["sync", "async"])
def call(request: pytest.FixtureRequest, compute_gateway: Gateway) -> Callable[..., Any]:
    """``call(lambda client: client.bias.compute(...), **client_options)``: the same call through Client or
    AsyncClient (whose methods return coroutines, awaited here)."""

    def run(fn: Callable[[Any], Any], *, base_url: str | None = None, **options: Any) -> Any:
        url = base_url or compute_gateway.url
        if request.param == "sync":
            with Client(base_url=url, **options) as client:
                return fn(client)

        async def main() -> Any:
            async with AsyncClient(base_url=url, **options) as client:
                return await fn(client)

        return asyncio.run(main())

    return run


# ------------------------------------------------------------------------------------------- the full stack
@pytest.fixture
def job_stack(start_worker: Callable[[], Any], start_gateway: Callable[..., Any]) -> str:
    """A real Celery worker and a uvicorn gateway on this test's private Redis (shared fixtures)."""
    start_worker()
    url: str = start_gateway().url
    return url
