"""No job is stranded by a dead worker: kill -9 of the whole worker (parent and prefork children) at any moment,
including after its consumer took the message and before the task claimed the job, when the job has no lease
and the message sits in kombu's ``unacked`` hash until the visibility timeout (hours).

The bound checked is the one stated in workers.recovery, with this suite's settings (conftest ``job_env``):
taken-not-claimed jobs are published again within 3 x heartbeat + sweep interval after the death.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from posenc import runtime
from posenc.jobstore import JobStore
from workers.names import RUN_JOB

pytestmark = pytest.mark.integration

HEARTBEAT_S = 0.5  # conftest job_env: POSENC_WORKER_HEARTBEAT_INTERVAL_S
SWEEP_S = 0.5  # conftest job_env: POSENC_JOB_SWEEP_INTERVAL_S
REQUEUE_BOUND_S = 3 * HEARTBEAT_S + SWEEP_S  # liveness TTL + one sweep (workers.recovery)
# From the requeue to "running" on an idle live worker: take the message, the prefork child's claim. Generous,
# for a 2-core machine shared with other work.
PICKUP_S = 8.0


def tiny_job(steps: int = 30) -> dict[str, Any]:
    """About a second of work at 30 steps: copy task up to 6 items (15 tokens), 1 layer, dim 32, 2 heads."""
    return {
        "kind": "train",
        "spec": {
            "methods": [{"method": "alibi"}],
            "data": {"task": "copy", "size": 6},
            "model": {"layers": 1, "dim": 32, "heads": 2},
            "train": {"steps": steps, "batch_size": 8, "warmup_steps": 2, "checkpoint_every": 10},
            "eval": {"sizes": [6], "samples": 8},
            "device": "cpu",
        },
    }


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    assert runtime.wait_until(predicate, timeout=timeout, interval=0.05), f"timed out waiting for {what}"


def _status(store: JobStore, job_id: str) -> str:
    job = store.get(job_id)
    return job.status if job is not None else "missing"


def _check_committed_once(store: JobStore, job_id: str) -> list[str]:
    """Succeeded, with exactly one terminal write among its events; returns the events."""
    job = store.get(job_id)
    assert job is not None
    events = store.events(job_id)
    assert job.status == "succeeded", (job.status, job.error, events)
    finishes = [e for e in events if e.split(" ")[0].split("|")[0] in {"succeeded", "failed", "cancelled"}]
    assert len(finishes) == 1, events
    return events


def test_a_worker_killed_after_taking_the_message_and_before_the_claim_loses_nothing(
    start_gateway: Any, start_worker: Any, store: JobStore
) -> None:
    # Worker A's task sleeps before its claim (test-only setting): the job is taken, has no lease, and its
    # message is in kombu's unacked hash with a visibility timeout of hours.
    taker = start_worker({"POSENC_TEST_PAUSE_BEFORE_CLAIM_S": "60"})
    gateway = start_gateway()
    with gateway.client() as client:
        job_id = client.post("/v1/jobs", json=tiny_job()).json()["id"]
    _wait(lambda: store.taken_by(job_id) is not None, 30, "the job to be marked taken")
    assert f"-{taker.pid}@" in (store.taken_by(job_id) or ""), store.taken_by(job_id)
    assert _status(store, job_id) == "queued"  # not claimed: no lease for the lease sweep to find
    assert job_id in store.unacked_job_ids(RUN_JOB).values()

    rescuer = start_worker()  # idle and ready before the kill, so the timing below is recovery, not start-up
    assert _status(store, job_id) == "queued"
    assert store.taken_by(job_id) is not None
    killed_at = time.monotonic()
    taker.kill_all()

    _wait(lambda: _status(store, job_id) != "queued", REQUEUE_BOUND_S + PICKUP_S, "the job to run again")
    running_after_s = time.monotonic() - killed_at
    _wait(lambda: _status(store, job_id) in {"succeeded", "failed", "cancelled"}, 60, "the job to end")

    events = _check_committed_once(store, job_id)
    job = store.get(job_id)
    assert job is not None
    assert job.attempts == 1, events  # the dead worker never claimed it
    requeues = [e for e in events if e.startswith("requeued (worker lost before the claim")]
    assert len(requeues) == 1, events
    assert sum(e.startswith("running attempt 1 ") for e in events) == 1, events
    assert any(f"-{rescuer.pid}@" in e for e in events if e.startswith("running attempt")), events
    assert running_after_s < REQUEUE_BOUND_S + PICKUP_S, running_after_s
    print(f"running again {running_after_s:.2f} s after the kill (requeue bound {REQUEUE_BOUND_S} s)")
    # The dead worker's message of the finished job is removed from kombu's unacked hash, not left to come back.
    _wait(lambda: job_id not in store.unacked_job_ids(RUN_JOB).values(), 10, "the stale unacked entry to go")
    assert store.taken_jobs() == {}


JOBS = 24
# Jobs long enough that the kills land while they drain, however fast a warm worker starts them.
DRILL_STEPS = 400
KILL_EVERY_S = 2.5
KILLS = 8


@pytest.mark.slow
def test_repeated_kill_9_of_whole_workers_while_jobs_drain_loses_and_repeats_nothing(
    start_gateway: Any, start_worker: Any, store: JobStore
) -> None:
    """Two workers share the queue; every few seconds the older one is killed (parent and children) and a new
    one started, while 24 tiny jobs drain. Attempts are not capped here (the cap is for jobs that kill their
    worker; these are killed from outside, up to several times each)."""
    env = {"POSENC_JOB_MAX_ATTEMPTS": "100"}
    workers = [start_worker(env), start_worker(env)]
    gateway = start_gateway()
    with gateway.client() as client:
        job_ids = [client.post("/v1/jobs", json=tiny_job(DRILL_STEPS)).json()["id"] for _ in range(JOBS)]

    def all_ended() -> bool:
        return all(_status(store, job_id) not in {"queued", "running"} for job_id in job_ids)

    started_at = time.monotonic()
    kills = 0
    while kills < KILLS and not all_ended():
        time.sleep(KILL_EVERY_S)
        workers.pop(0).kill_all()
        kills += 1
        workers.append(start_worker(env))
    _wait(all_ended, 120, "every job to end")
    drained_s = time.monotonic() - started_at

    statuses = {job_id: _status(store, job_id) for job_id in job_ids}
    assert set(statuses.values()) == {"succeeded"}, statuses
    for job_id in job_ids:
        _check_committed_once(store, job_id)
    requeues = [e.split("|")[0] for j in job_ids for e in store.events(j) if e.startswith("requeued")]
    recovered = [j for j in job_ids if any(e.startswith("requeued") for e in store.events(j))]
    attempts = sorted(job.attempts for j in job_ids if (job := store.get(j)) is not None)
    print(f"{kills} kills, drained in {drained_s:.0f} s; attempts {attempts}; requeues: {sorted(requeues)}")
    assert kills >= 3, f"only {kills} kills in {drained_s:.0f} s: the drill did not happen"
    assert recovered, "no kill hit a job: the drill tested nothing"
    _wait(lambda: not set(job_ids) & set(store.unacked_job_ids(RUN_JOB).values()), 10, "stale unacked entries")
    assert store.taken_jobs() == {}
