"""How close a job's ``estimate_s`` (and its memory estimate) comes to what it took.

Default: starts a fresh ``posenc serve`` (private Redis, one supervised worker, the gateway; as
``bench/job_overhead.py``) or uses ``--base-url``, submits a spread of small jobs one after the other (train,
extrapolate, benchmarks of several methods and seeds, a probes job, an image job, a graph job, the README
quickstart) and prints, per job, the estimate given at submission, the measured time (``finished_at -
started_at`` of the record) and their ratio. Each job is submitted after the previous one ended, so the workers'
folding of their measurements into the estimates shows. Nothing is asserted.

``--calibrate``: times a design of small jobs in this process (``run_job``; no worker), fits the seconds per
count of ``posenc.job_estimates.time_features`` by non-negative least squares on the relative error, and prints
them (the defaults ``SECONDS_PER`` are this fit; ``process`` then gets the per-job time the service adds).

``--memory``: runs a few jobs, each in a fresh process, and prints the peak resident memory the run added against
``posenc.job_estimates.job_memory``.

    .venv/bin/python bench/estimate_accuracy.py [--base-url URL] [--only NAME ...]
    .venv/bin/python bench/estimate_accuracy.py --calibrate
    .venv/bin/python bench/estimate_accuracy.py --memory
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from job_overhead import TERMINAL, fresh_serve

from posenc.job_estimates import SECONDS_PER, human_bytes, job_groups, job_memory, seconds_of
from posenc.schemas.jobs import JobCreate, JobSpec

TINY = {"layers": 1, "dim": 32, "heads": 2}
COPY = {"task": "copy", "size": 6}
README_QUICKSTART = {
    "kind": "train",
    "spec": {
        "methods": [{"method": "rope"}],
        "data": {"task": "copy", "size": 8},
        "model": {"layers": 2, "dim": 32, "heads": 2},
        "train": {"steps": 200, "batch_size": 16},
    },
}


def _spec(methods: list[str], **fields: Any) -> dict[str, Any]:
    return {"methods": [{"method": m} for m in methods], "device": "cpu", **fields}


JOBS: dict[str, dict[str, Any]] = {
    "train copy 1 step": {"kind": "train", "spec": _spec(["rope"], data=COPY, model=TINY, train={"steps": 1})},
    "train copy 300 steps": {
        "kind": "train",
        "spec": _spec(["alibi"], data=COPY, model=TINY, train={"steps": 300, "batch_size": 16}),
    },
    "extrapolate text": {
        "kind": "extrapolate",
        "spec": _spec(
            ["rope"],
            model=TINY,
            train={"length": 64, "steps": 60, "batch_size": 8},
            eval={"lengths": [64, 128, 256], "max_tokens": 8192},
        ),
    },
    "benchmark 2 methods x 2 seeds": {
        "kind": "benchmark",
        "spec": _spec(
            ["rope", "fox"],
            data=COPY,
            model=TINY,
            train={"steps": 80, "batch_size": 16},
            eval={"samples": 30},
            seeds=[0, 1],
        ),
    },
    "benchmark 8 one-step runs": {
        "kind": "benchmark",
        "spec": _spec(
            ["rope", "alibi"], data=COPY, model=TINY, train={"steps": 1}, eval={"sizes": [6]}, seeds=[0, 1, 2, 3]
        ),
    },
    "probes": {
        "kind": "train",
        "spec": _spec(
            ["rope"], data={"task": "probes"}, model=TINY, train={"length": 64, "steps": 60, "batch_size": 8}
        ),
    },
    "image": {
        "kind": "extrapolate",
        "spec": _spec(
            ["rope_mixed"],
            data={"task": "shapes", "image_size": 16},
            model=TINY,
            train={"steps": 40, "batch_size": 16},
            eval={"samples": 40},
        ),
    },
    "graph": {
        "kind": "train",
        "spec": _spec(
            ["nope"], data={"task": "graph_distance", "num_nodes": 8}, model=TINY, train={"steps": 40, "batch_size": 16}
        ),
    },
    "README quickstart": README_QUICKSTART,
    "benchmark 64 one-step runs": {
        "kind": "benchmark",
        "spec": _spec(
            ["rope", "alibi", "nope", "sinusoidal"],
            data=COPY,
            model=TINY,
            train={"steps": 1},
            eval={"sizes": [6], "samples": 10},
            seeds=list(range(16)),
        ),
    },
}


# ------------------------------------------------------------------------------------------------- accuracy
def run_one(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    created = client.post("/v1/jobs", json=body)
    if created.status_code != 202:
        raise RuntimeError(f"{created.status_code}: {created.text}")
    job_id = created.json()["id"]
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in TERMINAL:
            if job["status"] != "succeeded":
                raise RuntimeError(f"job {job_id} ended {job['status']}: {job.get('error')}")
            return job
        time.sleep(0.1)


def measured_seconds(job: dict[str, Any]) -> float:
    started, finished = (datetime.fromisoformat(job[key]) for key in ("started_at", "finished_at"))
    return (finished - started).total_seconds()


def accuracy(base_url: str, names: list[str]) -> None:
    print(f"{'job':34}{'estimate s':>12}{'measured s':>12}{'ratio':>8}", flush=True)
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for name in names:
            job = run_one(client, JOBS[name])
            measured = measured_seconds(job)
            estimate = job["estimate_s"]
            print(f"{name:34}{estimate:>12.1f}{measured:>12.1f}{estimate / measured:>8.2f}", flush=True)


# ---------------------------------------------------------------------------------------------- calibration
def _design() -> list[dict[str, Any]]:
    """Small jobs that vary each count on its own: steps, batch, length, width, evaluation sizes, families."""
    wide = {"layers": 2, "dim": 128, "heads": 4}
    design = []
    for steps, batch, size, model in ((1, 8, 6, TINY), (30, 8, 6, TINY), (30, 64, 6, TINY), (20, 16, 24, wide)):
        design.append({"kind": "train", "spec": _spec(["rope"], data={"task": "copy", "size": size}, model=model,
                                                        train={"steps": steps, "batch_size": batch})})  # fmt: skip
    design.append({"kind": "extrapolate", "spec": _spec(["rope"], data=COPY, model=TINY, train={"steps": 1},
                                                         eval={"samples": 200})})  # fmt: skip
    design.append({"kind": "benchmark", "spec": _spec(["rope", "alibi", "nope"], data=COPY, model=TINY,
                                                       train={"steps": 1}, eval={"sizes": [6]})})  # fmt: skip
    design.append({"kind": "train", "spec": _spec(["fox"], data={"task": "copy", "size": 24}, model=wide,
                                                   train={"steps": 15, "batch_size": 16})})  # fmt: skip
    for steps, length, tokens in ((1, 64, 4096), (20, 64, 4096), (10, 256, 4096), (1, 64, 65536)):
        design.append({"kind": "extrapolate", "spec": _spec(["rope"], model=TINY,
                       train={"length": length, "steps": steps, "batch_size": 8},
                       eval={"lengths": [length], "max_tokens": tokens})})  # fmt: skip
    for steps, batch in ((1, 16), (15, 16), (15, 64)):
        design.append({"kind": "train", "spec": _spec(["rope_mixed"], data={"task": "shapes", "image_size": 16},
                                                       model=TINY, train={"steps": steps, "batch_size": batch},
                                                       eval={"samples": 40})})  # fmt: skip
        design.append({"kind": "train", "spec": _spec(["nope"], data={"task": "graph_distance", "num_nodes": 8},
                                                       model=TINY, train={"steps": steps, "batch_size": batch},
                                                       eval={"samples": 40})})  # fmt: skip
    design.append({"kind": "train", "spec": _spec(["rope"], data={"task": "probes"}, model=TINY,
                                                   train={"length": 64, "steps": 15, "batch_size": 8})})  # fmt: skip
    return design


def _time_in_process(body: dict[str, Any]) -> float:
    from posenc.training.hooks import NoHooks
    from posenc.training.jobs import run_job

    create = JobCreate.model_validate(body)
    assert isinstance(create.spec, JobSpec)
    with tempfile.TemporaryDirectory() as root:
        began = time.perf_counter()
        run_job(create.kind, create.spec, job_dir=Path(root), artifact_root=Path(root), hooks=NoHooks(),
                device="cpu", threads=2)  # fmt: skip
        return time.perf_counter() - began


def _features(body: dict[str, Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for group in job_groups(JobCreate.model_validate(body)):
        for key, value in group.features.items():
            total[key] = total.get(key, 0.0) + value
    return total


def _nnls(rows: list[list[float]], targets: list[float]) -> list[float]:
    """Non-negative least squares by dropping the most negative coefficient until none is left."""
    import numpy as np

    a, b = np.array(rows), np.array(targets)
    active = list(range(a.shape[1]))
    while True:
        solution = np.zeros(a.shape[1])
        if active:
            coefficients, *_ = np.linalg.lstsq(a[:, active], b, rcond=None)
            solution[active] = coefficients
        negative = [i for i in active if solution[i] < 0]
        if not negative:
            return [float(value) for value in solution]
        active.remove(min(negative, key=lambda i: solution[i]))


def calibrate() -> None:
    _time_in_process(_design()[0])  # warm-up: first-use imports and allocations
    samples = []
    for body in _design():
        seconds = _time_in_process(body)
        samples.append((_features(body), seconds))
        print(f"{seconds:8.2f} s  {json.dumps(body['spec'])[:110]}", flush=True)
    keys = sorted({key for features, _ in samples for key in features} - {"assemble"})
    rows = [[features.get(key, 0.0) / seconds for key in keys] for features, seconds in samples]
    fit = dict(zip(keys, _nnls(rows, [1.0] * len(rows)), strict=True))
    print("\nseconds per count (in one process; 'process' also gets the service's per-job time):")
    for key in keys:
        print(f"    {key!r}: {fit[key]:.3g},  # default now {SECONDS_PER.get(key, 0.0):.3g}")
    print("\nfit against the design: estimate / measured")
    for features, seconds in samples:
        print(f"    {sum(fit.get(k, 0.0) * v for k, v in features.items()) / seconds:5.2f}"
              f"  (defaults: {seconds_of(features) / seconds:5.2f})")  # fmt: skip


# ------------------------------------------------------------------------------------------------- memory
MEMORY_JOBS: list[dict[str, Any]] = [
    README_QUICKSTART,
    {"kind": "train", "spec": _spec(["rope_mixed"], data={"task": "shapes"}, train={"batch_size": 512, "steps": 1})},
    {
        "kind": "train",
        "spec": _spec(
            ["rope"], train={"length": 512, "batch_size": 16, "steps": 1}, eval={"lengths": [512], "max_tokens": 4096}
        ),
    },
    {
        "kind": "train",
        "spec": _spec(
            ["transformer_xl"],
            data={"task": "copy", "size": 100},
            train={"batch_size": 32, "steps": 1},
            eval={"sizes": [100], "samples": 8},
        ),
    },
    {
        "kind": "extrapolate",
        "spec": _spec(
            ["alibi"],
            data={"task": "probes"},
            train={"length": 64, "steps": 1, "batch_size": 4},
            eval={"lengths": [2048], "samples": 2},
        ),
    },
]
_MEMORY_CHILD = """
import json, resource, sys, tempfile
from pathlib import Path
from posenc.schemas.jobs import JobCreate
from posenc.training.hooks import NoHooks
from posenc.training.jobs import run_job
create = JobCreate.model_validate(json.loads(sys.argv[1]))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with tempfile.TemporaryDirectory() as root:
    run_job(create.kind, create.spec, job_dir=Path(root), artifact_root=Path(root), hooks=NoHooks(), device="cpu")
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
"""


def memory() -> None:
    print(f"{'job':70}{'estimate':>12}{'measured':>12}{'ratio':>8}")
    for body in MEMORY_JOBS:
        out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, json.dumps(body)], capture_output=True, text=True)
        if out.returncode:
            print(out.stderr[-2000:])
            continue
        measured = int(out.stdout.strip().splitlines()[-1])
        estimate = job_memory(JobCreate.model_validate(body))
        assert estimate is not None
        name = json.dumps(body["spec"]["methods"]) + " " + json.dumps(body["spec"].get("data", {}))
        print(f"{name[:70]:70}{human_bytes(estimate.peak):>12}{human_bytes(measured):>12}"
              f"{estimate.peak / measured:>8.2f}", flush=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default=None, help="a running gateway (default: start a fresh posenc serve)")
    parser.add_argument("--only", nargs="*", default=None, choices=list(JOBS), help="these jobs only")
    parser.add_argument("--calibrate", action="store_true", help="fit the default seconds per count in-process")
    parser.add_argument("--memory", action="store_true", help="memory estimate against measured peak")
    args = parser.parse_args()
    if args.calibrate:
        calibrate()
        return 0
    if args.memory:
        memory()
        return 0
    names = args.only or list(JOBS)
    if args.base_url:
        accuracy(args.base_url, names)
        return 0
    with fresh_serve() as url:
        accuracy(url, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
