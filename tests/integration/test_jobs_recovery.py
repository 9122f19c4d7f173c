"""A job is never lost: kill -9 of the prefork child, or of the whole worker, mid-training.

Each time, the job still succeeds, resumed from its checkpoint (not from step 0), with exactly one result.
"""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from posenc.jobstore import JobStore

pytestmark = pytest.mark.integration

STEPS = 600
CHECKPOINT_EVERY = 20


def _check_resumed_once(done: dict[str, Any], history: list[dict[str, Any]], killed_at: int, store: JobStore) -> None:
    assert done["status"] == "succeeded", done
    assert done["attempts"] == 2
    resumed = done["result"]["resumed_from_step"]
    # Resumed from the last checkpoint before the kill: not from 0, not from beyond what had run.
    assert killed_at - CHECKPOINT_EVERY <= resumed <= killed_at + CHECKPOINT_EVERY * 2, (killed_at, resumed)
    assert resumed >= CHECKPOINT_EVERY
    after_kill = [j["progress"]["step"] for j in history if j["attempts"] == 2 and j["status"] == "running"]
    assert after_kill, "never saw the second attempt running"
    # Until the second attempt writes its first progress, the record still shows the last step attempt 1
    # wrote (which can be below its last checkpoint: writes are rate-limited). Past that stale value, a restart
    # from 0 would show steps below the resume point.
    fresh = list(itertools.dropwhile(lambda step: step == after_kill[0], after_kill))
    assert fresh, f"never saw the second attempt make progress: {after_kill}"
    assert min(fresh) >= resumed, f"training restarted from the beginning: {after_kill}"
    events = store.events(done["id"])
    assert sum(e.startswith("succeeded") for e in events) == 1, events
    assert sum(e.startswith("running attempt") for e in events) == 2, events


def test_kill_9_of_the_whole_worker_then_a_new_worker_resumes_the_job(
    start_gateway: Any, start_worker: Any, store: JobStore, corpus: Path, jobs: Any
) -> None:
    worker = start_worker()
    gateway = start_gateway()
    with gateway.client() as client:
        body = jobs.request(corpus, steps=STEPS, checkpoint_every=CHECKPOINT_EVERY)
        job_id = client.post("/v1/jobs", json=body).json()["id"]
        history: list[dict[str, Any]] = []
        running = jobs.wait(client, job_id, lambda j: j["progress"]["step"] >= 3 * CHECKPOINT_EVERY, history=history)
        worker.kill_all()  # parent and child: the message stays unacked in Redis (visibility timeout: hours)
        killed_at = running["progress"]["step"]

        start_worker()  # the recovery sweep requeues the job once its lease expires
        done = jobs.wait(client, job_id, jobs.is_terminal, timeout=120, history=history)
        _check_resumed_once(done, history, killed_at, store)
        assert any(e.startswith("requeued (lease expired)") for e in store.events(job_id))


def test_kill_9_of_the_prefork_child_requeues_at_once_and_resumes(
    start_gateway: Any, start_worker: Any, store: JobStore, corpus: Path, jobs: Any
) -> None:
    worker = start_worker()
    gateway = start_gateway()
    with gateway.client() as client:
        body = jobs.request(corpus, steps=STEPS, checkpoint_every=CHECKPOINT_EVERY)
        job_id = client.post("/v1/jobs", json=body).json()["id"]
        history: list[dict[str, Any]] = []
        running = jobs.wait(client, job_id, lambda j: j["progress"]["step"] >= 3 * CHECKPOINT_EVERY, history=history)
        children = worker.children()
        assert len(children) == 1, children
        os.kill(children[0], signal.SIGKILL)  # task_reject_on_worker_lost puts the message back at once
        killed_at = running["progress"]["step"]

        done = jobs.wait(client, job_id, jobs.is_terminal, timeout=120, history=history)
        _check_resumed_once(done, history, killed_at, store)
        assert worker.process.poll() is None, "the worker itself survived and ran the retry"


def test_a_job_whose_message_was_never_published_is_published_by_the_sweep(
    start_gateway: Any, start_worker: Any, store: JobStore, corpus: Path, jobs: Any
) -> None:
    """The gateway dies between writing the queued record and publishing its message: the job is not lost."""
    body = jobs.request(corpus, steps=20)
    store.create("unpublished-job", body["kind"], body["spec"], "cpu")  # what the gateway does first ...
    # ... and then it crashes: no message. A worker's sweep publishes it once the grace period is over.
    start_worker()
    gateway = start_gateway()
    with gateway.client() as client:
        done = jobs.wait(client, "unpublished-job", jobs.is_terminal, timeout=60)
    assert done["status"] == "succeeded", done
    assert done["attempts"] == 1
    assert store.take_unpublished(0) == []
