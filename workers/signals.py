"""Worker signal handlers: torch imported once in the parent, per-child torch set-up, a recovery sweep when a
worker comes up, and a pool that replaces each job's exited process at once.

Imported by the worker only (``include`` in workers.app). Each job runs in a process of its own
(``worker_max_tasks_per_child = 1``) forked from the worker parent. So that this fork, not a fresh interpreter
importing torch (about 1.5 s), is what a job waits for, the parent *imports* torch and the job code before the
pool forks (``worker_init``, setting ``worker_preload``), and does nothing else with torch: no tensor, no CUDA
call, no thread pool (it imports with one OpenMP/MKL thread), so every child starts from the same freshly
imported state, with no CUDA context to inherit. Thread counts are set in each child (``worker_process_init``).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from celery.concurrency import prefork
from celery.concurrency.asynpool import AsynPool
from celery.concurrency.asynpool import Worker as PoolChild
from celery.signals import task_prerun, worker_init, worker_process_init, worker_ready

from posenc import runtime
from posenc.jobstore import store_from_settings
from posenc.settings import get_settings
from workers.recovery import sweep_orphaned_jobs

logger = logging.getLogger(__name__)


def torch_threads_per_child() -> int:
    settings = get_settings()
    if settings.torch_threads:
        return settings.torch_threads
    return max(1, runtime.available_cpus() // settings.worker_concurrency)


def native_threads() -> int:
    """Threads of this process as the kernel counts them (OpenMP and torch pools included), Linux only."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def cuda_initialized() -> bool:
    """Whether this process (or, in a fresh fork, its parent) has initialised CUDA; imports torch."""
    import torch

    return bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]


def _import_job_code() -> None:
    """torch and every module a job imports lazily (``workers.tasks``): after this a job imports nothing."""
    import torch

    # torch.optim imports TorchDynamo when the first optimizer is built (about 900 modules, sympy among them):
    # 1.5 s or more in every job, longer than a tiny job's training.
    import torch._dynamo  # noqa: F401

    try:
        import posenc.compute
        import posenc.training.jobs  # noqa: F401
        from posenc.training.report import load_plotting
    except ImportError:
        logger.warning("the job code is not importable; jobs will fail until it is")
        return
    load_plotting()  # matplotlib, for a benchmark job's plot: a second or so more


def preload_in_parent(**_: Any) -> None:
    """``worker_init``, in the worker parent before the pool forks: import torch and the job code, and only
    that, so that each job's fresh child is a cheap fork of an already-imported interpreter.

    One OpenMP/MKL thread while importing: torch otherwise starts an OpenMP thread at import, and a thread
    pool is state a child must not inherit (its threads do not survive the fork). Each child sets its own
    thread count. Refuses to go on if the import initialised CUDA: every child would inherit a broken context.
    """
    if not get_settings().worker_preload:
        return
    started, threads_before = time.monotonic(), native_threads()
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"  # the parent's value; children set theirs in _set_up_child
    _import_job_code()
    import torch

    if cuda_initialized():
        raise RuntimeError("importing the job code initialised CUDA in the worker parent; children cannot use it")
    # The imported objects are shared by every child until written to, and a cyclic collection in a child
    # writes to every object it walks (its refcount, its GC link): freezing them keeps them out of the child's
    # collections, so a fork stays a cheap fork (what gc.freeze is for).
    gc.freeze()
    _preload_report.append(
        f"preloaded torch {torch.__version__} and the job code in the worker parent in "
        f"{time.monotonic() - started:.2f} s (CUDA initialised: {cuda_initialized()}, "
        f"threads {threads_before} -> {native_threads()})"
    )


def share_compile_cache(**_: Any) -> None:
    """``worker_init``, first: Inductor's and Triton's on-disk caches in the state directory, unless the
    environment names others. Every worker of the machine, and every restart, then shares them, so a job model
    (``train.compile``) is compiled once per machine and shape and loaded from the cache after that."""
    root = get_settings().state_dir / "compile-cache"
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(root / "triton"))


_preload_report: list[str] = []  # logged once the worker's logging is set up (worker_init comes before it)


def _log_preload(**_: Any) -> None:
    for line in _preload_report:
        logger.info("%s", line)


# A job's process also costs time before its task starts: the previous job's process ending on this worker, the
# pool reaping it and forking this one, and this child's set-up. The job estimates count it in the per-process
# overhead the workers measure (``workers.tasks._record_overhead``): each job's process marks when its attempt
# ended, in a file named after the worker parent, and the next fork counts from that mark. A mark older than
# ``REPLACEMENT_MAX_S`` at the fork is stale (the previous process was killed before it wrote one) and not counted.
REPLACEMENT_MAX_S = 2.0
_before_task_s = 0.0  # this child's share of that time: the gap since the last mark, and its own set-up
_marked = False  # one job per process: its end is marked once


def _ended_mark() -> Path:
    return Path(tempfile.gettempdir()) / f"posenc-worker-{os.getppid()}.ended"


def mark_attempt_ended() -> None:
    """In a job's process, as its attempt ends (the first call; later ones keep it): the worker's next fork
    counts its start-up from now."""
    global _marked
    if _marked:
        return
    _marked = True
    with contextlib.suppress(OSError):  # advisory, like the estimates it feeds
        _ended_mark().write_text(repr(time.monotonic()))


def time_before_task() -> float:
    """Seconds this job's process spent before its task: the replacement since the previous job's process ended
    on this worker (when that one marked its end) and this child's set-up."""
    return _before_task_s


def _replacement_gap(forked: float) -> float:
    try:
        ended = float(_ended_mark().read_text())
    except (OSError, ValueError):
        return 0.0
    gap = forked - ended
    return gap if 0.0 <= gap <= REPLACEMENT_MAX_S else 0.0


def _set_up_child(**_: Any) -> None:
    """In the child, before any job: thread count, then torch and the training code (already there when the
    parent preloaded them; imported here, while idle, when it did not).

    No global seeding: each job seeds its own generators from its spec, so a run is reproducible regardless
    of what ran before in this process.
    """
    global _before_task_s
    forked = time.monotonic()
    threads = torch_threads_per_child()
    os.environ["OMP_NUM_THREADS"] = str(threads)  # for what this child starts; torch is told below
    os.environ["MKL_NUM_THREADS"] = str(threads)
    _import_job_code()
    import torch

    torch.set_num_threads(threads)
    from posenc.pe import compiled

    compiled.configure(enabled=get_settings().compile_kernels)
    _before_task_s = _replacement_gap(forked) + (time.monotonic() - forked)
    if cuda_initialized():  # a fresh fork sees the parent's state: the parent touched CUDA
        logger.error("process %d: CUDA was initialised in the worker parent; GPU jobs here will fail", os.getpid())


def _log_job_process(task_id: str | None = None, args: Any = None, **_: Any) -> None:
    """``task_prerun``, in the child: which process runs which job, the record of one process per job."""
    job_id = args[0] if args else "?"
    import torch

    logger.info(
        "job %s runs in process %d (worker parent %d, %d intra-op threads, CUDA initialised before the job: %s)",
        job_id,
        os.getpid(),
        os.getppid(),
        torch.get_num_threads(),
        cuda_initialized(),
    )


CHILD_EXIT_WAIT_S = 1.0  # far longer than the kernel takes between a child closing its files and its exit
RESULT_READ_WAIT_S = 30.0  # billiard's own bound: 300 checks 0.1 s apart


class PromptExitChild(PoolChild):  # type: ignore[misc]
    """A pool child that exits as soon as the parent has read its result.

    Before exiting, billiard's child waits until the parent has read the result of its last task, checking
    every 100 ms. The first check comes straight after sending it, before the parent has read it, so every job's
    process outlived its job by 100 ms, and the job queued behind it waited for that. Checked every millisecond
    here, to the same bound.
    """

    def _ensure_messages_consumed(self, completed: int) -> bool:
        if not self.on_ready_counter:
            return False
        deadline = time.monotonic() + RESULT_READ_WAIT_S
        while self.on_ready_counter.value < completed:
            if time.monotonic() > deadline:
                logger.warning("could not ensure all messages were consumed prior to exiting")
                return False
            time.sleep(0.001)
        return True


class PromptReplacementPool(AsynPool):  # type: ignore[misc]
    """Celery's prefork pool, with each job's process replaced as soon as it has ended: the next job waits for
    a fork (tens of milliseconds), not for the pool's 5 s maintenance timer.

    Celery learns that a child exited when the child's end of a pipe closes, then reaps it and forks a
    replacement. The pipe closes while the kernel is still tearing the process down, a moment before it can be
    reaped (most of the time, measured here): Celery then takes the child for alive and replaces it on its next
    5 s timer (celery/celery#9588). With one process per job, that hit most jobs queued behind another.
    """

    Worker = PromptExitChild

    def _event_process_exit(self, hub: Any, proc: Any) -> None:
        deadline = time.monotonic() + CHILD_EXIT_WAIT_S
        while proc.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.001)  # the child has closed its files: it is exiting, and done within microseconds
        super()._event_process_exit(hub, proc)


def use_prompt_replacement_pool(**_: Any) -> None:
    """``worker_init``, before the pool exists: ``--pool prefork`` builds a :class:`PromptReplacementPool`."""
    prefork.TaskPool.Pool = PromptReplacementPool


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


worker_init.connect(share_compile_cache, weak=False)
worker_init.connect(use_prompt_replacement_pool, weak=False)
worker_init.connect(preload_in_parent, weak=False)
worker_process_init.connect(_set_up_child, weak=False)
task_prerun.connect(_log_job_process, weak=False)
worker_ready.connect(_recover_on_start, weak=False)
worker_ready.connect(_log_preload, weak=False)
