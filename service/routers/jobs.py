"""Job routes: submit, poll, list, cancel, download artifacts; and ``/readyz``.

The gateway only writes and reads job records (``posenc.jobstore``) and publishes by task name
(``workers.publish``); it never imports task or training code. Routes are plain ``def``: redis-py and Celery's
publisher block, so they run in the threadpool, not on the event loop.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from celery import Celery
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import FileResponse
from redis.exceptions import RedisError

from posenc.jobspec import validate_job
from posenc.jobstore import (
    IdempotencyConflict,
    IdempotencyInProgress,
    JobStore,
    body_fingerprint,
    is_terminal,
    new_job_id,
    store_from_settings,
)
from posenc.schemas.errors import Problem
from posenc.schemas.jobs import Job, JobCreate, JobKind, JobList, JobSpec, JobStatus
from posenc.settings import Settings
from service.errors import ProblemError
from workers.app import create_app as create_celery_app
from workers.names import QUEUE_GPU, queue_for_device
from workers.publish import publish_job

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
readiness_router = APIRouter(tags=["health"])

_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MEDIA_TYPES = {
    ".safetensors": "application/vnd.safetensors",
    ".npy": "application/x-npy",
    ".pt": "application/octet-stream",
    ".json": "application/json",
    ".csv": "text/csv",
    ".md": "text/markdown",
}
_PROBLEM: dict[str, Any] = {"model": Problem}


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


@contextmanager
def _redis_available() -> Iterator[None]:
    """Redis down is the service being unavailable (503), not a bug (500)."""
    try:
        yield
    except (RedisError, RuntimeError) as exc:
        raise ProblemError(503, f"the job store (Redis) is unavailable: {exc}", headers={"Retry-After": "5"}) from exc


def _store(request: Request) -> JobStore:
    with _redis_available():
        return store_from_settings(_settings(request))


def _celery(request: Request) -> Celery:
    """One publisher per gateway app, configured from the gateway's own settings."""
    celery_app: Celery | None = getattr(request.app.state, "celery_app", None)
    if celery_app is None:
        celery_app = create_celery_app(_settings(request))
        request.app.state.celery_app = celery_app
    return celery_app


def _location(job_id: str) -> str:
    return f"/v1/jobs/{job_id}"


def _get_or_404(store: JobStore, job_id: str) -> Job:
    job = None
    if _JOB_ID.match(job_id):
        with _redis_available():
            job = store.get(job_id)
    if job is None:
        raise ProblemError(404, f"no job {job_id!r}")
    return job


@router.post(
    "",
    name="create",
    status_code=202,
    summary="Queue a job (train, extrapolate, benchmark, compute)",
    responses={404: _PROBLEM, 409: _PROBLEM, 413: _PROBLEM, 422: _PROBLEM, 503: _PROBLEM},
)
def create_job(
    body: JobCreate,
    request: Request,
    response: Response,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)] = None,
) -> Job:
    """Answers 202 with the queued job and its ``Location``. A repeat with the same ``Idempotency-Key`` and
    body returns the same job; the same key with another body is a 422.

    A ``compute`` job runs the request of ``POST /v1/{route}`` on a worker and writes its tensors to the
    artifact ``tensors.safetensors``; it is checked here as the route would check it (unknown method 404, bad
    values 422), against ``max_job_output_bytes`` (413) instead of the route's output budget."""
    validate_job(body, max_compute_bytes=_settings(request).max_job_output_bytes)
    store = _store(request)
    queue = queue_for_device(body.spec.device if isinstance(body.spec, JobSpec) else "cpu")
    job_id = new_job_id()
    with _redis_available():
        if queue == QUEUE_GPU and not any(QUEUE_GPU in w.get("queues", []) for w in store.live_workers()):
            raise ProblemError(
                503, "no worker consumes the gpu queue; use device 'auto' or 'cpu', or start a GPU worker"
            )
        if idempotency_key is not None:
            earlier = _replay(store, idempotency_key, job_id, body)
            if earlier is not None:
                response.headers["Location"] = _location(earlier.id)
                response.headers["Idempotent-Replayed"] = "true"
                return earlier
        # The record exists (queued) before the message does: a worker never sees a job without a record,
        # and a poll right after the 202 never sees Celery's meaningless PENDING.
        store.create(job_id, body.kind, body.spec.model_dump(mode="json"), queue)
    try:
        publish_job(_celery(request), job_id, queue)
    except Exception as exc:
        with _redis_available():
            store.fail_unpublished(job_id, f"could not be queued: {exc}")
        raise ProblemError(503, f"the job could not be queued: {exc}", headers={"Retry-After": "5"}) from exc
    with _redis_available():
        store.mark_published(job_id)
    response.headers["Location"] = _location(job_id)
    return _get_or_404(store, job_id)


def _replay(store: JobStore, key: str, job_id: str, body: JobCreate) -> Job | None:
    try:
        earlier_id = store.reserve_idempotency_key(key, job_id, body_fingerprint(body.model_dump(mode="json")))
    except IdempotencyConflict as exc:
        raise ProblemError(
            422, f"this Idempotency-Key was already used with a different request body (job {exc.args[0]})"
        ) from None
    except IdempotencyInProgress:
        raise ProblemError(
            409, "a request with this Idempotency-Key is still being processed", headers={"Retry-After": "1"}
        ) from None
    return None if earlier_id is None else _get_or_404(store, earlier_id)


@router.get(
    "/{job_id}",
    name="get",
    summary="A job's status, progress, result and artifacts",
    responses={404: _PROBLEM},
)
def get_job(job_id: str, request: Request, response: Response) -> Job:
    job = _get_or_404(_store(request), job_id)
    if not is_terminal(job.status):
        response.headers["Retry-After"] = str(_settings(request).job_poll_after_s)
    return job


@router.get("", name="list", summary="Recent jobs, newest first")
def list_jobs(
    request: Request,
    status: JobStatus | None = None,
    kind: JobKind | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> JobList:
    store = _store(request)
    with _redis_available():
        jobs = store.list_jobs(status=status, kind=kind, limit=limit)
    return JobList(data=jobs, count=len(jobs))


@router.post(
    "/{job_id}/cancel",
    name="cancel",
    summary="Cancel a queued or running job",
    responses={200: {"description": "cancelled at once (it was queued)"}, 404: _PROBLEM, 409: _PROBLEM},
    status_code=202,
)
def cancel_job(job_id: str, request: Request, response: Response) -> Job:
    """A queued job is cancelled at once (200). A running job is asked to stop (202): it checks the flag every
    step and ends ``cancelled`` within a few steps. A finished job answers 409."""
    store = _store(request)
    job = _get_or_404(store, job_id)
    with _redis_available():
        outcome = store.cancel(job_id)
    if outcome == "missing":
        raise ProblemError(404, f"no job {job_id!r}")
    if outcome == "terminal":
        raise ProblemError(409, f"job {job_id} is already {job.status}")
    if outcome == "cancelled":
        response.status_code = 200
        # Best effort: a worker that already reserved the message skips it (the claim also sees 'cancelled').
        _celery(request).control.revoke(job_id)
    else:
        response.headers["Retry-After"] = "1"
    return _get_or_404(store, job_id)


@router.get(
    "/{job_id}/artifacts/{name:path}",
    name="artifact",
    summary="Download one artifact of a finished job",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, 404: _PROBLEM},
)
def get_artifact(job_id: str, name: str, request: Request) -> FileResponse:
    job = _get_or_404(_store(request), job_id)
    job_dir = (_settings(request).resolved_artifact_dir / job_id).resolve()
    path = (job_dir / name).resolve()
    # Only names the job recorded, and only inside its own directory: no traversal, no checkpoints.
    if name not in {a.name for a in job.artifacts} or not path.is_relative_to(job_dir) or not path.is_file():
        raise ProblemError(404, f"job {job_id} has no artifact {name!r}")
    return FileResponse(path, media_type=_media_type(path), filename=path.name)


def _media_type(path: Path) -> str:
    return _MEDIA_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"


@readiness_router.get(
    "/readyz",
    name="readyz",
    summary="Readiness: Redis answers and a worker is alive",
    responses={503: _PROBLEM},
)
def readyz(request: Request) -> dict[str, Any]:
    settings = _settings(request)
    try:
        store = store_from_settings(settings)
        store.r.ping()
    except (RedisError, RuntimeError) as exc:
        raise ProblemError(503, f"not ready: redis: {exc}; workers: unknown", headers={"Retry-After": "5"}) from exc
    try:
        workers = store.live_workers()
    except RedisError as exc:
        raise ProblemError(503, f"not ready: redis: {exc}", headers={"Retry-After": "5"}) from exc
    if not workers:
        raise ProblemError(
            503,
            "not ready: redis: ok; workers: none alive (no heartbeat within "
            f"{3 * settings.worker_heartbeat_interval_s:g} s); start one with `posenc worker --queues cpu`",
            headers={"Retry-After": "5"},
        )
    return {
        "status": "ready",
        "redis": "ok",
        "workers": [{"hostname": w.get("hostname"), "queues": w.get("queues", [])} for w in workers],
    }
