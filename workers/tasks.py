"""The one task: run a job from its Redis record and persist the outcome. Thin on purpose: training kinds go
to ``posenc.training.jobs.run_job``, kind ``compute`` to ``posenc.compute.run_compute_job``, and a benchmark of
several runs fans out (``posenc.training.fanout``; the job store's "Benchmarks that fan out"): its first attempt
creates one child job per run, publishes them and parks; each child runs its run; the child that ends last
publishes the benchmark again, whose attempt then puts the runs together.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError
from redis.exceptions import RedisError

from posenc.jobstore import Claim, JobStore, list_artifacts, store_from_settings
from posenc.schemas.jobs import ComputeJobSpec, Job, JobCreate, JobKind, JobProgress, JobSpec
from posenc.settings import Settings, get_settings
from posenc.training.hooks import JobCancelled, Progress
from workers.app import app
from workers.names import PRIORITY_HIGH, PRIORITY_LOW, RUN_JOB
from workers.publish import publish_job
from workers.signals import mark_attempt_ended, time_before_task, torch_threads_per_child

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
        self.inside_seconds: float | None = None  # the work's own time, once a fresh attempt has measured it

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

    def note(self, message: str) -> None:
        try:
            self.store.note(self.job_id, message)
        except RedisError:  # advisory, like progress
            logger.exception("job %s: event write failed", self.job_id)

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


Status = Literal["succeeded", "failed", "cancelled"]
Outcome = tuple[Status, dict[str, Any]]  # a terminal status and the rest of its finish write


@app.task(name=RUN_JOB, bind=True, autoretry_for=(RedisError,), retry_backoff=True, max_retries=5)  # type: ignore[untyped-decorator]
def run_job_task(self: Task, job_id: str) -> dict[str, Any]:
    try:
        return _run_job_task(self, job_id, began=time.monotonic())
    finally:
        mark_attempt_ended()  # where the attempt did not mark it already (not claimed, parked, failed early)


def _run_job_task(self: Task, job_id: str, *, began: float) -> dict[str, Any]:
    settings = get_settings()
    store = store_from_settings(settings)
    if settings.test_pause_before_claim_s:  # test-only: makes "taken, not claimed yet" a moment a test can hit
        time.sleep(settings.test_pause_before_claim_s)
    claim = _claim(store, job_id, self.request.hostname or "worker", settings)
    if claim.outcome != "claimed":
        logger.info("job %s: not run (%s %s)", job_id, claim.outcome, claim.status or "")
        _run_ended(store, job_id, settings)  # a run that ended without running here may be its benchmark's last
        return {"job_id": job_id, "outcome": claim.outcome}

    job = store.get(job_id)
    assert job is not None  # just claimed
    artifact_root = settings.resolved_artifact_dir
    if job.parent is not None:
        job_dir = artifact_root / job.parent
        outcome = _attempt(
            store,
            job,
            claim.fence,
            settings,
            lambda hooks: _run_child(store, job, job_dir, hooks, settings),
            began=began,
        )
        _run_ended(store, job_id, settings)
        return outcome
    job_dir = artifact_root / job_id
    if job.kind == "benchmark":
        fanned_out = _fan_out(store, job, claim.fence, job_dir, settings)
        if fanned_out is not None:
            return fanned_out
    return _attempt(
        store,
        job,
        claim.fence,
        settings,
        lambda hooks: _run(job.kind, job.spec, job_dir, artifact_root, hooks, settings, rates=(store, job.queue)),
        job_dir=job_dir,
        began=began,
    )


def _attempt(
    store: JobStore,
    job: Job,
    fence: int,
    settings: Settings,
    run: Callable[[AttemptHooks], Outcome],
    *,
    job_dir: Path | None = None,
    began: float | None = None,
) -> dict[str, Any]:
    """One claimed attempt: ``run`` under a lease keeper, then the job's one terminal write (refused if a newer
    attempt owns the job). ``job_dir``: where the artifacts to list are (none without). ``began``: the monotonic
    time the task began in this process; a fresh attempt whose run measured its own time (``hooks.inside_seconds``)
    folds the rest (the process's start-up, ``workers.signals.time_before_task``, the claim, the result and the
    terminal write) into its queue's measured overhead per process."""
    keeper = LeaseKeeper(store, job.id, fence, settings.job_lease_ttl_s)
    hooks = AttemptHooks(store, job.id, fence, keeper, settings.job_progress_interval_s)
    keeper.start()
    try:
        status, fields = run(hooks)
    finally:
        keeper.stop()
    if keeper.superseded.is_set():
        return {"job_id": job.id, "outcome": "superseded"}
    if status == "succeeded" and hooks.last is not None:
        hooks.last = hooks.last.model_copy(update={"eta_s": 0.0})
    artifacts = list_artifacts(job_dir) if job_dir is not None else []
    written = store.finish(job.id, fence, status, progress=hooks.last, artifacts=artifacts, **fields)
    if not written:
        logger.warning("job %s: a newer attempt owns the job; outcome %s discarded", job.id, status)
        return {"job_id": job.id, "outcome": "superseded"}
    if status == "succeeded" and began is not None and hooks.inside_seconds is not None:
        outside = time_before_task() + time.monotonic() - began - hooks.inside_seconds
        _record_overhead(store, job.queue, outside)
    mark_attempt_ended()
    return {"job_id": job.id, "outcome": status}


def _guarded(settings: Settings, run: Callable[[], dict[str, Any]]) -> Outcome:
    """(status, finish fields) of ``run``'s result. Every exception becomes a failed job: deterministic errors
    are not retried; a lost worker (which raises nothing here) is what redelivery and the attempt cap are for."""
    try:
        result = run()
    except JobCancelled:
        return "cancelled", {}
    except SoftTimeLimitExceeded:
        return "failed", {"error": f"time limit of {settings.job_soft_time_limit_s} s exceeded"}
    except ValidationError as exc:
        return "failed", {"error": f"invalid spec: {exc}"}
    except Exception as exc:
        logger.exception("job failed")
        return "failed", {"error": f"{type(exc).__name__}: {exc}"}
    return "succeeded", {"result": result}


def _run(
    kind: JobKind,
    raw_spec: dict[str, Any],
    job_dir: Path,
    artifact_root: Path,
    hooks: AttemptHooks,
    settings: Settings,
    *,
    rates: tuple[JobStore, str],
) -> Outcome:
    """A whole job in this process (every kind; a benchmark of one run)."""

    def run() -> dict[str, Any]:
        job_dir.mkdir(parents=True, exist_ok=True)
        if kind == "compute":
            return _run_compute(ComputeJobSpec.model_validate(raw_spec), job_dir, hooks, settings)
        spec = JobSpec.model_validate(raw_spec)
        from posenc.training.jobs import run_job

        started = time.monotonic()
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
        took = time.monotonic() - started
        _record_rate(*rates, JobCreate(kind=kind, spec=spec), took, hooks, compiling=_compile_seconds(result))
        return result

    return _guarded(settings, run)


def _compile_seconds(result: dict[str, Any]) -> float:
    """Seconds a job's runs spent on their first compiled step (``train.compile``): the estimates count compiles
    apart (``posenc.job_estimates.COMPILE_S``), so the measured speed leaves them out."""
    total = 0.0
    for run in result.get("runs") or []:
        report = run.get("compile") if isinstance(run, dict) else None
        if isinstance(report, dict) and report.get("first_step_s") is not None:
            total += float(report["first_step_s"])
    return total


def _record_rate(
    store: JobStore, queue: str, work: JobCreate, seconds: float, hooks: AttemptHooks, *, compiling: float = 0.0
) -> None:
    """A fresh attempt that ran its whole work measured how fast its queue runs work of its kind: the factor
    of its time over the defaults' (``posenc.job_estimates.measured_speed``) is folded into the moving average
    of (queue, task family, attention path) that new jobs' ``estimate_s`` are scaled by. A resumed attempt did
    part of the work, and a run with ``train.until`` may stop before the cap its estimate counts: they measure
    nothing."""
    spec = work.spec
    if hooks.resumed_from_step > 0 or seconds <= 0 or (isinstance(spec, JobSpec) and spec.train.until is not None):
        return
    from posenc.job_estimates import measured_speed, speed_key

    measured = measured_speed(work, seconds - compiling)
    if measured is None:
        return
    family, path, speed = measured
    hooks.inside_seconds = seconds
    try:
        store.record_throughput(speed_key(queue, family, path), speed)
    except RedisError:  # advisory, like progress
        logger.exception("speed write failed")


def _record_overhead(store: JobStore, queue: str, seconds: float) -> None:
    """Fold one attempt's time outside its measured work (its process's start-up, the claim, imports on first
    use, result and terminal writes) into the moving average of ``queue``'s seconds per process
    (``posenc.job_estimates.overhead_key``), which new jobs' estimates count once per process in place of the
    default."""
    from posenc.job_estimates import overhead_key

    try:
        store.record_throughput(overhead_key(queue), max(seconds, 1e-3))
    except RedisError:  # advisory, like progress
        logger.exception("overhead write failed")


# ------------------------------------------------------------------------------------------ benchmarks that fan out
def _fan_out(store: JobStore, job: Job, fence: int, job_dir: Path, settings: Settings) -> dict[str, Any] | None:
    """A benchmark of several runs: park it (its first attempt creates and publishes one child job per run) or,
    once every run has ended, put them together. None: run it in this process (one run, or a spec that fails)."""
    children: list[tuple[str, dict[str, Any]]] = []
    if not job.children:
        try:
            from posenc.training.fanout import plan

            runs = plan(JobSpec.model_validate(job.spec))
        except Exception:  # the in-process run fails it with the same error, worded as for any job
            return None
        if len(runs) <= 1:
            return None
        children = [(f"{job.id}-run{position}", run) for position, run in enumerate(runs)]
    decision, created = store.park(job.id, fence, children=children, child_priority=PRIORITY_LOW)
    if decision == "stale":
        return {"job_id": job.id, "outcome": "superseded"}
    if decision == "parked":
        for child_id, _ in children if created else ():
            publish_job(app, child_id, job.queue, PRIORITY_LOW)
            store.mark_published(child_id)
        logger.info("job %s: parked, waiting for its runs (%d published now)", job.id, created)
        return {"job_id": job.id, "outcome": "parked"}
    if decision == "cancelled":
        return _attempt(store, job, fence, settings, lambda hooks: ("cancelled", {}))
    return _attempt(
        store, job, fence, settings, lambda hooks: _assemble(store, job, job_dir, settings), job_dir=job_dir
    )


def _assemble(store: JobStore, job: Job, job_dir: Path, settings: Settings) -> Outcome:
    """Every run has ended: the benchmark fails naming a run that failed, is cancelled if one was (or it was),
    and else is put together from the runs' records."""
    runs = [(child, store.get(child.id)) for child in job.children]
    failed = [(child, run) for child, run in runs if run is None or run.status in ("failed", "expired")]
    ended = [child.model_copy(update={"status": run.status if run else "expired"}) for child, run in runs]
    if failed:
        child, run = failed[0]
        why = run.error if run is not None and run.status == "failed" else "its record expired"
        more = f"; {len(failed) - 1} more runs failed" if len(failed) > 1 else ""
        task = f"{child.task}: " if child.task else ""
        error = f"run {task}{child.method} seed {child.seed} (job {child.id}) failed: {why}{more}"
        return "failed", {"error": error, "children": ended}
    if store.cancel_requested(job.id) or any(run is not None and run.status == "cancelled" for _, run in runs):
        return "cancelled", {"children": ended}
    results = [run.result or {} for _, run in runs if run is not None]
    devices = sorted({str(result.get("device", "cpu")) for result in results})

    def assemble() -> dict[str, Any]:
        from posenc.training.fanout import assemble

        result = dict(assemble(JobSpec.model_validate(job.spec), job_dir, device=", ".join(devices)))
        result["resumed_from_step"] = sum(int(result.get("resumed_from_step", 0)) for result in results)
        return result

    status, fields = _guarded(settings, assemble)
    return status, fields | {"children": ended}


def _run_child(store: JobStore, job: Job, job_dir: Path, hooks: AttemptHooks, settings: Settings) -> Outcome:
    """One run of a benchmark, in the benchmark's directory; its result is the run's record."""

    def run() -> dict[str, Any]:
        found = store.run_of(job.id)
        if found is None:
            raise RuntimeError(f"job {job.id} is not a run of a benchmark")
        _, run = found
        spec = JobSpec.model_validate(job.spec)
        device = resolve_device(spec.device, settings.device)
        from posenc.training.fanout import run_child, run_spec

        started = time.monotonic()
        record = run_child(
            spec,
            int(run["index"]),
            int(run["seed"]),
            job_dir=job_dir,
            hooks=hooks,
            position=run.get("position"),
            device=device,
            data_dir=settings.data_dir,
            threads=torch_threads_per_child(),
        )
        one = run_spec(spec, run.get("position"), int(run["index"]), int(run["seed"]))
        if one is not None:
            _record_rate(store, job.queue, JobCreate(kind="benchmark", spec=one), time.monotonic() - started, hooks)
        return dict(record) | {"resumed_from_step": hooks.resumed_from_step, "device": device}

    return _guarded(settings, run)


def _run_ended(store: JobStore, job_id: str, settings: Settings) -> None:
    """After a run's delivery: if it was its benchmark's last open run, publish the benchmark (one caller wins;
    the sweep does it if this process dies first). Nothing for a job that is no run."""
    try:
        found = store.run_of(job_id)
        if found is None:
            return
        parent = found[0]
        if store.child_ended(job_id, parent, settings.job_publish_grace_s, PRIORITY_HIGH) == "woken":
            queue, priority = store.publish_target(parent)
            publish_job(app, parent, queue, priority)
            logger.info("job %s: its runs have ended; published to put them together", parent)
    except RedisError:
        logger.exception("job %s: could not settle its benchmark; the sweep will", job_id)


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
