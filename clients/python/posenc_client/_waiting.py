"""Polling a job to the end: the decisions shared by the sync and async jobs.wait()."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from posenc_client._backends import has_module, require
from posenc_client._exceptions import JobCancelledError, JobFailedError, JobWaitTimeoutError
from posenc_client._models import Job

TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled", "expired"})
ProgressCallback = Callable[[Job], None]


def wants_bar(progress_bar: bool | None) -> bool:
    """None: a bar when tqdm is installed and stderr is a terminal; True: a bar (tqdm required)."""
    if progress_bar is None:
        return has_module("tqdm") and sys.stderr.isatty()
    if progress_bar:
        require("tqdm", purpose="progress_bar=True")
    return progress_bar


class JobWatcher:
    """Sees each polled job record: reports changes, keeps the bar current, decides when to stop."""

    def __init__(
        self,
        *,
        job_id: str,
        timeout_s: float | None,
        poll_interval_s: float,
        on_progress: ProgressCallback | None,
        progress_bar: bool | None,
    ) -> None:
        if poll_interval_s <= 0:
            raise ValueError(f"poll_interval must be > 0, got {poll_interval_s}")
        self.job_id = job_id
        self.poll_interval_s = poll_interval_s
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._timeout_s = timeout_s
        self._on_progress = on_progress
        self._bar: Any = None
        self._bar_wanted = wants_bar(progress_bar)
        self._last_seen: tuple[Any, ...] | None = None

    def observe(self, job: Job) -> bool:
        """True when the job succeeded; raises when it failed, was cancelled or expired; False otherwise."""
        progress = job.progress
        seen = (
            job.status,
            progress.step if progress else None,
            progress.total if progress else None,
            progress.loss if progress else None,
            progress.stage if progress else None,
        )
        if seen != self._last_seen:
            self._last_seen = seen
            self._update_bar(job)
            if self._on_progress is not None:
                self._on_progress(job)
        if job.status not in TERMINAL_STATUSES:
            return False
        self.close()
        if job.status == "succeeded":
            return True
        if job.status == "cancelled":
            raise JobCancelledError(f"job {job.id} was cancelled", job=job)
        raise JobFailedError(f"job {job.id} {job.status}: {job.error or 'no error message'}", job=job)

    def next_delay(self, *, retry_after_s: float | None, job: Job) -> float:
        """Seconds until the next poll: the server's Retry-After hint if it gave one, else poll_interval;
        raises JobWaitTimeoutError when the deadline has passed."""
        delay = retry_after_s if retry_after_s is not None else self.poll_interval_s
        if self._deadline is None:
            return delay
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            self.close()
            raise JobWaitTimeoutError(f"job {job.id} still {job.status} after {self._timeout_s} s", job=job)
        return min(delay, remaining)

    def _update_bar(self, job: Job) -> None:
        if not self._bar_wanted or job.progress is None or not job.progress.total:
            return
        progress = job.progress
        if self._bar is None:
            tqdm = require("tqdm", purpose="the progress bar").tqdm
            self._bar = tqdm(total=progress.total, desc=f"job {job.id[:8]}", unit="step", leave=True)
        if self._bar.total != progress.total:
            self._bar.total = progress.total
        self._bar.n = progress.step or 0
        details: dict[str, str] = {"status": job.status}
        if progress.loss is not None:
            details["loss"] = f"{progress.loss:.4f}"
        if progress.stage:
            details["stage"] = progress.stage
        self._bar.set_postfix(details, refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
