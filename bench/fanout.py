"""Wall time of a 12-run benchmark on one worker and on two: the runs of a benchmark fan out to any worker.

Starts its own private Redis (``posenc.runtime.start_redis``), the gateway (uvicorn) and workers (``python -m
posenc.cli worker --queues cpu --concurrency 1`` with ``POSENC_TORCH_THREADS=1``) in a temporary directory, as
the integration tests do. Each measurement submits the same benchmark as a new job: 4 methods (rope, alibi,
nope, sinusoidal) x 3 seeds of the copy task (size 8, 2 layers, dim 32, ``--steps`` steps of batch 16: a few
seconds a run on one core), and waits for it. First with one worker, then with a second one started, in one
run of the script; ``--repeats`` repeats the pair (the second worker is stopped in between).

    wall   finished_at - created_at of the benchmark's job (submission to the end of its last attempt)
    runs   the sum of the runs' own training seconds (the same work either way)

and the ratio of the two walls (two workers / one). Nothing is asserted; the target is at most 0.6.
On a machine whose cores are busy with other work the ratio says less: the load average is printed with it.
From the repository root:

    .venv/bin/python bench/fanout.py [--steps 300] [--repeats 1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from posenc import runtime
from posenc.jobstore import JobStore, connect

REPO_ROOT = Path(__file__).resolve().parents[1]
METHODS = ("rope", "alibi", "nope", "sinusoidal")
SEEDS = (0, 1, 2)
TERMINAL = {"succeeded", "failed", "cancelled", "expired"}


def benchmark(steps: int) -> dict[str, Any]:
    return {
        "kind": "benchmark",
        "spec": {
            "methods": [{"method": method} for method in METHODS],
            "data": {"task": "copy", "size": 8},
            "model": {"layers": 2, "dim": 32, "heads": 2},
            "train": {"steps": steps, "batch_size": 16, "checkpoint_every": 100},
            "eval": {"samples": 32},
            "seeds": list(SEEDS),
            "device": "cpu",
        },
    }


WARM_UP = {
    "kind": "train",
    "spec": {
        "methods": [{"method": "rope"}],
        "data": {"task": "copy", "size": 4},
        "model": {"layers": 1, "dim": 16, "heads": 2},
        "train": {"steps": 5, "batch_size": 4},
        "eval": {"samples": 4},
        "device": "cpu",
    },
}


class Stack:
    """A private Redis, the gateway and any number of workers, all children of this process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.redis = runtime.start_redis(root / "redis")
        self.store = JobStore(connect(self.redis.url), ttl_s=3600)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")} | {
            "POSENC_REDIS_URL": self.redis.url,
            "POSENC_STATE_DIR": str(root / "state"),
            "POSENC_ARTIFACT_DIR": str(root / "artifacts"),
            "POSENC_DEVICE": "cpu",
            "POSENC_TORCH_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        self.workers: list[subprocess.Popen[bytes]] = []
        self.gateway: subprocess.Popen[bytes] | None = None
        self.url = ""

    def _spawn(self, command: list[str], log: str) -> subprocess.Popen[bytes]:
        with (self.root / log).open("wb") as out:
            return subprocess.Popen(
                command, cwd=REPO_ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start_gateway(self) -> None:
        port = runtime.free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.gateway = self._spawn(
            [sys.executable, "-m", "uvicorn", "service.main:app", "--host", "127.0.0.1", "--port", str(port)],
            "gateway.log",
        )
        if not runtime.wait_until(self._healthy, timeout=60, interval=0.2):
            raise RuntimeError(f"the gateway did not start:\n{self._tail('gateway.log')}")

    def _healthy(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(self.url + "/healthz", timeout=2).status_code == 200
        return False

    def start_worker(self) -> None:
        log = f"worker-{len(self.workers)}.log"
        worker = self._spawn(
            [sys.executable, "-m", "posenc.cli", "worker", "--queues", "cpu", "--concurrency", "1"], log
        )
        self.workers.append(worker)
        up = runtime.wait_until(lambda: any(w.get("pid") == worker.pid for w in self.store.live_workers()), 90)
        if not up or worker.poll() is not None:
            raise RuntimeError(f"a worker did not start:\n{self._tail(log)}")

    def stop_worker(self) -> None:
        worker = self.workers.pop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGTERM)  # idle: a warm shutdown ends at once
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
        runtime.wait_until(lambda: all(w.get("pid") != worker.pid for w in self.store.live_workers()), 30)

    def stop(self) -> None:
        for process in [*self.workers, *([self.gateway] if self.gateway else [])]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        self.redis.stop()

    def _tail(self, log: str) -> str:
        path = self.root / log
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


@contextlib.contextmanager
def stack() -> Iterator[Stack]:
    with tempfile.TemporaryDirectory(prefix="posenc-fanout-") as root:
        running = Stack(Path(root))
        try:
            yield running
        finally:
            running.stop()


def run(client: httpx.Client, body: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """Submit the job and poll until it ends; its final record (an error unless it succeeded)."""
    created = client.post("/v1/jobs", json=body)
    created.raise_for_status()
    job_id = created.json()["id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in TERMINAL:
            if job["status"] != "succeeded":
                raise RuntimeError(f"job {job_id} ended {job['status']}: {job.get('error')}")
            return job
        time.sleep(0.1)
    raise RuntimeError(f"job {job_id} did not end within {timeout} s")


def measure(client: httpx.Client, steps: int, workers: int) -> float:
    run(client, WARM_UP)  # each worker's first job process after start-up is not the benchmark's
    load_before = os.getloadavg()[0]
    job = run(client, benchmark(steps))
    created, finished = (datetime.fromisoformat(job[key]) for key in ("created_at", "finished_at"))
    wall = (finished - created).total_seconds()
    runs = sum(entry["train_seconds"] for entry in job["result"]["runs"])
    print(
        f"{workers} worker{'s' if workers > 1 else ' '}  wall {wall:7.2f} s   runs {len(job['children']):2d}, "
        f"their training {runs:6.2f} s   load average {load_before:.2f} -> {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="training steps of each run")
    parser.add_argument("--repeats", type=int, default=1, help="pairs of measurements (one worker, two)")
    args = parser.parse_args()
    print(f"{len(METHODS)} methods x {len(SEEDS)} seeds = {len(METHODS) * len(SEEDS)} runs of {args.steps} steps; "
          f"{os.cpu_count()} CPUs", flush=True)  # fmt: skip
    ratios = []
    with stack() as running:
        running.start_gateway()
        running.start_worker()
        with httpx.Client(base_url=running.url, timeout=30) as client:
            for _ in range(args.repeats):
                one = measure(client, args.steps, 1)
                running.start_worker()
                two = measure(client, args.steps, 2)
                running.stop_worker()
                ratios.append(two / one)
                print(f"two workers / one: {two / one:.3f}", flush=True)
    if len(ratios) > 1:
        print(f"ratios: {', '.join(f'{r:.3f}' for r in ratios)}; best {min(ratios):.3f}, worst {max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
