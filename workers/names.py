"""Task and queue names: the only strings the gateway and the workers must agree on.

The gateway publishes by name (``send_task``) and never imports task code, so these live apart from the tasks.
"""

from __future__ import annotations

from typing import Final

RUN_JOB: Final = "posenc.run_job"

QUEUE_CPU: Final = "cpu"
QUEUE_GPU: Final = "gpu"
QUEUES: Final = (QUEUE_CPU, QUEUE_GPU)


def queue_for_device(device: str) -> str:
    """A job that asks for CUDA goes to the GPU workers; ``auto`` and ``cpu`` to the CPU workers.

    A CPU-queue worker that happens to have a GPU still uses it for ``auto`` (resolved in the child).
    """
    return QUEUE_GPU if device == "cuda" else QUEUE_CPU
