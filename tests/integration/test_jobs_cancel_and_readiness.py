"""Cancellation (queued and running) and /readyz, against a real Redis and real workers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from posenc import runtime

pytestmark = pytest.mark.integration


def test_cancelling_a_running_job_stops_it_within_a_few_steps(
    start_gateway: Any, start_worker: Any, corpus: Path, jobs: Any
) -> None:
    start_worker()
    gateway = start_gateway()
    with gateway.client() as client:
        job_id = client.post("/v1/jobs", json=jobs.request(corpus, steps=5000)).json()["id"]
        running = jobs.wait(client, job_id, lambda j: j["progress"]["step"] >= 30)
        asked = time.monotonic()
        cancel = client.post(f"/v1/jobs/{job_id}/cancel")
        assert cancel.status_code == 202, cancel.text
        done = jobs.wait(client, job_id, jobs.is_terminal, timeout=30)
        took = time.monotonic() - asked
        assert done["status"] == "cancelled", done
        assert done["result"] is None
        assert done["finished_at"] is not None
        # The flag is polled every 0.2 s and checked every step: it stops in about a second, far from done.
        assert took < 5, f"cancel took {took:.1f} s"
        assert running["progress"]["step"] <= done["progress"]["step"] < 5000
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 409


def test_readyz_needs_redis_and_a_worker_and_a_queued_job_cancels_at_once(
    start_gateway: Any, start_worker: Any, job_env: dict[str, str], corpus: Path, jobs: Any
) -> None:
    gateway = start_gateway()
    with gateway.client() as client:
        not_ready = client.get("/readyz")
        assert not_ready.status_code == 503
        assert not_ready.headers["content-type"].startswith("application/problem+json")
        assert "workers: none alive" in not_ready.json()["detail"]

        # With no worker the job stays queued; cancelling it is immediate (200) and final.
        job_id = client.post("/v1/jobs", json=jobs.request(corpus, steps=50)).json()["id"]
        cancelled = client.post(f"/v1/jobs/{job_id}/cancel")
        assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled")

        worker = start_worker()
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["redis"] == "ok"
        assert ready.json()["workers"][0]["queues"] == ["cpu"]
        # The worker got the cancelled job's message and did not run it.
        time.sleep(1.5)
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"
        assert client.get(f"/v1/jobs/{job_id}").json()["attempts"] == 0

        worker.kill_all()  # its heartbeat stops; three missed beats (1.5 s) and it no longer counts
        assert runtime.wait_until(lambda: client.get("/readyz").status_code == 503, timeout=10)

    dead_redis = dict(job_env, POSENC_REDIS_URL=f"redis://127.0.0.1:{runtime.free_port()}/0")
    with start_gateway(dead_redis).client() as client:
        no_redis = client.get("/readyz")
        assert no_redis.status_code == 503
        assert "redis" in no_redis.json()["detail"]
