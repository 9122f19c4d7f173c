"""The Celery app. Import-light on purpose: the gateway imports it to publish, so nothing here (or in what it
imports) may import torch or touch CUDA; the worker parent loads torch separately (``workers.signals``).

Configuration is read from ``posenc.settings`` lazily (on first use of ``app.conf``), so that the ``posenc``
command can set ``POSENC_REDIS_URL`` after import and before the app is used.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from kombu.entity import Queue

from posenc.jobstore import KOMBU_PRIORITY_STEPS
from posenc.settings import Settings, get_settings
from workers import names
from workers.recovery import JobRecoveryStep

# torch.cuda.is_available() then asks NVML instead of creating a CUDA context, so a check can never poison a
# later fork (service.md §2.1). Set before any child could import torch.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")


def celery_config(settings: Settings) -> dict[str, Any]:
    """Every setting that service.md §1.4 measured to matter for long jobs on Redis."""
    if not settings.redis_url:
        raise RuntimeError("POSENC_REDIS_URL is not set; run `posenc serve` (it starts Redis) or set it")
    # An unacked message is redelivered after the visibility timeout; it must exceed the hard limit or a
    # running job is delivered again (a 13x redelivery storm was measured). Celery reads it in three places.
    visibility = {"visibility_timeout": settings.visibility_timeout_s}
    return {
        "broker_url": settings.redis_url,
        "result_backend": settings.redis_url,
        # Message priorities (workers.names): one list per step, popped highest (0) first. The steps are kombu's
        # defaults, named here because the lost-message sweep reads the same lists (posenc.jobstore).
        "broker_transport_options": visibility | {"priority_steps": list(KOMBU_PRIORITY_STEPS)},
        "result_backend_transport_options": dict(visibility),
        "visibility_timeout": settings.visibility_timeout_s,
        "broker_connection_retry_on_startup": True,
        # JSON only: pickle would be remote code execution for anyone who can write to Redis.
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_queues": (
            Queue(names.QUEUE_CPU, routing_key=names.QUEUE_CPU),  # type: ignore[no-untyped-call]
            Queue(names.QUEUE_GPU, routing_key=names.QUEUE_GPU),  # type: ignore[no-untyped-call]
        ),
        "task_default_queue": names.QUEUE_CPU,
        "task_create_missing_queues": False,  # a typo in a queue name is an error, not a queue nobody reads
        "task_routes": {names.RUN_JOB: {"queue": names.QUEUE_CPU}},
        # At-least-once: ack after the job, requeue when the child dies, reserve one message at a time.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_track_started": True,
        "task_soft_time_limit": settings.job_soft_time_limit_s,
        "task_time_limit": settings.job_time_limit_s,
        "result_expires": settings.job_ttl_s,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        # A stop gives running jobs this long, then requeues them (they resume from their checkpoint).
        "worker_soft_shutdown_timeout": settings.worker_soft_shutdown_timeout_s,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        # A fresh process per job: GPU memory and the heap are returned at exit, CUDA is only ever initialised
        # in a child. Children fork from a parent that already imported torch (workers.signals), so they start
        # in milliseconds; with worker_preload off a child imports torch itself, longer than the 4 s default.
        "worker_pool": "prefork",
        "worker_max_tasks_per_child": 1,
        "worker_concurrency": settings.worker_concurrency,
        "worker_proc_alive_timeout": 120.0,
        "include": ["workers.signals", "workers.tasks"],
    }


def create_app(settings: Settings | None = None) -> Celery:
    """The worker's app reads the process settings; the gateway builds one from its own ``Settings``."""
    celery_app = Celery("posenc")
    celery_app.add_defaults(lambda: celery_config(settings if settings is not None else get_settings()))
    celery_app.steps["worker"].add(JobRecoveryStep)
    return celery_app


app = create_app()
