"""Worker signal handlers: per-child torch set-up, and a recovery sweep when a worker comes up.

Imported by the worker only (``include`` in workers.app). Nothing here runs torch or CUDA in the parent:
``worker_process_init`` runs in each freshly forked child.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

from celery.signals import worker_process_init, worker_ready

from posenc.jobstore import store_from_settings
from posenc.settings import get_settings
from workers.recovery import sweep_orphaned_jobs

logger = logging.getLogger(__name__)


def available_cpus() -> int:
    """CPUs this process may use: the affinity mask, capped by a cgroup v2 CPU quota (Docker's --cpus).

    torch and OpenMP read the host's core count, not the quota, and oversubscribe (service.md §2.1).
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cpus = min(cpus, max(1, math.floor(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


def torch_threads_per_child() -> int:
    settings = get_settings()
    if settings.torch_threads:
        return settings.torch_threads
    return max(1, available_cpus() // settings.worker_concurrency)


def _set_up_child(**_: Any) -> None:
    """In the child, before any job: thread count, then torch and the training code imported while idle.

    No global seeding: each job seeds its own generators from its spec, so a run is reproducible regardless
    of what ran before in this process.
    """
    threads = torch_threads_per_child()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    try:
        import posenc.training.jobs  # noqa: F401  (warm import: the first job starts at once)
    except ImportError:
        logger.warning("posenc.training.jobs is not importable yet; jobs will fail until it is")


def _recover_on_start(sender: Any = None, **_: Any) -> None:
    """A worker that comes back after a crash requeues what the dead one was running (once leases expire;
    the periodic sweep in workers.recovery catches the ones whose lease is still counting down)."""
    app = getattr(sender, "app", None)
    if app is None:
        return
    try:
        settings = get_settings()
        requeued = sweep_orphaned_jobs(app, store_from_settings(settings), settings.job_publish_grace_s)
        if requeued:
            logger.warning("requeued %d job(s) left running by a lost worker: %s", len(requeued), requeued)
    except Exception:
        logger.exception("recovery sweep at start failed")


worker_process_init.connect(_set_up_child, weak=False)
worker_ready.connect(_recover_on_start, weak=False)
