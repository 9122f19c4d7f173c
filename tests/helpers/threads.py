"""The real app served by uvicorn in a thread of the test process, for tests that need an HTTP address (the CLI,
the browser) but no worker processes."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from posenc.settings import Settings
from service.main import create_app


@contextmanager
def app_in_thread(settings: Settings, start_timeout_s: float = 30) -> Iterator[str]:
    """``create_app(settings)`` on a free port of 127.0.0.1 until the block ends; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(settings=settings), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        assert time.monotonic() < deadline, "the gateway did not start in time"
        assert thread.is_alive(), "the gateway stopped while starting"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
