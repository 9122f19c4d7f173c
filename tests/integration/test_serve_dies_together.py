"""``posenc serve`` killed with SIGKILL takes its Celery worker (parent and prefork children) and its private
redis-server with it within seconds, and the job that was running is not lost: the next ``posenc serve`` on the
same state directory requeues it once its lease expires and it finishes. With several gateway processes
(``--workers``), those go too."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from posenc import runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
GONE_WITHIN_S = 10.0


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (Linux /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    return parents


def _children(pid: int) -> set[int]:
    return {child for child, parent in _parents().items() if parent == pid}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _descendants(pid: int) -> set[int]:
    parents = _parents()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _wait_gone(pids: set[int], timeout: float) -> dict[int, str]:
    """The pids still running after ``timeout`` seconds, with their command lines."""
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {pid: _cmdline(pid) for pid in pids if _alive(pid)}


def _alive(pid: int) -> bool:
    """Running (a zombie has exited; only its parent's wait is missing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass(frozen=True)
class Helpers:
    """The processes one ``posenc serve`` started."""

    worker: int  # the Celery worker's parent process
    pool: frozenset[int]  # its prefork children
    redis: int

    @property
    def pids(self) -> set[int]:
        return {self.worker, self.redis, *self.pool}


class Serve:
    """One ``posenc serve`` subprocess on a fixed port and state directory."""

    def __init__(self, env: dict[str, str], port: int, state_dir: Path, log: Path, *options: str) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.log = log
        command = [sys.executable, "-m", "posenc.cli", "serve", "--port", str(port), "--state-dir", str(state_dir)]
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [*command, *options],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, probe: str = "/readyz") -> None:
        def ready() -> bool:
            assert self.process.poll() is None, self.log.read_text()
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(self.base + probe, timeout=2).status_code == 200
            return False

        assert runtime.wait_until(ready, timeout=120, interval=0.5), self.log.read_text()

    def helpers(self) -> Helpers:
        """The pids this serve started: its worker, the worker's prefork children, its redis-server."""
        children = _children(self.process.pid)
        [worker] = [pid for pid in children if "posenc.cli worker" in _cmdline(pid)]
        [redis_server] = [pid for pid in children if "redis-server" in _cmdline(pid)]
        return Helpers(worker=worker, pool=frozenset(_children(worker)), redis=redis_server)


@pytest.fixture
def serve_env(tmp_path: Path) -> dict[str, str]:
    """No POSENC_REDIS_URL (serve starts its own Redis and worker); short leases so recovery takes seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env.update(
        {
            "HOME": str(tmp_path / "home"),
            "POSENC_TORCH_THREADS": "1",
            "POSENC_DEVICE": "cpu",
            "POSENC_JOB_LEASE_TTL_S": "3",
            "POSENC_JOB_SWEEP_INTERVAL_S": "0.5",
            "POSENC_WORKER_HEARTBEAT_INTERVAL_S": "0.5",
            "POSENC_JOB_PROGRESS_INTERVAL_S": "0.1",
            "POSENC_WORKER_SOFT_SHUTDOWN_TIMEOUT_S": "2",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[int]]:
    """Pids this test started (serve and what it spawned): whatever is still alive at the end is killed."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_sigkill_of_serve_takes_worker_and_redis_along_and_loses_no_job(
    serve_env: dict[str, str], tmp_path: Path, started: list[int], jobs: Any
) -> None:
    port = runtime.free_port()
    state_dir = tmp_path / "state"
    first = Serve(serve_env, port, state_dir, tmp_path / "serve-1.log")
    started.append(first.process.pid)
    first.wait_ready()

    # A job that is mid-run when serve dies: its prefork child is busy training.
    body = {
        "kind": "train",
        "spec": {
            "methods": [{"method": "rope"}],
            "data": {"task": "copy", "size": 14},
            "model": {"layers": 1, "dim": 32, "heads": 2},
            "train": {"steps": 400, "batch_size": 8, "warmup_steps": 5, "checkpoint_every": 20},
            "eval": {"sizes": [14], "samples": 8},
            "device": "cpu",
        },
    }
    with httpx.Client(base_url=first.base, timeout=30) as client:
        job_id = client.post("/v1/jobs", json=body).json()["id"]
        jobs.wait(client, job_id, lambda job: job["status"] == "running" and job["progress"]["step"] > 0)
    helpers = first.helpers()
    pids = helpers.pids
    started.extend(pids)
    assert helpers.pool, "the worker has no prefork child"

    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(5)
    left = _wait_gone(pids, GONE_WITHIN_S)
    assert not left, f"still running {GONE_WITHIN_S} s after posenc serve was killed: {left}"

    # The same state directory again: the job's lease has expired, the new worker requeues it, it finishes.
    second = Serve(serve_env, port, state_dir, tmp_path / "serve-2.log")
    started.append(second.process.pid)
    second.wait_ready()
    started.extend(second.helpers().pids)
    with httpx.Client(base_url=second.base, timeout=30) as client:
        done = jobs.wait(client, job_id, jobs.is_terminal, timeout=240)
    assert done["status"] == "succeeded", done
    second.process.send_signal(signal.SIGTERM)
    assert second.process.wait(60) == 0, second.log.read_text()


def test_sigkill_of_serve_takes_several_gateway_processes_along(
    serve_env: dict[str, str], redis_url: str, tmp_path: Path, started: list[int]
) -> None:
    # With a Redis URL, serve runs the gateway only: here uvicorn's process manager and two gateway processes.
    serve = Serve(serve_env | {"POSENC_REDIS_URL": redis_url}, runtime.free_port(), tmp_path / "state",
                  tmp_path / "serve.log", "--workers", "2")  # fmt: skip
    started.append(serve.process.pid)
    serve.wait_ready(probe="/healthz")
    assert runtime.wait_until(lambda: len(_descendants(serve.process.pid)) >= 3, timeout=60), serve.log.read_text()
    gateways = _descendants(serve.process.pid)
    started.extend(gateways)
    assert sum("uvicorn" in _cmdline(pid) or "multiprocessing" in _cmdline(pid) for pid in gateways) >= 3

    os.kill(serve.process.pid, signal.SIGKILL)
    serve.process.wait(5)
    left = _wait_gone(gateways, GONE_WITHIN_S)
    assert not left, f"still running {GONE_WITHIN_S} s after posenc serve was killed: {left}"
    with pytest.raises(httpx.HTTPError):
        httpx.get(serve.base + "/healthz", timeout=2)
