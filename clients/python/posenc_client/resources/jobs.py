"""/v1/jobs: queued training, extrapolation, benchmark and compute jobs; wait() polls one to the end.

A compute job runs one compute request on a worker, past the gateway's output budget:
client.jobs.create("compute", {"route": "bias", "request": {...}}); its tensors are the artifact
tensors.safetensors.
"""

from __future__ import annotations

import asyncio
import builtins
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel

from posenc_client._constants import DEFAULT_POLL_INTERVAL_S, IDEMPOTENCY_HEADER
from posenc_client._models import Job, JobEvent, JobEventList, JobList, JobSummary
from posenc_client._retry import parse_retry_after
from posenc_client._transport import HTTPRequest, HTTPResponse
from posenc_client._waiting import JobWatcher, ProgressCallback
from posenc_client.resources._base import AsyncResource, SyncResource

JobKind = Literal["train", "extrapolate", "benchmark", "compute"]
JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "expired"]
JSON_ACCEPT = {"Accept": "application/json"}


def new_idempotency_key() -> str:
    return uuid.uuid4().hex


def _job_path(job_id: str, *rest: str) -> str:
    if not job_id:
        raise ValueError("a job id is required")
    return "/".join(["/v1/jobs", quote(job_id, safe=""), *(quote(part, safe="") for part in rest)])


def _spec_json(spec: Mapping[str, Any] | BaseModel) -> dict[str, Any]:
    if isinstance(spec, BaseModel):
        return spec.model_dump(mode="json", exclude_unset=True)
    return dict(spec)


def _create_request(kind: JobKind, spec: Mapping[str, Any] | BaseModel, idempotency_key: str | None) -> HTTPRequest:
    # One key per creation, fixed here, so every retry of this request carries the same key and the server
    # returns the job the first attempt created instead of queueing a second one.
    key = idempotency_key or new_idempotency_key()
    return HTTPRequest(
        method="POST",
        path="/v1/jobs",
        headers={**JSON_ACCEPT, IDEMPOTENCY_HEADER: key},
        json_body={"kind": kind, "spec": _spec_json(spec)},
    )


def _get_request(job_id: str) -> HTTPRequest:
    return HTTPRequest(method="GET", path=_job_path(job_id), headers=JSON_ACCEPT)


def _list_request(status: str | None, kind: str | None) -> HTTPRequest:
    params = {key: value for key, value in (("status", status), ("kind", kind)) if value}
    return HTTPRequest(method="GET", path="/v1/jobs", params=params or None, headers=JSON_ACCEPT)


def _cancel_request(job_id: str) -> HTTPRequest:
    return HTTPRequest(method="POST", path=_job_path(job_id, "cancel"), headers=JSON_ACCEPT)


def _events_request(job_id: str) -> HTTPRequest:
    return HTTPRequest(method="GET", path=_job_path(job_id, "events"), headers=JSON_ACCEPT)


def _events(response: HTTPResponse) -> list[JobEvent]:
    return JobEventList.model_validate_json(response.content).data


def _artifact_request(job_id: str, name: str) -> HTTPRequest:
    if not name:
        raise ValueError("an artifact name is required")
    return HTTPRequest(method="GET", path=_job_path(job_id, "artifacts", name))


def _artifact_target(path: str | Path, name: str) -> Path:
    target = Path(path)
    return target / name if target.is_dir() else target


def _job(response: HTTPResponse) -> Job:
    return Job.model_validate_json(response.content)


class Jobs(SyncResource):
    def create(self, kind: JobKind, spec: Mapping[str, Any] | BaseModel, *, idempotency_key: str | None = None) -> Job:
        """Queue a job (202). The Idempotency-Key (generated when not given) is reused by every retry."""
        return _job(self._client._request(_create_request(kind, spec, idempotency_key)))

    def get(self, job_id: str) -> Job:
        return _job(self._client._request(_get_request(job_id)))

    def list(self, *, status: JobStatus | None = None, kind: JobKind | None = None) -> list[JobSummary]:
        """Recent jobs, newest first, optionally of one status and/or kind: summaries, without spec, result or
        artifacts (get(job_id) has the whole record)."""
        response = self._client._request(_list_request(status, kind))
        return JobList.model_validate_json(response.content).data

    def cancel(self, job_id: str) -> Job:
        """Ask the job to stop (cooperative: a running job stops within a step or so)."""
        return _job(self._client._request(_cancel_request(job_id)))

    def events(self, job_id: str) -> builtins.list[JobEvent]:
        """What happened to the job, in order: its state transitions and the lines it wrote (a context-extension
        study's runs say whether they trained its base model or reused it)."""
        return _events(self._client._request(_events_request(job_id)))

    def download_artifact(self, job_id: str, name: str, path: str | Path) -> Path:
        """Stream artifact name to path (a file, or a directory to put it in); returns the file."""
        target = _artifact_target(path, name)
        self._client._download(_artifact_request(job_id, name), target)
        return target

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        on_progress: ProgressCallback | None = None,
        progress_bar: bool | None = None,
    ) -> Job:
        """Poll until the job ends; return it when it succeeded.

        Polls every poll_interval seconds, or as the server's Retry-After says; calls on_progress(job)
        whenever status or progress changes; shows a tqdm bar (step of total, loss) when progress_bar is
        True, or when it is None and tqdm is installed and stderr is a terminal.

        Raises JobFailedError (failed or expired), JobCancelledError, or JobWaitTimeoutError after timeout
        seconds (the job keeps running).
        """
        watcher = JobWatcher(
            job_id=job_id,
            timeout_s=timeout,
            poll_interval_s=poll_interval,
            on_progress=on_progress,
            progress_bar=progress_bar,
        )
        try:
            while True:
                response = self._client._request(_get_request(job_id))
                job = _job(response)
                if watcher.observe(job):
                    return job
                hint = parse_retry_after(response.headers)
                time.sleep(watcher.next_delay(retry_after_s=hint, job=job))
        finally:
            watcher.close()

    def create_and_wait(
        self,
        kind: JobKind,
        spec: Mapping[str, Any] | BaseModel,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        on_progress: ProgressCallback | None = None,
        progress_bar: bool | None = None,
    ) -> Job:
        job = self.create(kind, spec, idempotency_key=idempotency_key)
        return self.wait(
            job.id,
            timeout=timeout,
            poll_interval=poll_interval,
            on_progress=on_progress,
            progress_bar=progress_bar,
        )


class AsyncJobs(AsyncResource):
    async def create(
        self, kind: JobKind, spec: Mapping[str, Any] | BaseModel, *, idempotency_key: str | None = None
    ) -> Job:
        return _job(await self._client._request(_create_request(kind, spec, idempotency_key)))

    async def get(self, job_id: str) -> Job:
        return _job(await self._client._request(_get_request(job_id)))

    async def list(self, *, status: JobStatus | None = None, kind: JobKind | None = None) -> list[JobSummary]:
        """Recent jobs as summaries, as Jobs.list."""
        response = await self._client._request(_list_request(status, kind))
        return JobList.model_validate_json(response.content).data

    async def cancel(self, job_id: str) -> Job:
        return _job(await self._client._request(_cancel_request(job_id)))

    async def events(self, job_id: str) -> builtins.list[JobEvent]:
        return _events(await self._client._request(_events_request(job_id)))

    async def download_artifact(self, job_id: str, name: str, path: str | Path) -> Path:
        target = _artifact_target(path, name)
        await self._client._download(_artifact_request(job_id, name), target)
        return target

    async def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        on_progress: ProgressCallback | None = None,
        progress_bar: bool | None = None,
    ) -> Job:
        watcher = JobWatcher(
            job_id=job_id,
            timeout_s=timeout,
            poll_interval_s=poll_interval,
            on_progress=on_progress,
            progress_bar=progress_bar,
        )
        try:
            while True:
                response = await self._client._request(_get_request(job_id))
                job = _job(response)
                if watcher.observe(job):
                    return job
                hint = parse_retry_after(response.headers)
                await asyncio.sleep(watcher.next_delay(retry_after_s=hint, job=job))
        finally:
            watcher.close()

    async def create_and_wait(
        self,
        kind: JobKind,
        spec: Mapping[str, Any] | BaseModel,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        on_progress: ProgressCallback | None = None,
        progress_bar: bool | None = None,
    ) -> Job:
        job = await self.create(kind, spec, idempotency_key=idempotency_key)
        return await self.wait(
            job.id,
            timeout=timeout,
            poll_interval=poll_interval,
            on_progress=on_progress,
            progress_bar=progress_bar,
        )
