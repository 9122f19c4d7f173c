"""Task and queue names: the only strings the gateway and the workers must agree on.

The gateway publishes by name (``send_task``) and never imports task code, so these live apart from the tasks.
"""

from __future__ import annotations

from typing import Final

from posenc.jobstore import KOMBU_PRIORITY_STEPS

RUN_JOB: Final = "posenc.run_job"

QUEUE_CPU: Final = "cpu"
QUEUE_GPU: Final = "gpu"
QUEUES: Final = (QUEUE_CPU, QUEUE_GPU)

# Message priorities on kombu's Redis transport: a queue's messages wait in one list per priority step
# (``KOMBU_PRIORITY_STEPS``: 0, 3, 6, 9), and a consumer pops the list of priority 0 first (0 is the highest; no
# priority at all is 0 too), each list oldest first. A benchmark's runs go low, so a short job waits at most for
# the runs in progress, never for a whole benchmark queued before it. Fresh jobs use neither 0 nor 6: a job the
# recovery sweep publishes again goes one step above the fresh jobs of its priority (``requeue_priority``), so it
# keeps its place ahead of the jobs queued after it first was instead of waiting behind every job submitted since.
PRIORITY_HIGH: Final = 3
PRIORITY_LOW: Final = 9


def queue_for_device(device: str) -> str:
    """A job that asks for CUDA goes to the GPU workers; ``auto`` and ``cpu`` to the CPU workers.

    A CPU-queue worker that happens to have a GPU still uses it for ``auto`` (resolved in the child).
    """
    return QUEUE_GPU if device == "cuda" else QUEUE_CPU


def requeue_priority(priority: int | None) -> int | None:
    """The priority a job is published with again after its worker was lost (or its message was): the step
    above its own (3 -> 0, 9 -> 6), so it is claimed before the fresh jobs of its own priority. None (no priority:
    the highest) and 0 stay as they are."""
    if priority is None:
        return None
    above = [step for step in KOMBU_PRIORITY_STEPS if step < priority]
    return above[-1] if above else 0


def priority_for_kind(kind: str) -> int:
    """Benchmarks (their first attempt, and their runs) low; every other job (train, extrapolate, compute) high.
    A benchmark's last attempt, which only puts its runs together, is published high when its runs have ended."""
    return PRIORITY_LOW if kind == "benchmark" else PRIORITY_HIGH
