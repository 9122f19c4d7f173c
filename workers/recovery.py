"""Worker liveness and the recovery of jobs whose worker died.

``task_reject_on_worker_lost`` requeues a job at once when only the prefork child dies. When the whole worker
dies (kill -9, OOM of the container, power loss) its unacked message only comes back after the visibility
timeout, hours later. So every running job holds a lease that its child keeps renewing (workers.tasks);
every worker sweeps, at start and every ``job_sweep_interval_s``, for jobs still recorded ``running`` whose
lease expired, flips them back to ``queued`` (atomically: one sweeper wins) and publishes them again under the
same id. The task resumes from its checkpoint; the fencing token makes the late original delivery a no-op.
The same sweep publishes queued jobs whose message was never confirmed published ``job_publish_grace_s``
after they were queued: the gateway (or a sweeper) died between writing the record and publishing.

The same timer writes this worker's heartbeat, which ``/readyz`` reads. Both run on the worker's own timer
(the event loop of the parent process), not in a thread: the parent forks a child per job, and forking while
another thread holds a lock (a Redis connection pool's, say) could deadlock the child.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from celery import Celery, bootsteps

from posenc.jobstore import JobStore, store_from_settings
from posenc.settings import get_settings
from workers.publish import publish_job

logger = logging.getLogger(__name__)


def sweep_orphaned_jobs(app: Celery, store: JobStore, publish_grace_s: float) -> list[str]:
    """Re-publish every running job whose lease expired, and every queued job whose message was never
    published (its publisher died in between); returns their ids."""
    requeued = []
    for job_id in store.active_job_ids():
        if store.requeue_if_orphaned(job_id) != "requeued":
            continue
        queue = store.queue_of(job_id) or "cpu"
        publish_job(app, job_id, queue)
        store.mark_published(job_id)
        logger.warning("job %s: its worker was lost (lease expired); requeued on %r", job_id, queue)
        requeued.append(job_id)
    for job_id in store.take_unpublished(publish_grace_s):
        queue = store.queue_of(job_id) or "cpu"
        publish_job(app, job_id, queue)
        logger.warning("job %s: queued but never published; published on %r", job_id, queue)
        requeued.append(job_id)
    return requeued


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
            store_from_settings(get_settings()).forget_worker(worker.hostname)
        except Exception:  # Redis may be the thing that is going away
            logger.info("could not remove the heartbeat of %s", worker.hostname)

    def _beat(self, worker: Any) -> None:
        settings = get_settings()
        try:
            # Three missed beats and the worker counts as gone.
            store_from_settings(settings).beat_worker(
                worker.hostname, _consumed_queues(worker), ttl_s=3 * settings.worker_heartbeat_interval_s
            )
        except Exception:
            logger.exception("worker heartbeat failed")

    def _sweep(self, worker: Any) -> None:
        try:
            settings = get_settings()
            sweep_orphaned_jobs(worker.app, store_from_settings(settings), settings.job_publish_grace_s)
        except Exception:
            logger.exception("recovery sweep failed")
