"""Publishing a job's message: the gateway (first publish) and the recovery sweep (re-publish) share this."""

from __future__ import annotations

from celery import Celery

from workers.names import RUN_JOB


def publish_job(app: Celery, job_id: str, queue: str, priority: int | None = None) -> None:
    """The message carries only the job id (the record has the spec); the Celery task id IS the job id,
    so a re-published job is the same task to Celery, Flower and revoke. ``priority``: see ``workers.names``
    (None: the broker's default, the highest)."""
    app.send_task(RUN_JOB, args=[job_id], task_id=job_id, queue=queue, priority=priority)
