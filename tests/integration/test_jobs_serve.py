"""The README's first command in a clean environment: ``posenc serve`` with no Redis configured and no
redis-server on PATH brings up the bundled Redis, a worker and the gateway; the README's curl job succeeds;
SIGTERM stops all of it."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from posenc import runtime

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
README_EXAMPLE = re.compile(
    r"<!-- job-curl-example:begin -->\s*```bash\n(.*?)```\s*<!-- job-curl-example:end -->", re.S
)


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (Linux /proc), found by walking parent ids."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_posenc_serve_from_a_clean_environment_runs_the_readme_job_and_stops_cleanly(tmp_path: Path, jobs: Any) -> None:
    # A PATH with the tools the README uses and no redis-server, so the bundled one must be used.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "curl", "sh"):
        found = shutil.which(tool)
        assert found, f"{tool} is needed by the README example"
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to(sys.executable)
    assert shutil.which("redis-server", path=str(bin_dir)) is None
    posenc = Path(sys.executable).with_name("posenc")
    assert posenc.exists(), "the posenc console script is not installed in this environment"

    port = runtime.free_port()
    env = {
        "PATH": str(bin_dir),
        "HOME": str(tmp_path / "home"),
        "LANG": "C.UTF-8",
        "POSENC_TORCH_THREADS": "1",
        "POSENC_WORKER_SOFT_SHUTDOWN_TIMEOUT_S": "2",
    }
    state_dir = tmp_path / "state"
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        serve = subprocess.Popen(
            [str(posenc), "serve", "--port", str(port), "--state-dir", str(state_dir)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            assert serve.poll() is None, log.read_text()
            try:
                return httpx.get(base + "/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        assert runtime.wait_until(ready, timeout=90, interval=0.5), log.read_text()
        children = _descendants(serve.pid)
        commands = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ") for pid in children}
        redis_bin = runtime.bundled_redis_server()
        assert redis_bin is not None
        assert any(cmd.startswith(str(redis_bin).encode()) for cmd in commands.values()), commands
        assert any(b"posenc.cli worker" in cmd for cmd in commands.values()), commands
        assert (state_dir / "redis" / "appendonly.aof").exists() or (state_dir / "redis" / "appendonlydir").exists()

        # The README's example, exactly as written, against this server's port.
        match = README_EXAMPLE.search((REPO / "README.md").read_text())
        assert match, "README.md has no job-curl-example block"
        script = match.group(1).replace("http://127.0.0.1:8000", base)
        ran = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env, capture_output=True, timeout=60)
        assert ran.returncode == 0, ran.stderr.decode()
        job = httpx.Response(200, content=ran.stdout).json()
        assert job["status"] in {"queued", "running"}

        with httpx.Client(base_url=base, timeout=30) as client:
            done = jobs.wait(client, job["id"], jobs.is_terminal, timeout=180)
        assert done["status"] == "succeeded", done
        assert done["result"]
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            serve.kill()
            raise
    assert serve.returncode == 0, log.read_text()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {pid for pid in children if _alive(pid)}
    assert not left, f"still running after posenc serve exited: {left}"
    with pytest.raises(httpx.HTTPError):
        httpx.get(base + "/healthz", timeout=2)
    assert os.path.getsize(log) > 0
