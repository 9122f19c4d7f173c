"""Job routes: submit, poll, list, cancel, download artifacts; and ``/readyz``.

The gateway only writes and reads job records (``posenc.jobstore``) and publishes by task name
(``workers.publish``); it never imports task or training code. Routes are plain ``def``: redis-py and Celery's
publisher block, so they run in the threadpool, not on the event loop.

Tenancy: with API keys, a job belongs to the key that created it. Every read (record, list, artifacts), cancel
and Idempotency-Key replay sees only the caller's jobs; another key's job is answered exactly like a job that
does not exist (404 ``no job '<id>'``). Admin keys see every job; without keys there is one tenant. Limits at
submission: the job's cost (``max_job_cost``, 413) for everyone, and with keys the jobs a key has queued or
running (``max_active_jobs_per_key``, 429), counted in Redis so every gateway and restart shares it.

Errors never carry internal addresses: a Redis or broker failure is logged here and answered with a generic 503.
"""

from __future__ import annotations

import logging
import mimetypes
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from celery import Celery
from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import FileResponse
from redis.exceptions import RedisError

from posenc.compute.cost import Budgets
from posenc.corpora import data_directories
from posenc.errors import InvalidInput, located
from posenc.job_estimates import check_duration, check_memory, estimate_seconds, job_groups, speed_keys
from posenc.jobspec import job_cost, run_own_spec, validate_job
from posenc.jobstore import (
    ActiveJobsLimit,
    IdempotencyConflict,
    IdempotencyInProgress,
    JobStore,
    body_fingerprint,
    is_terminal,
    new_job_id,
    store_from_settings,
)
from posenc.schemas.errors import Problem
from posenc.schemas.jobs import Job, JobCreate, JobEvent, JobEventList, JobKind, JobList, JobSpec, JobStatus
from posenc.settings import Settings
from posenc.tasks.base import SPEC
from service.errors import ProblemError
from service.limits import ComputeSlots, KeyRing, Principal, authenticate, health_details_allowed
from workers.app import create_app as create_celery_app
from workers.names import QUEUE_GPU, priority_for_kind, queue_for_device
from workers.publish import publish_job

logger = logging.getLogger(__name__)
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
ACTIVE_LIMIT_RETRY_AFTER_S = 30  # a hint only: a slot frees when one of the key's jobs ends
REDIS_UNAVAILABLE = "the job store (Redis) is unavailable; retry later"

# Who the request acts for; the same dependency as the router's guard, so FastAPI runs it once per request.
PrincipalDep = Annotated[Principal, Depends(authenticate)]


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _keyring(request: Request) -> KeyRing:
    keyring: KeyRing = request.app.state.keyring
    return keyring


@contextmanager
def _redis_available() -> Iterator[None]:
    """Redis down is the service being unavailable (503), not a bug (500). The exception's text names the
    Redis host and port, so it goes to the log, never into the answer."""
    try:
        yield
    except (RedisError, RuntimeError) as exc:
        logger.warning("job store unavailable: %s: %s", type(exc).__name__, exc)
        raise ProblemError(503, REDIS_UNAVAILABLE, headers={"Retry-After": "5"}) from exc


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


def _no_job(job_id: str) -> ProblemError:
    """The one answer for a job that does not exist and for another key's job: nothing tells them apart."""
    return ProblemError(404, f"no job {job_id!r}")


def _get_or_404(store: JobStore, job_id: str, principal: Principal) -> Job:
    job = None
    if _JOB_ID.match(job_id):
        with _redis_available():
            job = store.get(job_id, owner=principal.job_filter)
    if job is None:
        raise _no_job(job_id)
    return job


def _check_cost(body: JobCreate, settings: Settings) -> int:
    """413 before any other work: the cost is arithmetic on the spec (``posenc.jobspec.job_cost``)."""
    cost, limit = job_cost(body), settings.max_job_cost
    if cost > limit:
        raise ProblemError(
            413,
            f"this job would take about {cost} multiply-adds (methods x seeds x (3 x train steps x batch_size x "
            "train length + evaluation tokens) x the model's multiply-adds per token), over the limit of "
            f"{limit} (max_job_cost, POSENC_MAX_JOB_COST); use fewer steps, a smaller batch, length or model, "
            "fewer methods, seeds or evaluation tokens, or split it into several jobs",
            size=cost,
            limit=limit,
        )
    return cost


def _check_duration(store: JobStore, body: JobCreate, queue: str, settings: Settings) -> float | None:
    """The job's ``estimate_s`` (``posenc.job_estimates``: its counts times the seconds each takes, scaled by what
    this deployment's workers measured); a 413 naming the field that drives it when one attempt would run past
    the job time limit. None for a compute job."""
    if not isinstance(body.spec, JobSpec):
        return None
    with _redis_available():
        speeds = {key: store.throughput(key) for key in speed_keys(body, queue)}
    check_duration(body, settings.job_soft_time_limit_s, queue, speeds)
    return estimate_seconds(job_groups(body), queue, speeds)


def _check_checkpoint_visible(store: JobStore, body: JobCreate, principal: Principal) -> None:
    """An extrapolate job reads the model of the train job it names: with keys, only one the caller could read
    itself. Another key's job and a missing one get the same 422."""
    spec = body.spec
    if not isinstance(spec, JobSpec) or spec.checkpoint is None or principal.sees_all:
        return
    if store.get(spec.checkpoint, owner=principal.job_filter) is None:
        raise InvalidInput((*SPEC, "checkpoint"), f"no job {spec.checkpoint!r} of this API key")


def _create_record(
    store: JobStore,
    request: Request,
    job_id: str,
    body: JobCreate,
    queue: str,
    principal: Principal,
    idempotency_key: str | None,
    estimate_s: float | None,
) -> None:
    """Write the queued record owned by ``principal``; with keys, refuse (429) a key at its active-jobs limit
    and free the Idempotency-Key it reserved, so the same request can be retried once a slot frees."""
    limit = _settings(request).max_active_jobs_per_key if _keyring(request).enabled else None
    try:
        store.create(
            job_id,
            body.kind,
            body.spec.model_dump(mode="json"),
            queue,
            owner=principal.owner,
            max_active=limit,
            priority=priority_for_kind(body.kind),
            estimate_s=estimate_s,
        )
    except ActiveJobsLimit as exc:
        if idempotency_key is not None:
            store.release_idempotency_key(idempotency_key, job_id, owner=principal.owner)
        raise ProblemError(
            429,
            f"this API key has {exc.active} jobs queued or running, at the limit of {exc.limit} "
            "(max_active_jobs_per_key, POSENC_MAX_ACTIVE_JOBS_PER_KEY); wait for one to finish or cancel one",
            # X-Should-Retry: false: a slot frees when a job ends, minutes or hours away; a client that retried
            # on its own would only wait out Retry-After in vain. The caller decides (cancel, wait, or poll).
            headers={"Retry-After": str(ACTIVE_LIMIT_RETRY_AFTER_S), "X-Should-Retry": "false"},
            size=exc.active,
            limit=exc.limit,
        ) from None


@router.post(
    "",
    name="create",
    status_code=202,
    summary="Queue a job (train, extrapolate, benchmark, compute)",
    responses={
        404: _PROBLEM,
        409: _PROBLEM,
        413: _PROBLEM
        | {
            "description": "over max_job_cost (size: the job's cost, limit), a run's estimated peak memory over "
            "worker_memory_bytes or its estimated duration over the job time limit (errors: the field that drives "
            "it), or a compute job's budget"
        },
        422: _PROBLEM,
        429: _PROBLEM
        | {"description": "this key is at max_active_jobs_per_key, or rate limited; see Retry-After and detail"},
        503: _PROBLEM,
    },
)
def create_job(
    body: JobCreate,
    request: Request,
    response: Response,
    principal: PrincipalDep,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)] = None,
) -> Job:
    """Answers 202 with the queued job and its ``Location``. A repeat with the same ``Idempotency-Key`` and
    body returns the same job; the same key with another body is a 422. Idempotency-Keys are per API key.

    A job over ``max_job_cost`` is a 413 naming its cost and the limit; so is one whose run would need more
    memory than ``worker_memory_bytes`` or run past the job time limit (``job_soft_time_limit_s``), estimated
    from the spec and naming the field that drives it (``errors[0].loc``); with API keys, a key that already has
    ``max_active_jobs_per_key`` jobs queued or running gets a 429 with Retry-After.

    A ``benchmark`` of several runs fans out: each (method, seed) run becomes a job of its own (listed in the
    benchmark's ``children``, with ``parent`` set), run by any worker, and the benchmark puts them together when
    all have ended; its progress is theirs summed. Runs count once against ``max_active_jobs_per_key`` (as the
    benchmark). Benchmarks and their runs queue behind every other kind of job.

    A ``compute`` job runs the request of ``POST /v1/{route}`` on a worker and writes its tensors to the
    artifact ``tensors.safetensors``; it is checked here as the route would check it (unknown method 404, bad
    values 422), against ``max_job_output_bytes`` (413) instead of the route's output budget."""
    settings = _settings(request)
    with located(("body",)):
        Budgets.from_settings(settings).check_declared(body)  # tensors in method params, a compute request
    _check_cost(body, settings)
    # the spec's dry runs (every method applied once, a compute request prepared) are work: in a compute slot
    slots: ComputeSlots = request.app.state.compute_slots
    with slots.held():
        validate_job(
            body,
            max_compute_bytes=settings.max_job_output_bytes,
            data_dirs=data_directories(settings),
            budgets=Budgets.from_settings(settings),
        )
    check_memory(body, settings.worker_memory_bytes)  # BudgetExceeded: a 413 naming the field that drives it
    store = _store(request)
    queue = queue_for_device(body.spec.device if isinstance(body.spec, JobSpec) else "cpu")
    estimate_s = _check_duration(store, body, queue, settings)
    job_id = new_job_id()
    with _redis_available():
        if queue == QUEUE_GPU and not any(QUEUE_GPU in w.get("queues", []) for w in store.live_workers()):
            raise ProblemError(
                503, "no worker consumes the gpu queue; use device 'auto' or 'cpu', or start a GPU worker"
            )
        _check_checkpoint_visible(store, body, principal)
        if idempotency_key is not None:
            earlier = _replay(store, idempotency_key, job_id, body, principal)
            if earlier is not None:
                response.headers["Location"] = _location(earlier.id)
                response.headers["Idempotent-Replayed"] = "true"
                return earlier
        # The record exists (queued) before the message does: a worker never sees a job without a record,
        # and a poll right after the 202 never sees Celery's meaningless PENDING.
        _create_record(store, request, job_id, body, queue, principal, idempotency_key, estimate_s)
    try:
        publish_job(_celery(request), job_id, queue, priority_for_kind(body.kind))
    except Exception as exc:
        # The broker's error names its host and port: the log gets it, the record and the client do not.
        logger.warning("job %s: could not be published: %s: %s", job_id, type(exc).__name__, exc)
        with _redis_available():
            store.fail_unpublished(job_id, "could not be queued: the broker was unavailable")
        raise ProblemError(
            503, "the job could not be queued (the broker is unavailable); retry later", headers={"Retry-After": "5"}
        ) from exc
    with _redis_available():
        store.mark_published(job_id)
    response.headers["Location"] = _location(job_id)
    return _get_or_404(store, job_id, principal)


def _replay(store: JobStore, key: str, job_id: str, body: JobCreate, principal: Principal) -> Job | None:
    """The job an earlier request with this Idempotency-Key created, in the caller's own key namespace."""
    try:
        earlier_id = store.reserve_idempotency_key(
            key, job_id, body_fingerprint(body.model_dump(mode="json")), owner=principal.owner
        )
    except IdempotencyConflict as exc:
        raise ProblemError(
            422, f"this Idempotency-Key was already used with a different request body (job {exc.args[0]})"
        ) from None
    except IdempotencyInProgress:
        raise ProblemError(
            409, "a request with this Idempotency-Key is still being processed", headers={"Retry-After": "1"}
        ) from None
    return None if earlier_id is None else _get_or_404(store, earlier_id, principal)


@router.get(
    "/{job_id}",
    name="get",
    summary="A job's status, progress, result and artifacts",
    responses={404: _PROBLEM},
)
def get_job(job_id: str, request: Request, response: Response, principal: PrincipalDep) -> Job:
    # The job's whole record. A run of a benchmark that fanned out shows its own spec (its method entry and seed,
    # its task's for a suite's run), not the benchmark's; parent names the benchmark. (A comment, not a
    # docstring: a docstring would become the route's OpenAPI description.)
    store = _store(request)
    job = _get_or_404(store, job_id, principal)
    if not is_terminal(job.status):
        response.headers["Retry-After"] = str(_settings(request).job_poll_after_s)
    return _as_reported(store, job)


def _as_reported(store: JobStore, job: Job) -> Job:
    """A run of a fanned-out benchmark with its own spec in place of the benchmark's (which its record keeps for
    the worker); any other job as it is. A run whose spec cannot be narrowed (a record written by an older
    version) keeps the benchmark's."""
    if job.parent is None:
        return job
    with _redis_available():
        found = store.run_of(job.id)
    if found is None:
        return job
    try:
        own = run_own_spec(job.spec, found[1])
    except (ValueError, LookupError):
        logger.warning("job %s: its run %s does not narrow the benchmark's spec", job.id, found[1])
        return job
    return job.model_copy(update={"spec": own})


@router.get(
    "/{job_id}/events",
    name="events",
    summary="What happened to a job, in order: state transitions and the lines it wrote",
    responses={404: _PROBLEM},
)
def get_job_events(job_id: str, request: Request, principal: PrincipalDep) -> JobEventList:
    """Queued, claimed, requeued, finished, ... and what the job itself noted (a context-extension study's runs
    say whether they trained the base model or reused it). A benchmark that fanned out also lists its runs'
    notes, each prefixed with the run's job id. Kept as long as the job's record."""
    store = _store(request)
    _get_or_404(store, job_id, principal)
    with _redis_available():
        raw = store.events(job_id)
    events = []
    for line in raw:
        event, _, at = line.rpartition("|")
        events.append(JobEvent(at=at, event=event) if event else JobEvent(at="", event=at))
    return JobEventList(data=events)


@router.get("", name="list", summary="Recent jobs, newest first, as summaries")
def list_jobs(
    request: Request,
    principal: PrincipalDep,
    status: JobStatus | None = None,
    kind: JobKind | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    parent: Annotated[
        str | None, Query(description="the runs of this benchmark (in run order) instead of the recent jobs")
    ] = None,
) -> JobList:
    """The caller's own jobs (read from its own index, no scan of other keys' jobs); every job for an admin key
    and without keys. The runs of a benchmark that fanned out are listed only with ``parent`` (404 for a job
    the caller cannot see). Each job is a summary, without its spec, result or artifacts, so the answer's size
    does not grow with them: ``GET /v1/jobs/{id}`` has the whole record."""
    store = _store(request)
    if parent is not None:
        _get_or_404(store, parent, principal)
    with _redis_available():
        jobs = store.list_jobs(owner=principal.job_filter, status=status, kind=kind, limit=limit, parent=parent)
    return JobList(data=jobs, count=len(jobs))


@router.post(
    "/{job_id}/cancel",
    name="cancel",
    summary="Cancel a queued or running job",
    responses={200: {"description": "cancelled at once (it was queued)"}, 404: _PROBLEM, 409: _PROBLEM},
    status_code=202,
)
def cancel_job(job_id: str, request: Request, response: Response, principal: PrincipalDep) -> Job:
    """A queued job is cancelled at once (200). A running job is asked to stop (202): it checks the flag every
    step and ends ``cancelled`` within a few steps. A finished job answers 409. Another key's job is a 404.

    A benchmark that fanned out cancels its queued runs at once and asks its running ones to stop; it ends
    ``cancelled`` once they have (at once, 200, when none was running). Cancelling one of its runs cancels
    the benchmark (the answer is the run's record)."""
    store = _store(request)
    job = _get_or_404(store, job_id, principal)  # the owner never changes: checked once, before the cancel
    target = job.parent or job_id  # a run cannot end alone: its benchmark could not be put together
    with _redis_available():
        outcome = store.cancel(target)
    if outcome == "missing":
        raise _no_job(job_id)
    if outcome == "terminal":
        ended = job if target == job_id else _get_or_404(store, target, principal)
        raise ProblemError(409, f"job {target} is already {ended.status}")
    if outcome == "cancelled":
        response.status_code = 200
        # Best effort: a worker that already reserved the message skips it (the claim also sees 'cancelled').
        _celery(request).control.revoke(target)
    else:
        response.headers["Retry-After"] = "1"
    return _as_reported(store, _get_or_404(store, job_id, principal))


@router.get(
    "/{job_id}/artifacts/{name:path}",
    name="artifact",
    summary="Download one artifact of a finished job",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, 404: _PROBLEM},
)
def get_artifact(job_id: str, name: str, request: Request, principal: PrincipalDep) -> FileResponse:
    job = _get_or_404(_store(request), job_id, principal)
    path = _artifact_path(job, name, _settings(request).resolved_artifact_dir / job_id)
    if path is None:
        raise ProblemError(404, f"job {job_id} has no artifact {name!r}")
    return FileResponse(path, media_type=_media_type(path), filename=path.name)


def _artifact_path(job: Job, name: str, job_dir: Path) -> Path | None:
    """The file of an artifact the job recorded, inside its own directory; None otherwise (no traversal, no
    checkpoints). The name is matched against the record before it touches the filesystem, so a name the OS
    refuses (a NUL byte, too long) is simply not an artifact rather than an error."""
    if name not in {a.name for a in job.artifacts}:
        return None
    try:
        root = job_dir.resolve()
        path = (root / name).resolve()
        return path if path.is_relative_to(root) and path.is_file() else None
    except (OSError, ValueError):
        return None


def _media_type(path: Path) -> str:
    return _MEDIA_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"


@readiness_router.get(
    "/readyz",
    name="readyz",
    summary="Readiness: Redis answers and a worker is alive",
    responses={503: _PROBLEM},
)
def readyz(request: Request, details: Annotated[bool, Depends(health_details_allowed)]) -> dict[str, Any]:
    """200 when Redis answers and a worker beat recently, else 503. With API keys, the details (worker
    hostnames and queues, which dependency failed) need a key or ``public_health``; without, the status code
    and a bare status. Errors never carry the Redis address: it goes to the log."""
    settings = _settings(request)
    try:
        store = store_from_settings(settings)
        store.r.ping()
        workers = store.live_workers()
    except (RedisError, RuntimeError) as exc:
        logger.warning("readyz: redis unavailable: %s: %s", type(exc).__name__, exc)
        raise _not_ready("redis: unavailable; workers: unknown", details) from exc
    if not workers:
        raise _not_ready(
            "redis: ok; workers: none alive (no heartbeat within "
            f"{3 * settings.worker_heartbeat_interval_s:g} s); start one with `posenc worker --queues cpu`",
            details,
        )
    if not details:
        return {"status": "ready"}
    return {
        "status": "ready",
        "redis": "ok",
        "workers": [{"hostname": w.get("hostname"), "queues": w.get("queues", [])} for w in workers],
    }


def _not_ready(reason: str, details: bool) -> ProblemError:
    """503 with the reason for a caller allowed details, a bare 'not ready' otherwise."""
    detail = f"not ready: {reason}" if details else "not ready; send an API key for details"
    return ProblemError(503, detail, headers={"Retry-After": "5"})
