"""What a tiny job costs beyond its own training: queue-to-done minus the training time the job reports.

Starts a fresh ``posenc serve`` (private Redis, one supervised worker, the gateway) on a free loopback port with
``POSENC_STATE_DIR`` in a temporary directory, or uses ``--base-url``. One warm-up job, then ``--jobs`` jobs one
after the other (each submitted when the previous one has ended, so none waits behind another): ``train``,
``alibi``, copy task, 1 layer, dim 32, 2 heads, length 16, 20 steps, batch 8. From each job record:

    queue-to-done  finished_at - created_at (the gateway's and the worker's clocks: the same machine)
    train          the sum of the runs' ``train_seconds`` (what the job reports as its training)
    overhead       queue-to-done - train: the wait for a process, the claim, data, evaluation, saving
    to start       started_at - created_at: the part of the overhead before the job's code runs

and prints p50 and p90 of each, and the overhead's ratio to the training time. Nothing is asserted. From the
repository root:

    .venv/bin/python bench/job_overhead.py [--jobs 20] [--base-url http://127.0.0.1:8000]
    POSENC_WORKER_PRELOAD=false .venv/bin/python bench/job_overhead.py   # each job's process imports torch
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from posenc import runtime

REPO_ROOT = Path(__file__).resolve().parents[1]
JOB = {
    "kind": "train",
    "spec": {
        "methods": [{"method": "alibi"}],
        "data": {"task": "copy"},
        "model": {"layers": 1, "dim": 32, "heads": 2},
        "train": {"length": 16, "steps": 20, "batch_size": 8, "warmup_steps": 5, "checkpoint_every": 20},
        "eval": {"lengths": [16], "samples": 64},
        "seeds": [0],
        "device": "cpu",
    },
}
TERMINAL = {"succeeded", "failed", "cancelled", "expired"}


@contextmanager
def fresh_serve() -> Iterator[str]:
    """``posenc serve`` in a temporary state directory on a free port; its base URL once it is ready."""
    with tempfile.TemporaryDirectory(prefix="posenc-overhead-") as root:
        port = runtime.free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_") or k == "POSENC_WORKER_PRELOAD"}
        env |= {"POSENC_STATE_DIR": root, "PYTHONUNBUFFERED": "1"}
        log = Path(root) / "serve.log"
        with log.open("ab") as out:
            serve = subprocess.Popen(
                [sys.executable, "-m", "posenc.cli", "serve", "--port", str(port)],
                env=env,
                cwd=REPO_ROOT,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        url = f"http://127.0.0.1:{port}"
        try:
            if not runtime.wait_until(lambda: _ready(url), timeout=120, interval=0.5):
                raise RuntimeError(f"posenc serve did not become ready:\n{log.read_text(errors='replace')[-3000:]}")
            yield url
        finally:
            runtime.terminate(serve, grace_s=30)


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def run_one(client: httpx.Client) -> dict[str, Any]:
    """Submit the job and poll until it ends; its final record."""
    created = client.post("/v1/jobs", json=JOB)
    created.raise_for_status()
    job_id = created.json()["id"]
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in TERMINAL:
            if job["status"] != "succeeded":
                raise RuntimeError(f"job {job_id} ended {job['status']}: {job.get('error')}")
            return job
        time.sleep(0.02)


def timings(job: dict[str, Any]) -> dict[str, float]:
    created, started, finished = (datetime.fromisoformat(job[k]) for k in ("created_at", "started_at", "finished_at"))
    train = sum(run["train_seconds"] for run in job["result"]["runs"])
    total = (finished - created).total_seconds()
    return {
        "queue_to_done": total,
        "train": train,
        "overhead": total - train,
        "to_start": (started - created).total_seconds(),
    }


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1] if len(values) > 1 else values[0]


def report(rows: list[dict[str, float]]) -> None:
    print(f"{len(rows)} tiny jobs, one after the other, warm worker")
    print(f"{'':16}{'p50 s':>10}{'p90 s':>10}")
    for key in ("queue_to_done", "train", "overhead", "to_start"):
        values = [row[key] for row in rows]
        print(f"{key:16}{percentile(values, 50):>10.3f}{percentile(values, 90):>10.3f}")
    ratio50 = percentile([r["overhead"] for r in rows], 50) / percentile([r["train"] for r in rows], 50)
    ratio90 = percentile([r["overhead"] for r in rows], 90) / percentile([r["train"] for r in rows], 50)
    print(f"overhead / training time (p50 train): {ratio50:.2f} at p50, {ratio90:.2f} at p90")


def measure(base_url: str, jobs: int) -> list[dict[str, float]]:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        run_one(client)  # warm-up: the worker's first child, the gateway's first request
        return [timings(run_one(client)) for _ in range(jobs)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--base-url", default=None, help="a running gateway (default: start a fresh posenc serve)")
    args = parser.parse_args()
    print(f"worker_preload: {os.environ.get('POSENC_WORKER_PRELOAD', 'default')}", flush=True)
    if args.base_url:
        report(measure(args.base_url, args.jobs))
        return 0
    with fresh_serve() as url:
        report(measure(url, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
