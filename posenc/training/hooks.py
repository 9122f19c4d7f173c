"""The contract between a job runner (the Celery task) and the training code.

The training code never touches Redis or Celery: it reports through ``JobHooks`` and keeps its
resumable state under ``workdir``. A redelivered job calls :func:`posenc.training.jobs.run_job` again with
the same ``workdir`` and continues from the last checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class JobCancelled(Exception):
    """Raised inside the training loop when ``JobHooks.should_cancel`` says so; the job ends cancelled."""


@dataclass(frozen=True)
class Progress:
    step: int  # steps done so far, over the whole job (all methods and seeds of a benchmark)
    total: int  # steps the whole job will take
    loss: float | None = None
    stage: str | None = None  # e.g. "train rope seed 0", "eval 512"


class JobHooks(Protocol):
    def progress(self, progress: Progress) -> None:
        """Called every step (cheap: the runner rate-limits what it writes)."""

    def should_cancel(self) -> bool:
        """Checked every step; True makes the loop raise JobCancelled."""

    def note(self, message: str) -> None:
        """Something worth a line in the job's events (a context-extension study's base model trained or
        reused); rare, never per step."""


class NoHooks:
    """Hooks for runs outside a job (benches, tests, notebooks): report nothing, never cancel."""

    def progress(self, progress: Progress) -> None:
        del progress

    def should_cancel(self) -> bool:
        return False

    def note(self, message: str) -> None:
        del message
