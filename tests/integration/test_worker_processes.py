"""One process per job, forked from a worker parent that imported torch and did nothing else with it.

Real Redis, a real ``posenc worker`` and a live gateway. What is checked from outside the worker: the parent has
torch's library mapped (it preloaded) and no CUDA driver library (it never initialised CUDA), and it runs no
torch threads; what the worker logs from inside each job's process: its pid (different for every job), its
parent (the worker), its intra-op thread count (the per-child setting) and that CUDA was not initialised before
the job.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

JOB_LINE = re.compile(
    r"job (\S+) runs in process (\d+) \(worker parent (\d+), (\d+) intra-op threads, "
    r"CUDA initialised before the job: (\w+)\)"
)


def _mapped_libraries(pid: int) -> set[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {Path(line.split()[-1]).name for line in maps.splitlines() if line.split()[-1].startswith("/")}


def _native_threads(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def test_consecutive_jobs_run_in_fresh_forks_of_a_parent_that_never_touched_cuda(
    start_gateway: Any, start_worker: Any, job_env: dict[str, str], corpus: Path, jobs: Any
) -> None:
    job_env["POSENC_TORCH_THREADS"] = "2"  # applied per child: the parent imported torch with one thread
    gateway = start_gateway()
    worker = start_worker()
    with gateway.client() as client:
        ids = []
        for _ in range(2):  # one after the other: the second may not start before the first ended
            created = client.post("/v1/jobs", json=jobs.request(corpus, steps=10, checkpoint_every=100))
            assert created.status_code == 202, created.text
            ids.append(created.json()["id"])
            done = jobs.wait(client, ids[-1], jobs.is_terminal)
            assert done["status"] == "succeeded", done

    runs = {m.group(1): m.groups()[1:] for m in JOB_LINE.finditer(worker.tail(200_000))}
    assert set(ids) <= set(runs), worker.tail()
    pids = [int(runs[job_id][0]) for job_id in ids]
    assert pids[0] != pids[1], "two jobs ran in the same process"
    assert worker.pid not in pids
    for job_id in ids:
        _, parent, threads, cuda_before = runs[job_id]
        assert int(parent) == worker.pid
        assert int(threads) == 2, "the per-child thread setting was not applied"
        assert cuda_before == "False"

    libraries = _mapped_libraries(worker.pid)
    assert any(name.startswith("libtorch_cpu") for name in libraries), "the parent did not preload torch"
    assert not any(name.startswith("libcuda.so") for name in libraries), "the parent initialised CUDA"
    # Celery's parent runs its event loop on one thread; torch's import and nothing else added none.
    assert _native_threads(worker.pid) == 1
    assert "CUDA initialised: False" in worker.tail(200_000)
