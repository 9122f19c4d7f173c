"""A job's whole life against a real Redis, a real Celery worker and a live gateway (uvicorn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from posenc.jobstore import JobStore

pytestmark = pytest.mark.integration

# long enough (several seconds) that the gateway restart below happens while the job is still running
STEPS = 1500


def test_job_is_queued_runs_with_progress_and_succeeds_across_a_gateway_restart(
    start_gateway: Any, start_worker: Any, store: JobStore, corpus: Path, jobs: Any
) -> None:
    gateway = start_gateway()
    body = jobs.request(corpus, steps=STEPS)
    with gateway.client() as client:
        # No worker yet: the record says queued (never Celery's PENDING), with a Location and a poll hint.
        created = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "lifecycle-1"})
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        assert created.headers["location"] == f"/v1/jobs/{job_id}"
        assert created.json()["status"] == "queued"
        polled = client.get(f"/v1/jobs/{job_id}")
        assert polled.json()["status"] == "queued"
        assert polled.headers["retry-after"] == "1"

        # The same key and body return the same job; the same key with another body is refused.
        replay = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "lifecycle-1"})
        assert (replay.status_code, replay.json()["id"]) == (202, job_id)
        other = jobs.request(corpus, steps=STEPS + 1)
        conflict = client.post("/v1/jobs", json=other, headers={"Idempotency-Key": "lifecycle-1"})
        assert conflict.status_code == 422
        assert conflict.headers["content-type"].startswith("application/problem+json")
        assert "Idempotency-Key" in conflict.json()["detail"]

        start_worker()
        history: list[dict[str, Any]] = []
        jobs.wait(client, job_id, lambda j: j["status"] == "running" and j["progress"]["step"] > 0, history=history)
        first_step = history[-1]["progress"]["step"]
        assert history[-1]["started_at"] is not None
        assert history[-1]["attempts"] == 1
        # progress moves while it runs
        moved = jobs.wait(client, job_id, lambda j: j["progress"]["step"] > first_step, history=history)
        assert moved["status"] == "running", "the job finished before the gateway restart; make it longer"

    # Restart the gateway in the middle of the run: it keeps no state, so nothing is lost.
    gateway.stop()
    gateway = start_gateway()
    with gateway.client() as client:
        done = jobs.wait(client, job_id, jobs.is_terminal, history=history)
        assert done["status"] == "succeeded", done
        steps_seen = [j["progress"]["step"] for j in history if j["status"] == "running"]
        assert len(set(steps_seen)) >= 2, "progress never moved"
        assert max(steps_seen) > first_step
        assert done["progress"]["step"] == done["progress"]["total"] == STEPS
        assert done["progress"]["eta_s"] == 0.0
        assert done["result"]["resumed_from_step"] == 0
        assert done["finished_at"] >= done["started_at"] >= done["created_at"]
        assert store.events(job_id)[-1].startswith("succeeded")

        # Listing by status and kind.
        listed = client.get("/v1/jobs", params={"status": "succeeded", "kind": "train"}).json()
        assert job_id in [j["id"] for j in listed["data"]]
        assert listed["count"] == len(listed["data"])
        # a summary: its state and links, never the spec, result or artifacts (the job's own GET has those)
        (summary,) = [j for j in listed["data"] if j["id"] == job_id]
        assert not {"spec", "result", "artifacts"} & set(summary), summary
        assert summary["progress"] == done["progress"]
        assert summary["methods"] == ["rope"]
        assert {k: summary[k] for k in ("status", "attempts", "created_at", "finished_at")} == {
            k: done[k] for k in ("status", "attempts", "created_at", "finished_at")
        }
        assert client.get("/v1/jobs", params={"kind": "benchmark"}).json() == {"data": [], "count": 0}
        assert client.get("/v1/jobs", params={"status": "running"}).json()["count"] == 0

        # A finished job cannot be cancelled.
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 409

        # Artifacts: listed with links and sizes, downloadable; checkpoints are not artifacts.
        assert done["artifacts"], "the job listed no artifacts"
        assert not any(a["name"].startswith("checkpoints/") for a in done["artifacts"])
        artifact = done["artifacts"][0]
        download = client.get(artifact["url"])
        assert download.status_code == 200
        assert len(download.content) == artifact["size"]
        assert download.headers["content-type"] != ""
        for name in ("..%2F..%2F..%2Fetc%2Fpasswd", "checkpoints%2Fmodel.pt", "nope.txt"):
            refused = client.get(f"/v1/jobs/{job_id}/artifacts/{name}")
            assert refused.status_code == 404, name


def test_unknown_job_is_404_problem_and_bad_submissions_are_refused(
    start_gateway: Any, corpus: Path, jobs: Any
) -> None:
    gateway = start_gateway()
    with gateway.client() as client:
        for path in ("/v1/jobs/0123456789abcdef0123456789abcdef", "/v1/jobs/no%20such%20id"):
            missing = client.get(path)
            assert missing.status_code == 404
            assert missing.headers["content-type"].startswith("application/problem+json")
        assert client.post("/v1/jobs/0123456789abcdef/cancel").status_code == 404
        assert client.get("/v1/jobs/0123456789abcdef/artifacts/x.json").status_code == 404

        unknown_method = jobs.request(corpus, steps=10, method="no-such-method")
        assert client.post("/v1/jobs", json=unknown_method).status_code == 404

        bad_params = jobs.request(corpus, steps=10)
        bad_params["spec"]["methods"][0]["params"] = {"no_such_param": 1}
        refused = client.post("/v1/jobs", json=bad_params)
        assert refused.status_code == 422
        assert refused.json()["errors"][0]["loc"][:5] == ["body", "spec", "methods", 0, "params"]

        bad_spec = jobs.request(corpus, steps=0)
        refused = client.post("/v1/jobs", json=bad_spec)
        assert refused.status_code == 422
        assert any(e["loc"][-1] == "steps" for e in refused.json()["errors"])
        # Nothing was queued by the refused submissions.
        assert client.get("/v1/jobs").json()["count"] == 0
