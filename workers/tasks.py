"""The one task: run a job from its Redis record and persist the outcome. Thin on purpose: training kinds go
to ``posenc.training.jobs.run_job``, kind ``compute`` to ``posenc.compute.run_compute_job``.

At-least-once delivery means this task may run more than once for a job (a requeue after a lost child, a sweep
re-publish after a lost worker, a late redelivery after the visibility timeout). What keeps that safe:

- a terminal job is never run again (exactly one result);
- each run *claims* the job and gets a fencing token; every write it makes carries the token and is refused
  once a newer claim exists, so a zombie cannot overwrite a newer attempt;
- training resumes from ``<artifact_dir>/<job_id>/checkpoints``, so a rerun continues where the last stopped;
  a compute job that finds its ``result.json`` returns it.

Module import stays torch-free because the gateway side of Celery never needs torch; the worker parent loads
torch and the job code itself before the pool forks (``workers.signals``, ``worker_preload``) and runs no torch
operation, so each job's fresh child starts with them imported. ``run_job`` and ``run_compute_job`` are
imported where they are called.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError
from redis.exceptions import RedisError

from posenc.jobstore import Claim, JobStore, list_artifacts, store_from_settings
from posenc.schemas.jobs import ComputeJobSpec, JobKind, JobProgress, JobSpec
from posenc.settings import Settings, get_settings
from posenc.training.hooks import JobCancelled, Progress
from workers.app import app
from workers.names import RUN_JOB
from workers.signals import torch_threads_per_child

logger = logging.getLogger(__name__)

CANCEL_POLL_INTERVAL_S = 0.2  # how stale the cancel flag may be: a handful of training steps at most


def resolve_device(requested: str, configured: str) -> str:
    """``auto`` means CUDA when this process can see a GPU. Only ever called in the child."""
    device = configured if requested == "auto" else requested
    if device != "auto":
        return device
    import torch  # NVML-based check (PYTORCH_NVML_BASED_CUDA_CHECK=1, set in workers.app): no CUDA context

    return "cuda" if torch.cuda.is_available() else "cpu"


class LeaseKeeper(threading.Thread):
    """Renews this attempt's lease and watches the cancel flag, off the training thread.

    A training step must not wait on Redis, and the lease must outlive long steps (evaluation at 8L).
    """

    def __init__(self, store: JobStore, job_id: str, fence: int, lease_ttl_s: float) -> None:
        super().__init__(name=f"lease-{job_id}", daemon=True)
        self.store, self.job_id, self.fence, self.lease_ttl_s = store, job_id, fence, lease_ttl_s
        self.cancel_requested = threading.Event()
        self.superseded = threading.Event()
        self._stop_event = threading.Event()

    def run(self) -> None:
        renew_every = self.lease_ttl_s / 3
        last_renewal = time.monotonic()
        while not self._stop_event.wait(CANCEL_POLL_INTERVAL_S):
            try:
                if self.store.cancel_requested(self.job_id):
                    self.cancel_requested.set()
                if time.monotonic() - last_renewal >= renew_every:
                    if not self.store.renew_lease(self.job_id, self.fence, self.lease_ttl_s):
                        logger.warning("job %s: lease lost to a newer attempt; stopping", self.job_id)
                        self.superseded.set()
                        return
                    last_renewal = time.monotonic()
            except RedisError:
                logger.exception("job %s: lease renewal failed; retrying", self.job_id)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


class AttemptHooks:
    """``JobHooks`` for one attempt: rate-limited progress writes with an ETA, cancel from the keeper."""

    def __init__(self, store: JobStore, job_id: str, fence: int, keeper: LeaseKeeper, interval_s: float) -> None:
        self.store, self.job_id, self.fence, self.keeper = store, job_id, fence, keeper
        self.interval_s = interval_s
        self.first_step: int | None = None
        self.last: JobProgress | None = None
        self._started = 0.0
        self._last_write = float("-inf")

    def progress(self, progress: Progress) -> None:
        now = time.monotonic()
        if self.first_step is None:
            self.first_step, self._started = progress.step, now
        done_here = progress.step - self.first_step
        eta = None
        if done_here > 0 and progress.total >= progress.step:
            eta = round((progress.total - progress.step) * (now - self._started) / done_here, 1)
        self.last = JobProgress(
            step=progress.step, total=progress.total, loss=progress.loss, eta_s=eta, stage=progress.stage
        )
        if now - self._last_write >= self.interval_s:
            self._last_write = now
            try:
                self.store.write_progress(self.job_id, self.fence, self.last)
            except RedisError:  # progress is advisory; the job must not fail because one write did
                logger.exception("job %s: progress write failed", self.job_id)

    def should_cancel(self) -> bool:
        return self.keeper.cancel_requested.is_set() or self.keeper.superseded.is_set()

    @property
    def resumed_from_step(self) -> int:
        """Steps already done when this attempt started (0 for a fresh run; >0 after a resume)."""
        return max((self.first_step or 1) - 1, 0)


def _claim(store: JobStore, job_id: str, worker: str, settings: Settings) -> Claim:
    """Claim the job, waiting out the lease of an attempt whose process just died.

    After a child is killed its message comes back at once, while the dead child's lease still counts down. If
    the lease is still held after two TTLs, the holder is alive: this delivery is a duplicate and is dropped.
    """
    deadline = time.monotonic() + 2 * settings.job_lease_ttl_s + 1
    while True:
        claim = store.claim(
            job_id,
            worker=worker,
            lease_ttl_s=settings.job_lease_ttl_s,
            max_attempts=settings.job_max_attempts,
        )
        if claim.outcome != "busy" or time.monotonic() > deadline:
            return claim
        time.sleep(min(0.5, settings.job_lease_ttl_s / 4))


@app.task(name=RUN_JOB, bind=True, autoretry_for=(RedisError,), retry_backoff=True, max_retries=5)  # type: ignore[untyped-decorator]
def run_job_task(self: Task, job_id: str) -> dict[str, Any]:
    settings = get_settings()
    store = store_from_settings(settings)
    if settings.test_pause_before_claim_s:  # test-only: makes "taken, not claimed yet" a moment a test can hit
        time.sleep(settings.test_pause_before_claim_s)
    claim = _claim(store, job_id, self.request.hostname or "worker", settings)
    if claim.outcome != "claimed":
        logger.info("job %s: not run (%s %s)", job_id, claim.outcome, claim.status or "")
        return {"job_id": job_id, "outcome": claim.outcome}

    job = store.get(job_id)
    assert job is not None  # just claimed
    artifact_root = settings.resolved_artifact_dir
    job_dir = artifact_root / job_id
    keeper = LeaseKeeper(store, job_id, claim.fence, settings.job_lease_ttl_s)
    hooks = AttemptHooks(store, job_id, claim.fence, keeper, settings.job_progress_interval_s)
    keeper.start()
    try:
        status, fields = _run(job.kind, job.spec, job_dir, artifact_root, hooks, settings)
    finally:
        keeper.stop()
    if keeper.superseded.is_set():
        return {"job_id": job_id, "outcome": "superseded"}
    written = store.finish(
        job_id, claim.fence, status, progress=hooks.last, artifacts=list_artifacts(job_dir), **fields
    )
    if not written:
        logger.warning("job %s: a newer attempt owns the job; outcome %s discarded", job_id, status)
        return {"job_id": job_id, "outcome": "superseded"}
    return {"job_id": job_id, "outcome": status}


def _run(
    kind: JobKind,
    raw_spec: dict[str, Any],
    job_dir: Path,
    artifact_root: Path,
    hooks: AttemptHooks,
    settings: Settings,
) -> tuple[Any, dict[str, Any]]:
    """(status, finish fields). Every exception becomes a failed job: deterministic errors are not retried;
    a lost worker (which raises nothing here) is what redelivery and the attempt cap are for."""
    try:
        job_dir.mkdir(parents=True, exist_ok=True)
        if kind == "compute":
            result = _run_compute(ComputeJobSpec.model_validate(raw_spec), job_dir, hooks, settings)
        else:
            spec = JobSpec.model_validate(raw_spec)
            from posenc.training.jobs import run_job

            result = run_job(
                kind,
                spec,
                job_dir=job_dir,
                artifact_root=artifact_root,
                hooks=hooks,
                device=resolve_device(spec.device, settings.device),
                data_dir=settings.data_dir,
                threads=torch_threads_per_child(),
            )
            result = dict(result)
            result.setdefault("resumed_from_step", hooks.resumed_from_step)
    except JobCancelled:
        return "cancelled", {}
    except SoftTimeLimitExceeded:
        return "failed", {"error": f"time limit of {settings.job_soft_time_limit_s} s exceeded"}
    except ValidationError as exc:
        return "failed", {"error": f"invalid spec: {exc}"}
    except Exception as exc:
        logger.exception("job failed")
        return "failed", {"error": f"{type(exc).__name__}: {exc}"}
    if hooks.last is not None:
        hooks.last = hooks.last.model_copy(update={"eta_s": 0.0})
    return "succeeded", {"result": result}


def _run_compute(spec: ComputeJobSpec, job_dir: Path, hooks: AttemptHooks, settings: Settings) -> dict[str, Any]:
    """One step: the request of ``POST /v1/{route}``, its tensors to ``tensors.safetensors`` (on the CPU)."""
    from posenc.compute import run_compute_job

    stage = f"compute {spec.route}"
    hooks.progress(Progress(step=0, total=1, stage=stage))
    if hooks.should_cancel():
        raise JobCancelled("cancelled before the compute started")
    result = run_compute_job(spec, job_dir=job_dir, max_bytes=settings.max_job_output_bytes)
    hooks.progress(Progress(step=1, total=1, stage=stage))
    return result
