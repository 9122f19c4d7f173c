"""``posenc serve``'s supervisor restarts what had been healthy at once and backs off from a crash loop.

Real processes only: the ``posenc worker`` command (ready = its heartbeat in Redis), a redis-server (ready = it
answers PING), and a redis-server that cannot start (a bad argument: it exits at once, never ready).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from posenc import runtime

pytestmark = pytest.mark.integration

KILLS = 4
RESTART_WITHIN_S = 2.0


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL of the process and its children at once (a lost node, the OOM killer)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _restarted_after(supervised: runtime.SupervisedProcess, before: subprocess.Popen[bytes]) -> float:
    """Seconds until the supervisor has started a new process in place of ``before`` (which was just killed)."""
    killed_at = time.monotonic()
    assert runtime.wait_until(lambda: supervised.process is not before, timeout=40, interval=0.02)
    return time.monotonic() - killed_at


def _wait_for_readies(supervised: runtime.SupervisedProcess, count: int, timeout: float) -> None:
    """Until ``count`` of the processes started so far have become ready."""
    assert runtime.wait_until(lambda: supervised.readies == count, timeout=timeout, interval=0.05), (
        f"not ready ({count}):\n{supervised.log_path.read_text(errors='replace')[-3000:]}"
    )


def _kill_ready_process_repeatedly(supervised: runtime.SupervisedProcess, ready_timeout: float) -> list[float]:
    """Kill the supervised process ``KILLS`` times, each time once it has become ready; the restart delays."""
    delays = []
    for kill in range(KILLS):
        _wait_for_readies(supervised, kill + 1, ready_timeout)
        process = supervised.process
        assert process is not None
        _kill_group(process)
        delays.append(_restarted_after(supervised, process))
    _wait_for_readies(supervised, KILLS + 1, ready_timeout)
    return delays


def test_a_worker_killed_after_it_became_ready_is_restarted_at_once_every_time(
    job_env: dict[str, str], redis_url: str, tmp_path: Path
) -> None:
    supervised = runtime.SupervisedProcess(
        runtime.worker_command(["cpu"], 1),
        job_env,
        tmp_path / "worker.log",
        "celery worker",
        ready=runtime.worker_heartbeat_probe(redis_url),
    )
    supervised.start()
    try:
        delays = _kill_ready_process_repeatedly(supervised, ready_timeout=60)
    finally:
        supervised.stop(grace_s=5)
    assert supervised.restarts == KILLS
    assert max(delays) < RESTART_WITHIN_S, delays
    assert supervised.backoff.next == supervised.backoff.first  # nothing counted as a crash loop


def test_a_redis_server_killed_after_it_answered_ping_is_back_at_once(tmp_path: Path) -> None:
    port = runtime.free_port()
    url = f"redis://127.0.0.1:{port}/0"
    argv = [str(runtime.find_redis_server()), "--bind", "127.0.0.1", "--port", str(port), "--dir", str(tmp_path)]
    supervised = runtime.SupervisedProcess(
        argv, dict(os.environ), tmp_path / "redis.log", "redis-server", ready=runtime.redis_ping_probe(url)
    )
    supervised.start()
    try:
        delays = _kill_ready_process_repeatedly(supervised, ready_timeout=20)
        assert redis.Redis.from_url(url).ping()
    finally:
        supervised.stop(grace_s=5)
    assert max(delays) < RESTART_WITHIN_S, delays


def test_a_command_that_dies_before_it_is_ready_backs_off(tmp_path: Path) -> None:
    port = runtime.free_port()
    argv = [str(runtime.find_redis_server()), "--port", "not-a-port"]  # exits at once: never answers PING
    supervised = runtime.SupervisedProcess(
        argv,
        dict(os.environ),
        tmp_path / "redis.log",
        "redis-server",
        ready=runtime.redis_ping_probe(f"redis://127.0.0.1:{port}/0"),
    )
    started = time.monotonic()
    supervised.start()
    try:
        # Starts at about 0 s, then after 1 s and 2 s more (3 s), the next only 4 s later (7 s).
        assert runtime.wait_until(lambda: supervised.restarts == 2, timeout=10, interval=0.02)
        second_restart_at = time.monotonic() - started
        time.sleep(max(0.0, 6.0 - (time.monotonic() - started)))
        restarts_by_6s = supervised.restarts
    finally:
        supervised.stop(grace_s=5)
    assert second_restart_at >= 2.9, second_restart_at
    assert restarts_by_6s == 2
    assert supervised.readies == 0
    assert supervised.backoff.next == 8.0
