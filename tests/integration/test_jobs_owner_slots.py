"""A key's count of queued + running jobs (the per-key concurrency limit) against a real Redis: every way a job
can end gives its slot back, and a full owner is refused atomically, without a record being written.

The transitions are the store's own (the scripts the gateway and the workers run), called the way
``workers.tasks`` and ``workers.recovery`` call them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from posenc import runtime
from posenc.jobstore import ActiveJobsLimit, JobStore, new_job_id, record_key

pytestmark = pytest.mark.integration

OWNER = "0f" * 16
SPEC = {"methods": [{"method": "rope"}]}


def queue_one(store: JobStore, owner: str = OWNER, limit: int | None = 2) -> str:
    job_id = new_job_id()
    store.create(job_id, "train", SPEC, "cpu", owner=owner, max_active=limit)
    return job_id


def running_one(store: JobStore, max_attempts: int = 3) -> tuple[str, int]:
    job_id = queue_one(store)
    claim = store.claim(job_id, worker="w", lease_ttl_s=0.2, max_attempts=max_attempts)
    assert claim.outcome == "claimed"
    return job_id, claim.fence


def refill_and_check(store: JobStore, owner: str = OWNER) -> None:
    """The owner is back to one slot in use of two: one more fits, a further one is refused."""
    queue_one(store, owner)
    with pytest.raises(ActiveJobsLimit) as caught:
        queue_one(store, owner)
    assert (caught.value.active, caught.value.limit) == (2, 2)


def finish(store: JobStore) -> None:
    job_id, fence = running_one(store)
    assert store.finish(job_id, fence, "succeeded", result={})


def cancel_queued(store: JobStore) -> None:
    assert store.cancel(queue_one(store)) == "cancelled"


def cancel_running(store: JobStore) -> None:
    job_id, fence = running_one(store)
    assert store.cancel(job_id) == "requested"
    assert store.active_count(OWNER) == 2  # still running until the attempt stops
    assert store.finish(job_id, fence, "cancelled")


def cancel_before_claim(store: JobStore) -> None:
    """A cancel flag seen by the claim (the worker picked the message up after the cancel was asked)."""
    job_id, _ = running_one(store)
    assert store.cancel(job_id) == "requested"
    time.sleep(0.3)  # the lease expires: the worker was lost
    assert store.claim(job_id, worker="w2", lease_ttl_s=1, max_attempts=3).outcome == "terminal"


def attempts_exhausted(store: JobStore) -> None:
    job_id, _ = running_one(store, max_attempts=1)
    time.sleep(0.3)  # lost worker: its lease runs out, the sweep requeues, the next claim gives up
    assert store.requeue_if_orphaned(job_id) == "requeued"
    assert store.claim(job_id, worker="w2", lease_ttl_s=1, max_attempts=1).outcome == "exhausted"


def lost_after_cancel(store: JobStore) -> None:
    job_id, _ = running_one(store)
    assert store.cancel(job_id) == "requested"
    time.sleep(0.3)
    assert store.requeue_if_orphaned(job_id) == "cancelled"


def not_published(store: JobStore) -> None:
    store.fail_unpublished(queue_one(store), "could not be queued: the broker was unavailable")


ENDINGS: dict[str, Callable[[JobStore], None]] = {
    "finish": finish,
    "cancel while queued": cancel_queued,
    "cancel while running": cancel_running,
    "cancelled before a claim": cancel_before_claim,
    "attempts exhausted": attempts_exhausted,
    "lost after the cancel request": lost_after_cancel,
    "fail_unpublished": not_published,
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_every_ending_gives_the_slot_back(store: JobStore, ending: str) -> None:
    queue_one(store)  # one job that stays queued throughout
    ENDINGS[ending](store)
    assert store.active_count(OWNER) == 1
    refill_and_check(store)


def test_a_requeued_job_keeps_its_slot(store: JobStore) -> None:
    job_id, _ = running_one(store)
    time.sleep(0.3)
    assert store.requeue_if_orphaned(job_id) == "requeued"
    assert store.active_count(OWNER) == 1
    queue_one(store)
    with pytest.raises(ActiveJobsLimit):
        queue_one(store)


def test_an_expired_queued_job_gives_its_slot_back(redis_url: str) -> None:
    short = JobStore(redis.Redis.from_url(redis_url, decode_responses=True), ttl_s=1, tombstone_ttl_s=60)
    expiring = queue_one(short)
    queue_one(short)
    with pytest.raises(ActiveJobsLimit):
        queue_one(short)
    assert runtime.wait_until(lambda: not short.r.exists(record_key(expiring)), timeout=5, interval=0.1)
    queue_one(short)  # the expired record no longer counts
    assert short.get(expiring) is not None  # its tombstone still says 'expired'


def test_a_refused_job_writes_nothing_and_owners_are_counted_apart(store: JobStore) -> None:
    queue_one(store)
    queue_one(store)
    job_id = new_job_id()
    with pytest.raises(ActiveJobsLimit):
        store.create(job_id, "train", SPEC, "cpu", owner=OWNER, max_active=2)
    assert store.get(job_id) is None
    assert job_id not in {job.id for job in store.list_jobs()}
    other = "a1" * 16
    queue_one(store, other)
    assert (store.active_count(OWNER), store.active_count(other)) == (2, 1)
    assert {job.id for job in store.list_jobs(owner=other)} <= {job.id for job in store.list_jobs()}
    assert len(store.list_jobs(owner=OWNER)) == 2
