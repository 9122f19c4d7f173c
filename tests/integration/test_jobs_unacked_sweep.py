"""The recovery sweep and kombu's ``unacked`` hash, on a real Redis with real Celery messages (no worker: the
test plays the consumer, taking messages exactly as kombu's Redis transport does, BRPOP then the unacked write).

- An unacked entry of a terminal job is removed; entries of jobs still queued or running are left alone.
- A queued job whose message was taken by a consumer that died before marking it taken (the microseconds
  between kombu's unacked write and ``task_received``) is published again once the entry is older than the
  grace, and only once.
- A queued job whose message is nowhere (lost by Redis, or popped by a consumer that died before its unacked
  write) is published again once, and only it: not one waiting, taken, held, running, cancelled or unpublished.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import redis

from posenc.jobstore import KOMBU_UNACKED_INDEX_KEY, KOMBU_UNACKED_KEY, QUEUED_KEY, JobStore
from posenc.settings import Settings
from workers.app import create_app
from workers.names import QUEUE_CPU, RUN_JOB
from workers.publish import publish_job
from workers.recovery import sweep_orphaned_jobs

pytestmark = pytest.mark.integration

GRACE_S = 2.0


def _take(client: redis.Redis, taken_at: float) -> str:
    """One message off the cpu queue into the unacked hash, as kombu's consumer does; returns its tag."""
    popped = client.brpop([QUEUE_CPU], timeout=5)
    assert popped is not None, "no message on the queue"
    payload = json.loads(popped[1])
    tag = str(uuid.uuid4())
    client.hset(KOMBU_UNACKED_KEY, tag, json.dumps([payload, QUEUE_CPU, QUEUE_CPU]))
    client.zadd(KOMBU_UNACKED_INDEX_KEY, {tag: taken_at})
    return tag


def _queued_messages(client: redis.Redis) -> list[str]:
    return [json.loads(raw)["headers"]["id"] for raw in client.lrange(QUEUE_CPU, 0, -1)]


def test_the_sweep_drops_unacked_entries_of_terminal_jobs_only_and_requeues_an_unmarked_one(
    redis_url: str, store: JobStore
) -> None:
    app = create_app(Settings(redis_url=redis_url))
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    old = time.time() - 10 * GRACE_S
    tags = {}
    for job_id in ("finished", "running", "unmarked", "fresh"):
        store.create(job_id, "compute", {}, QUEUE_CPU)
        publish_job(app, job_id, QUEUE_CPU)
        store.mark_published(job_id)
        tags[job_id] = _take(client, taken_at=time.time() if job_id == "fresh" else old)
    done = store.claim("finished", worker="w", lease_ttl_s=30, max_attempts=3)
    assert store.finish("finished", done.fence, "succeeded", result={})
    assert store.claim("running", worker="w", lease_ttl_s=30, max_attempts=3).outcome == "claimed"

    requeued = sweep_orphaned_jobs(app, store, GRACE_S)

    assert requeued == ["unmarked"]
    left = store.unacked_job_ids(RUN_JOB)
    assert "finished" not in left.values()  # terminal: dropped from the hash ...
    assert client.zscore(KOMBU_UNACKED_INDEX_KEY, tags["finished"]) is None  # ... and from the index
    assert sorted(left.values()) == ["fresh", "running", "unmarked"]  # nothing else is touched
    assert _queued_messages(client) == ["unmarked"]
    assert any(e.startswith("requeued (worker lost as it took the message)") for e in store.events("unmarked"))
    # The entry predates the requeue now: later sweeps do not publish the job again.
    assert sweep_orphaned_jobs(app, store, GRACE_S) == []
    assert _queued_messages(client) == ["unmarked"]


def test_a_job_marked_taken_by_a_live_worker_is_left_to_it(redis_url: str, store: JobStore) -> None:
    app = create_app(Settings(redis_url=redis_url))
    store.create("held", "compute", {}, QUEUE_CPU)
    store.mark_taken("held", "alive-worker#1", alive_ttl_s=30)
    store.create("orphan", "compute", {}, QUEUE_CPU)
    store.mark_taken("orphan", "dead-worker#1", alive_ttl_s=0.05)
    time.sleep(0.1)  # the dead worker's liveness key expires

    assert sweep_orphaned_jobs(app, store, GRACE_S) == ["orphan"]
    assert store.taken_jobs() == {"held": "alive-worker#1"}
    # The claim takes the mark away, whatever its outcome.
    store.claim("held", worker="alive-worker", lease_ttl_s=30, max_attempts=3)
    assert store.taken_jobs() == {}


def test_a_clean_stop_gives_back_only_its_own_marks(store: JobStore) -> None:
    for job_id, instance in [("a1", "stopping#1"), ("a2", "stopping#1"), ("b1", "other#1")]:
        store.create(job_id, "compute", {}, QUEUE_CPU)
        store.mark_taken(job_id, instance, alive_ttl_s=30)
    assert store.release_taken("stopping#1") == 2
    assert store.taken_jobs() == {"b1": "other#1"}


def test_a_queued_job_whose_message_is_nowhere_is_published_again_once(redis_url: str, store: JobStore) -> None:
    """Redis killed within a second of a publish (appendfsync everysec), or a consumer killed between kombu's
    BRPOP and its unacked write: the job is queued and its message is in no queue list and no unacked entry."""
    app = create_app(Settings(redis_url=redis_url))
    client = redis.Redis.from_url(redis_url, decode_responses=True)

    def queued(job_id: str, *, publish: bool) -> None:
        store.create(job_id, "compute", {}, QUEUE_CPU)
        if publish:
            publish_job(app, job_id, QUEUE_CPU)
        store.mark_published(job_id)

    queued("taken", publish=True)
    _take(client, taken_at=time.time())  # a live consumer holds it (unacked) and marked it
    store.mark_taken("taken", "alive-worker#1", alive_ttl_s=60)
    queued("waiting", publish=True)  # its message waits in the queue
    queued("lost", publish=False)  # confirmed published, yet the message is gone
    queued("held", publish=False)
    store.mark_taken("held", "alive-worker#1", alive_ttl_s=60)  # popped by a live worker that marked it
    queued("running", publish=False)
    assert store.claim("running", worker="w", lease_ttl_s=60, max_attempts=3).outcome == "claimed"
    queued("cancelled", publish=False)
    assert store.cancel("cancelled") == "cancelled"
    store.create("unpublished", "compute", {}, QUEUE_CPU)  # its publish is pending: the unpublished step's

    assert sweep_orphaned_jobs(app, store, GRACE_S) == []  # nothing is older than the grace yet
    assert sorted(client.zrange(QUEUED_KEY, 0, -1)) == ["held", "lost", "taken", "unpublished", "waiting"]
    time.sleep(GRACE_S + 0.2)

    assert sweep_orphaned_jobs(app, store, GRACE_S) == ["lost", "unpublished"]
    assert sorted(_queued_messages(client)) == ["lost", "unpublished", "waiting"]
    assert any(e.startswith("requeued (its message was lost") for e in store.events("lost"))
    lost = store.get("lost")
    assert lost is not None
    assert lost.status == "queued"
    # Published again, the job's clock restarts: the next sweeps find its message and leave it alone.
    assert sweep_orphaned_jobs(app, store, GRACE_S) == []
    time.sleep(GRACE_S + 0.2)
    assert sweep_orphaned_jobs(app, store, GRACE_S) == []
    assert sorted(_queued_messages(client)) == ["lost", "unpublished", "waiting"]
