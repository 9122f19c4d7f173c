"""A job's ``estimate_s`` against its measured time (``finished_at - started_at`` of its record), with a real Redis,
a real worker and a live gateway: once the worker has measured one run of a task family, every estimate of a
small spread of jobs of it (train, extrapolate, benchmarks that fan out to 4 and to 64 runs, the README quickstart)
is within [0.5x, 2x] of what the job took on a quiet machine, and within [0.5x, 2.5x] on one whose every core is
kept busy by another process throughout. And the gateway refuses, naming the field, a job over the memory budget.

The estimates follow the load the workers measured: a load that starts after a job's submission slows it past its
estimate (beside the rest of the suite, 64 one-step runs once took 2.1x their estimate while another test's
processes took the cores). So the timed test runs alone (``alone``: after the parallel suite), under a load it
holds steady itself."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

TINY = {"layers": 1, "dim": 32, "heads": 2}
COPY = {"task": "copy", "size": 6}


def body(kind: str, methods: list[str], **spec: Any) -> dict[str, Any]:
    return {"kind": kind, "spec": {"methods": [{"method": m} for m in methods], "device": "cpu", **spec}}


WARM_UP = [  # one run of each (family, attention path) the spread uses: the worker folds its speed in
    body("train", ["rope"], data=COPY, model=TINY, train={"steps": 30, "batch_size": 8}),
    body(
        "train",
        ["rope"],
        data={"corpus": "corpus.txt"},
        model=TINY,
        train={"length": 32, "steps": 20, "batch_size": 4},
        eval={"max_tokens": 2048},
    ),
]
SPREAD = {
    "train copy": body("train", ["alibi"], data=COPY, model=TINY, train={"steps": 120, "batch_size": 16}),
    "benchmark 2 methods x 2 seeds": body(
        "benchmark",
        ["rope", "alibi"],
        data=COPY,
        model=TINY,
        train={"steps": 20, "batch_size": 8},
        eval={"sizes": [3, 6, 12], "samples": 20},
        seeds=[0, 1],
    ),
    "benchmark 64 one-step runs": body(
        "benchmark",
        ["rope"],
        data=COPY,
        model=TINY,
        train={"steps": 1, "batch_size": 1},
        eval={"sizes": [6], "samples": 1},
        seeds=list(range(64)),
    ),
    "extrapolate text": body(
        "extrapolate",
        ["rope"],
        data={"corpus": "corpus.txt"},
        model=TINY,
        train={"length": 32, "steps": 40, "batch_size": 8},
        eval={"lengths": [32, 64, 128], "max_tokens": 4096},
    ),
    "README quickstart": {
        "kind": "train",
        "spec": {
            "methods": [{"method": "rope"}],
            "data": {"task": "copy", "size": 8},
            "model": {"layers": 2, "dim": 32, "heads": 2},
            "train": {"steps": 200, "batch_size": 16},
        },
    },
}


def took(job: dict[str, Any]) -> float:
    started, finished = (datetime.fromisoformat(job[key]) for key in ("started_at", "finished_at"))
    return (finished - started).total_seconds()


@contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """``count`` processes that each spin one core until the block ends."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.mark.alone
@pytest.mark.parametrize(
    ("load", "highest"),
    # Busy, the warm-up's one measurement per family is noisier: a small job was once overestimated 2.02x (the
    # quiet machine's 1.2-1.5x for step-heavy runs, and the load's noise). An overestimate ends early; the bound
    # under it stays.
    [("quiet", 2.0), ("every core busy", 2.5)],
)
def test_estimates_are_near_the_measured_time(
    load: str, highest: float, start_gateway: Any, start_worker: Any, corpus: Path, jobs: Any
) -> None:
    with busy_cores(len(os.sched_getaffinity(0)) if load == "every core busy" else 0):
        measure_the_spread(start_gateway, start_worker, jobs, highest)


def measure_the_spread(start_gateway: Any, start_worker: Any, jobs: Any, highest: float) -> None:
    """Warm a fresh worker up, then hold every job of the spread to [0.5x, ``highest``] of its estimate."""
    gateway = start_gateway()
    start_worker()
    with gateway.client() as client:

        def run(job: dict[str, Any]) -> dict[str, Any]:
            created = client.post("/v1/jobs", json=job)
            assert created.status_code == 202, created.text
            assert created.json()["estimate_s"] > 0
            done: dict[str, Any] = jobs.wait(client, created.json()["id"], jobs.is_terminal, timeout=120)
            assert done["status"] == "succeeded", done
            return done

        for job in WARM_UP:
            run(job)
        ratios = {}
        for name, job in SPREAD.items():
            done = run(job)
            ratios[name] = (done["estimate_s"], took(done), done["estimate_s"] / took(done))
        print("estimate, took, ratio:", ratios)
        assert all(0.5 <= ratio <= highest for _, _, ratio in ratios.values()), ratios


def test_a_job_over_the_memory_budget_is_a_413_naming_the_batch(start_gateway: Any, job_env: dict[str, str]) -> None:
    gateway = start_gateway(env={**job_env, "POSENC_WORKER_MEMORY_BYTES": str(1024**3)})
    with gateway.client() as client:
        answer = client.post("/v1/jobs", json=body("train", ["rope"], data={"task": "shapes"},
                                                   train={"batch_size": 1024}))  # fmt: skip
        assert answer.status_code == 413, answer.text
        problem = answer.json()
        assert problem["errors"][0]["loc"] == ["body", "spec", "train", "batch_size"]
        assert problem["limit"] == 1024**3
        assert problem["size"] > 1024**3
        assert "POSENC_WORKER_MEMORY_BYTES" in problem["detail"]
