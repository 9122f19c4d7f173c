"""Worker liveness and the recovery of jobs whose worker died.

``task_reject_on_worker_lost`` requeues a job at once when only the prefork child dies. When the whole worker
dies (kill -9, OOM of the container, power loss) its unacked message only comes back after the visibility
timeout, hours later. So every running job holds a lease that its child keeps renewing (workers.tasks);
every worker sweeps, at start and every ``job_sweep_interval_s``, for jobs still recorded ``running`` whose
lease expired, flips them back to ``queued`` (atomically: one sweeper wins) and publishes them again under the
same id. The task resumes from its checkpoint; the fencing token makes the late original delivery a no-op.
The same sweep publishes queued jobs whose message was never confirmed published ``job_publish_grace_s``
after they were queued: the gateway (or a sweeper) died between writing the record and publishing.

A job can also be stranded *before* it has a lease: the consumer (parent) has taken its message (kombu moved
it to its ``unacked`` hash, where only the visibility timeout brings it back) but the task has not claimed the
job yet, e.g. while a fresh prefork child starts. So the consumer marks the job taken by this worker instance
the moment it receives the message (``task_received``), the claim clears the mark, and the sweep requeues jobs
whose taker's liveness key expired. The same sweep removes unacked entries of terminal jobs (they could only
redeliver a finished job hours later), and requeues a job whose unacked entry is older than the grace with no
mark and no lease (its consumer died between kombu's write and the mark).

Recovery bound. A job whose worker dies is published again within, after the death:

- taken, not claimed: liveness TTL (3 x ``worker_heartbeat_interval_s``) + ``job_sweep_interval_s``
  = 3 x 5 + 15 = 30 s with the defaults;
- running or writing its result (``finish`` is one script: it committed or it did not): ``job_lease_ttl_s`` +
  ``job_sweep_interval_s`` = 30 + 15 = 45 s;
- taken, in the microseconds between kombu's unacked write and the mark: ``job_publish_grace_s`` +
  ``job_sweep_interval_s`` = 30 + 15 = 45 s;
- not taken yet: the message is still in the queue; nothing to recover;
- the message itself lost (Redis killed within a second of a publish, with ``appendfsync everysec``; or a
  consumer killed between kombu's BRPOP and its unacked write): every queued job is in ``jobs:queued``, scored
  by its last publish, and the sweep publishes again a job queued longer than ``job_publish_grace_s`` whose
  message is in no queue list and no unacked entry and that no worker holds: ``job_publish_grace_s`` +
  ``job_sweep_interval_s`` = 45 s.

A benchmark that fanned out (``posenc.jobstore``, "Benchmarks that fan out") is parked while its runs go: no
lease, nothing to recover, each run being a job of its own that the above recovers. When its last run ends,
that run's task wakes the benchmark and publishes it; if that process dies before the publish, or the message
is lost, the sweep publishes a parked benchmark whose runs have all ended, not woken yet or woken more than
``job_publish_grace_s`` ago with its message in no queue list, no unacked entry and held by no worker: within
``job_publish_grace_s`` + ``job_sweep_interval_s`` = 45 s too.

So 45 s with the defaults, whatever the visibility timeout, provided one worker of the job's queue is alive
to sweep (a worker that starts sweeps at once); then it runs as soon as such a worker is free, after that
worker's child start. Not covered: a job whose *record* Redis lost (created within the last second before Redis
was killed, with ``appendfsync everysec``): it is then unknown (404), not stranded.

Place in the queue. Every job the sweep publishes again (a requeue above, a lost or never published message) is
published one priority step above the fresh jobs of its priority (``workers.names.requeue_priority``: a short
job's 3 becomes 0, a benchmark run's 9 becomes 6; the record keeps its own). kombu's consumer pops the highest
step first, so the job is claimed before every job queued after it first was, not behind every job submitted
since: it waits only for the jobs running and for other recovered jobs of its step published before it. A
recovered benchmark run still waits behind fresh short jobs, as a fresh run does.

The same timer writes this worker's heartbeat, which ``/readyz`` reads. Both run on the worker's own timer
(the event loop of the parent process), not in a thread: the parent forks a child per job, and forking while
another thread holds a lock (a Redis connection pool's, say) could deadlock the child.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, ClassVar

from celery import Celery, bootsteps
from celery.signals import task_received

from posenc.jobstore import JobStore, store_from_settings
from posenc.settings import get_settings
from workers.names import PRIORITY_HIGH, QUEUES, RUN_JOB, requeue_priority
from workers.publish import publish_job

logger = logging.getLogger(__name__)

# One per worker process start (the children inherit it and never use it). Celery's hostname is not enough:
# a worker restarted in the same container gets the same pid, hence the same name, and must not vouch for the
# jobs its dead predecessor had taken.
_INSTANCE_TOKEN = uuid.uuid4().hex[:12]


def worker_instance(hostname: str) -> str:
    """This worker process's identity in ``jobs:taken`` and its liveness key."""
    return f"{hostname}#{_INSTANCE_TOKEN}"


def liveness_ttl_s(heartbeat_interval_s: float) -> float:
    """Three missed beats and the worker counts as gone (readiness and taken-job recovery alike)."""
    return 3 * heartbeat_interval_s


def sweep_orphaned_jobs(app: Celery, store: JobStore, publish_grace_s: float) -> list[str]:
    """Re-publish every job a dead worker left behind (see the module docstring for the four ways) and every
    queued job whose message was never published (its publisher died in between); returns their ids. Removes
    kombu's unacked entries of terminal jobs on the way."""
    requeued = []
    for job_id in store.active_job_ids():
        if store.requeue_if_orphaned(job_id) == "requeued":
            _republish(app, store, job_id, "its worker was lost (lease expired)")
            requeued.append(job_id)
    for job_id, instance in store.taken_jobs().items():
        if store.requeue_if_unclaimed(job_id, instance) == "requeued":
            _republish(app, store, job_id, f"{instance} took it and was lost before the claim")
            requeued.append(job_id)
    requeued += _settle_unacked(app, store, publish_grace_s)
    requeued += _republish_lost(app, store, publish_grace_s)
    for job_id in store.take_unpublished(publish_grace_s):
        queue, priority = store.publish_target(job_id)
        publish_job(app, job_id, queue, requeue_priority(priority))
        logger.warning("job %s: queued but never published; published on %r", job_id, queue)
        requeued.append(job_id)
    requeued += _wake_parked(app, store, publish_grace_s)
    return requeued


def _republish(app: Celery, store: JobStore, job_id: str, why: str) -> None:
    """Publish a job that a requeue script put back to ``queued`` (and into ``jobs:unpublished``: if this
    process dies before the publish, the unpublished sweep publishes it), one priority step above fresh jobs."""
    queue, priority = store.publish_target(job_id)
    publish_job(app, job_id, queue, requeue_priority(priority))
    store.mark_published(job_id)
    logger.warning("job %s: %s; requeued on %r", job_id, why, queue)


def _wake_parked(app: Celery, store: JobStore, grace_s: float) -> list[str]:
    """Publish every parked benchmark whose runs have all ended and that nobody published: not woken since it
    parked (the task of its last run died first), or woken over ``grace_s`` ago with its message nowhere (the
    waker died before its publish, or the message was lost). A message still waiting behind others is seen in
    its queue list and left alone."""
    parked = store.parked_jobs()
    cutoff = (time.time() - grace_s) * 1000
    seen: set[str] = set()
    if any(0 < woken_ms <= cutoff for woken_ms in parked.values()):
        seen = _messages_anywhere(store)
    woken = []
    for job_id, woken_ms in parked.items():
        if woken_ms and (woken_ms > cutoff or job_id in seen):
            continue
        if store.wake_parent(job_id, grace_s, PRIORITY_HIGH) == "woken":
            queue, priority = store.publish_target(job_id)
            publish_job(app, job_id, queue, priority)
            logger.warning("job %s: its runs have ended and nobody published it; published on %r", job_id, queue)
            woken.append(job_id)
    return woken


def _messages_anywhere(store: JobStore) -> set[str]:
    """Jobs with a message in a queue list, an unacked entry or a worker's taken mark. kombu moves a message
    from its queue list to ``unacked``, so unacked is read before and after the queues: a message that moves
    between two reads is still seen once."""
    seen = set(store.unacked_job_ids(RUN_JOB).values())
    for queue in QUEUES:
        seen |= store.queued_message_ids(queue, RUN_JOB)
    seen |= set(store.unacked_job_ids(RUN_JOB).values())
    return seen | set(store.taken_jobs())


def _settle_unacked(app: Celery, store: JobStore, grace_s: float) -> list[str]:
    """Walk kombu's unacked messages of posenc jobs: drop those of terminal jobs, requeue the job of one taken
    by a consumer that died before it could mark it (see ``JobStore.settle_unacked``)."""
    requeued = []
    for tag, job_id in store.unacked_job_ids(RUN_JOB).items():
        outcome = store.settle_unacked(tag, job_id, grace_s)
        if outcome == "dropped":
            logger.info("job %s: removed its stale unacked message %s (the job has ended)", job_id, tag)
        elif outcome == "requeued":
            _republish(app, store, job_id, "its message was taken by a worker that was lost before marking it")
            requeued.append(job_id)
    return requeued


def _republish_lost(app: Celery, store: JobStore, grace_s: float) -> list[str]:
    """Publish again every queued job whose message is nowhere: in no queue list, no unacked entry, and no
    worker holds the job (see ``JobStore.requeue_if_lost``). kombu moves a message from its queue list to
    ``unacked``, so unacked is read before and after the queues: a message that moves between two reads is
    still seen once. A message popped by a live consumer that has not written its unacked entry yet can be
    missed; it is then published twice, which is harmless (a job is claimed once, the fence refuses the rest)."""
    candidates = store.queued_before(grace_s)
    if not candidates:
        return []
    seen = _messages_anywhere(store)
    requeued = []
    for job_id in candidates:
        if job_id not in seen and store.requeue_if_lost(job_id, grace_s) == "requeued":
            _republish(app, store, job_id, "its message was lost (in no queue, held by no worker)")
            requeued.append(job_id)
    return requeued


def _mark_taken(sender: Any = None, request: Any = None, **_: Any) -> None:
    """``task_received``, in the consumer (the worker parent) as soon as a message is taken: from now until the
    claim, only this mark says which worker holds the job. A failure is logged, not raised: the unacked sweep
    (``job_publish_grace_s``) is the fallback."""
    if request is None or getattr(request, "name", None) != RUN_JOB:
        return
    hostname = getattr(sender, "hostname", None) or getattr(request, "hostname", None) or "worker"
    try:
        settings = get_settings()
        ttl_s = liveness_ttl_s(settings.worker_heartbeat_interval_s)
        store_from_settings(settings).mark_taken(str(request.id), worker_instance(hostname), ttl_s)
    except Exception:
        logger.exception("job %s: could not mark it taken", getattr(request, "id", "?"))


def _consumed_queues(worker: Any) -> list[str]:
    try:
        return sorted(worker.app.amqp.queues.consume_from)
    except Exception:  # the queue list is informative only
        return []


class JobRecoveryStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Heartbeat and recovery sweep on the worker's timer."""

    requires: ClassVar[set[str]] = {"celery.worker.components:Timer"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self._timers: list[Any] = []
        # Connected here, in worker processes only: the gateway imports this module too.
        task_received.connect(_mark_taken, weak=False, dispatch_uid="posenc.mark_taken")

    def start(self, worker: Any) -> None:
        settings = get_settings()
        self._beat(worker)
        self._timers = [
            worker.timer.call_repeatedly(settings.worker_heartbeat_interval_s, self._beat, (worker,), priority=10),
            worker.timer.call_repeatedly(settings.job_sweep_interval_s, self._sweep, (worker,), priority=10),
        ]

    def stop(self, worker: Any) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers = []
        try:
            store = store_from_settings(get_settings())
            store.forget_worker(worker.hostname)
            # kombu puts the messages this worker took and never started back on the queue as it closes; their
            # marks go too, or the sweep would publish each of those jobs a second time
            store.release_taken(worker_instance(worker.hostname))
        except Exception:  # Redis may be the thing that is going away; the sweep then recovers the jobs
            logger.info("could not remove the heartbeat and taken marks of %s", worker.hostname)

    def _beat(self, worker: Any) -> None:
        settings = get_settings()
        try:
            store_from_settings(settings).beat_worker(
                worker.hostname,
                _consumed_queues(worker),
                ttl_s=liveness_ttl_s(settings.worker_heartbeat_interval_s),
                instance=worker_instance(worker.hostname),
            )
        except Exception:
            logger.exception("worker heartbeat failed")

    def _sweep(self, worker: Any) -> None:
        try:
            settings = get_settings()
            sweep_orphaned_jobs(worker.app, store_from_settings(settings), settings.job_publish_grace_s)
        except Exception:
            logger.exception("recovery sweep failed")
