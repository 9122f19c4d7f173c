"""Task and queue names: the only strings the gateway and the workers must agree on.

The gateway publishes by name (``send_task``) and never imports task code, so these live apart from the tasks.
"""

from __future__ import annotations

from typing import Final

RUN_JOB: Final = "posenc.run_job"

QUEUE_CPU: Final = "cpu"
QUEUE_GPU: Final = "gpu"
QUEUES: Final = (QUEUE_CPU, QUEUE_GPU)

# Message priorities on kombu's Redis transport: a queue's messages wait in one list per priority step, and a
# consumer pops the list of priority 0 first (0 is the highest; no priority at all is 0 too). A benchmark's runs
# go low, so a short job waits at most for the runs in progress, never for a whole benchmark queued before it.
PRIORITY_HIGH: Final = 0
PRIORITY_LOW: Final = 9


def queue_for_device(device: str) -> str:
    """A job that asks for CUDA goes to the GPU workers; ``auto`` and ``cpu`` to the CPU workers.

    A CPU-queue worker that happens to have a GPU still uses it for ``auto`` (resolved in the child).
    """
    return QUEUE_GPU if device == "cuda" else QUEUE_CPU


def priority_for_kind(kind: str) -> int:
    """Benchmarks (their first attempt, and their runs) low; every other job (train, extrapolate, compute) high.
    A benchmark's last attempt, which only puts its runs together, is published high when its runs have ended."""
    return PRIORITY_LOW if kind == "benchmark" else PRIORITY_HIGH
