"""Benchmarks fan out: each (method, seed) run is a job of its own on any worker, the benchmark puts them together.

Real Redis, real ``posenc worker`` processes, the gateway over HTTP. Tiny specs (1 layer, dim 16, the copy_single
task of size 4): a run of a few hundred steps takes about a second on one core.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from posenc import runtime
from posenc.jobstore import JobStore

pytestmark = pytest.mark.integration

CHECKPOINT_EVERY = 5
STEPS = 400  # a run: about a second of training on one core (at 150 the runs could end between two polls)


def benchmark(
    steps: int, *, methods: tuple[str, ...] = ("rope", "alibi"), seeds: tuple[int, ...] = (0, 1)
) -> dict[str, Any]:
    return {
        "kind": "benchmark",
        "spec": {
            "methods": [{"method": method} for method in methods],
            "data": {"task": "copy_single", "size": 4},
            "model": {"layers": 1, "dim": 16, "heads": 2},
            "train": {"steps": steps, "batch_size": 8, "warmup_steps": 5, "checkpoint_every": CHECKPOINT_EVERY},
            "eval": {"samples": 10},
            "seeds": list(seeds),
            "device": "cpu",
        },
    }


def get(client: httpx.Client, job_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/jobs/{job_id}")
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    return job


def children(client: httpx.Client, parent: str) -> list[dict[str, Any]]:
    listed = client.get("/v1/jobs", params={"parent": parent})
    assert listed.status_code == 200, listed.text
    runs: list[dict[str, Any]] = listed.json()["data"]
    return runs


def hosts(store: JobStore, job_id: str) -> list[str]:
    """The worker of each attempt, from the job's events ('running attempt N fence F on <hostname>|time')."""
    return [e.split(" on ", 1)[1].split("|")[0] for e in store.events(job_id) if e.startswith("running attempt")]


def stack(start_gateway: Any, start_worker: Any, workers: int) -> tuple[Any, list[Any]]:
    """The gateway and ``workers`` workers; the gateway starts while the workers do (each takes seconds)."""
    with ThreadPoolExecutor(1) as pool:
        gateway = pool.submit(start_gateway)
        started = [start_worker() for _ in range(workers)]
        return gateway.result(), started


def parked(client: httpx.Client, parent: str, jobs: Any, running: int = 1, step: int = 1) -> dict[str, Any]:
    """Wait until the benchmark has fanned out and ``running`` of its runs are at ``step`` or more."""

    def there(job: dict[str, Any]) -> bool:
        return int(sum(c["status"] == "running" and c["step"] >= step for c in job["children"])) >= running

    seen: dict[str, Any] = jobs.wait(client, parent, there, timeout=90)
    return seen


def test_a_benchmark_runs_on_both_workers_sums_their_progress_assembles_the_table_of_one_process_and_cancels(
    start_gateway: Any, start_worker: Any, store: JobStore, jobs: Any, tmp_path: Path
) -> None:
    gateway, workers = stack(start_gateway, start_worker, 2)
    body = benchmark(steps=STEPS)
    per_run = STEPS + 10  # training steps, and one per evaluated size (1 ... 8, 12, 16)
    with gateway.client() as client:
        created = client.post("/v1/jobs", json=body)
        assert created.status_code == 202, created.text
        parent = created.json()["id"]
        running = parked(client, parent, jobs, running=2, step=10)
        assert running["status"] == "running"
        assert [(c["method"], c["seed"]) for c in running["children"]] == [
            ("rope", 0), ("rope", 1), ("alibi", 0), ("alibi", 1)
        ]  # fmt: skip

        # The benchmark's progress is its runs' summed: read between two readings of the runs, it lies between.
        before = sum(c["progress"]["step"] for c in children(client, parent))
        during = get(client, parent)["progress"]
        after = sum(c["progress"]["step"] for c in children(client, parent))
        assert before <= during["step"] <= after, (before, during, after)
        assert during["total"] == 4 * per_run
        assert during["eta_s"] is not None, during  # from the pace since the benchmark started
        assert "running" in during["stage"], during  # e.g. "1 of 4 runs ended; running rope seed 1, alibi seed 0"

        done = jobs.wait(client, parent, jobs.is_terminal, timeout=120)
        assert done["status"] == "succeeded", done
        assert done["progress"]["step"] == done["progress"]["total"] == 4 * per_run
        assert done["progress"]["eta_s"] == 0.0
        assert done["result"]["resumed_from_step"] == 0
        assert {a["name"] for a in done["artifacts"]} >= {"table.csv", "table.json", "plot.png"}
        runs = children(client, parent)
        assert [run["id"] for run in runs] == [c["id"] for c in done["children"]]
        assert all(run["status"] == "succeeded" and run["parent"] == parent for run in runs)
        assert all(run["attempts"] == 1 for run in runs)
        # ... on both workers, and hidden from the listing of jobs
        ran_on = {host for run in runs for host in hosts(store, run["id"])}
        for worker in workers:
            assert any(f"-{worker.pid}@" in host for host in ran_on), (worker.pid, ran_on)
        assert [job["id"] for job in client.get("/v1/jobs").json()["data"]] == [parent]
        assert sum(e.startswith("parked") for e in store.events(parent)) == 1
        assert any(e.startswith("woken") for e in store.events(parent))

        # Every fresh run measured its speed over the defaults for its queue, family and attention path: a new
        # job's estimate is its counts' default seconds scaled by that factor.
        # Each attempt also measured its time outside that work, counted once per process.
        from posenc.job_estimates import estimate_seconds, job_groups, overhead_key, speed_key
        from posenc.schemas.jobs import JobCreate

        key = speed_key("cpu", "sequence", "fused")
        speed, overhead = store.throughput(key), store.throughput(overhead_key("cpu"))
        assert speed is not None
        assert speed > 0
        assert overhead is not None
        assert overhead > 0
        long_body = benchmark(steps=20_000)
        queued = client.post("/v1/jobs", json=long_body).json()
        measured = {key: speed, overhead_key("cpu"): overhead}
        expected = estimate_seconds(job_groups(JobCreate.model_validate(long_body)), "cpu", measured)
        assert queued["estimate_s"] == pytest.approx(expected, abs=0.1)

        # Cancelling a benchmark cancels its queued runs at once, stops the running ones, then ends itself.
        cancelled = queued["id"]
        parked(client, cancelled, jobs, running=2, step=10)
        cancel = client.post(f"/v1/jobs/{cancelled}/cancel")
        assert cancel.status_code == 202, cancel.text  # two runs are running: it ends once they have stopped
        queued_at_cancel = [c for c in cancel.json()["children"] if c["status"] != "running"]
        assert [c["status"] for c in queued_at_cancel] == ["cancelled"] * 2, cancel.json()
        ended = jobs.wait(client, cancelled, jobs.is_terminal, timeout=30)
        assert ended["status"] == "cancelled", ended
        runs = children(client, cancelled)
        assert [run["status"] for run in runs] == ["cancelled"] * 4
        assert all(run["progress"]["step"] < 20_000 and run["attempts"] <= 1 for run in runs), runs
        assert ended["finished_at"] >= max(run["finished_at"] for run in runs)  # after its last run ended
        assert client.post(f"/v1/jobs/{cancelled}/cancel").status_code == 409
        assert client.post(f"/v1/jobs/{runs[0]['id']}/cancel").status_code == 409

    # The same table as one process computes for the same spec (training is deterministic on the CPU per seed).
    from posenc.schemas.jobs import JobSpec
    from posenc.training.hooks import NoHooks
    from posenc.training.jobs import run_job

    whole = run_job(
        "benchmark",
        JobSpec.model_validate(body["spec"]),
        job_dir=tmp_path / "whole",
        artifact_root=tmp_path,
        hooks=NoHooks(),
        threads=1,
    )
    assert done["result"]["table"] == whole["table"]
    assert done["result"]["summary"] == whole["summary"]


def test_a_worker_killed_mid_run_loses_only_that_runs_progress_since_its_checkpoint(
    start_gateway: Any, start_worker: Any, store: JobStore, jobs: Any
) -> None:
    gateway, (doomed, survivor) = stack(start_gateway, start_worker, 2)
    with gateway.client() as client:
        parent = client.post("/v1/jobs", json=benchmark(steps=4 * STEPS)).json()["id"]

        def doomed_run_far_enough(job: dict[str, Any]) -> bool:
            # past a few checkpoints and short of half its steps: progress is written at most every 0.5 s, so a
            # run seen near its end could finish before the kill lands (and never be requeued)
            return any(
                c["status"] == "running"
                and 6 * CHECKPOINT_EVERY <= c["step"] <= c["total"] // 2
                and any(f"-{doomed.pid}@" in host for host in hosts(store, c["id"]))
                for c in job["children"]
            )

        seen = jobs.wait(client, parent, doomed_run_far_enough, timeout=90)
        doomed.kill_all()  # parent and child at once: nothing is handed back, only the lease can tell
        (killed,) = [
            c for c in seen["children"] if c["status"] == "running" and f"-{doomed.pid}@" in hosts(store, c["id"])[-1]
        ]

        done = jobs.wait(client, parent, jobs.is_terminal, timeout=120)
        assert done["status"] == "succeeded", done
        assert survivor.process.poll() is None
        # the listing gives summaries: each run's whole record (its result) is its own GET
        runs = {run["id"]: get(client, run["id"]) for run in children(client, parent)}
        resumed = runs[killed["id"]]
        assert resumed["attempts"] == 2
        assert any(e.startswith("requeued (lease expired)") for e in store.events(killed["id"]))
        # resumed from its last checkpoint, not from the start and not beyond what it had run
        assert killed["step"] - 2 * CHECKPOINT_EVERY <= resumed["result"]["resumed_from_step"] <= killed["step"] + 60
        assert resumed["result"]["resumed_from_step"] >= CHECKPOINT_EVERY
        # no other run ran twice
        others = [run for run_id, run in runs.items() if run_id != killed["id"]]
        assert all(run["attempts"] == 1 and run["result"]["resumed_from_step"] == 0 for run in others), others
        assert done["result"]["resumed_from_step"] == resumed["result"]["resumed_from_step"]
        assert len(done["result"]["table"]) > 0


def test_a_short_job_submitted_after_a_benchmark_does_not_wait_for_its_runs(
    start_gateway: Any, start_worker: Any, store: JobStore, jobs: Any
) -> None:
    gateway, _ = stack(start_gateway, start_worker, 1)
    with gateway.client() as client:
        parent = client.post("/v1/jobs", json=benchmark(steps=STEPS // 2, seeds=(0, 1, 2))).json()["id"]
        parked(client, parent, jobs)  # its first run is running, five are queued
        train = benchmark(steps=20, methods=("rope",), seeds=(0,)) | {"kind": "train"}
        # a layer pattern written out (one layer: a window of 3, half the head rotated), run by the worker
        train["spec"]["methods"] = [{"method": "rope", "layers": [{"window": 3, "rotary_fraction": 0.5}]}]
        short = client.post("/v1/jobs", json=train).json()["id"]
        finished = jobs.wait(client, short, jobs.is_terminal, timeout=60)
        assert finished["status"] == "succeeded", finished
        assert finished["result"]["layers"] == [
            {"method": "rope", "params": {}, "rotary_fraction": 0.5, "window": 3, "chunk": None, "temperature": None}
        ]
        done = jobs.wait(client, parent, jobs.is_terminal, timeout=90)
        assert done["status"] == "succeeded", done
        starts = sorted(run["started_at"] for run in children(client, parent))
        assert len(starts) == 6
        assert finished["finished_at"] < starts[-1], (finished["finished_at"], starts)
        # it waited for the run in progress at most: at most two had started when it did
        assert sum(start < finished["started_at"] for start in starts) <= 2, (finished["started_at"], starts)


def test_the_sweep_publishes_a_benchmark_whose_runs_ended_when_nobody_else_did(
    start_worker: Any, store: JobStore
) -> None:
    """What a worker that dies at the wrong moment leaves behind, written through the store as that worker wrote
    it: two parked benchmarks whose runs have all ended, one never woken (the task of its last run died after
    the run's end) and one woken but never published (the waker died before its publish). A worker's sweep
    publishes both; each then ends (cancelled, as its runs were)."""
    spec = benchmark(steps=20)["spec"]
    for parent in ("never-woken", "woken-unpublished"):
        store.create(parent, "benchmark", spec, "cpu", priority=9)
        store.mark_published(parent)
        claim = store.claim(parent, worker="dying-worker", lease_ttl_s=30, max_attempts=3)
        runs = [(f"{parent}-run{n}", {"method": "rope", "index": 0, "seed": n, "total": 30}) for n in range(2)]
        assert store.park(parent, claim.fence, children=runs, child_priority=9) == ("parked", 2)
        for child_id, _ in runs:
            store.mark_published(child_id)  # published, delivered, ...
            child = store.claim(child_id, worker="dying-worker", lease_ttl_s=30, max_attempts=3)
            assert store.finish(child_id, child.fence, "cancelled")  # ... and ended; then the worker died
    assert store.wake_parent("woken-unpublished", grace_s=2, priority=0) == "woken"  # and died before publishing
    assert store.wake_parent("woken-unpublished", grace_s=2, priority=0) == "recent"
    assert store.get("never-woken").status == store.get("woken-unpublished").status == "running"  # type: ignore[union-attr]

    start_worker()  # its sweeps (at start, then every 0.5 s) publish both
    for parent in ("never-woken", "woken-unpublished"):
        assert runtime.wait_until(lambda: store.get(parent).status == "cancelled", timeout=30), store.events(parent)  # type: ignore[union-attr]  # noqa: B023
        events = store.events(parent)
        assert sum(e.startswith("running attempt") for e in events) == 2, events
        assert sum(e.startswith("woken") for e in events) == (1 if parent == "never-woken" else 2), events
        assert parent not in store.parked_jobs()


def test_a_context_extension_study_trains_its_base_model_once_across_workers_and_its_events_say_so(
    start_gateway: Any, start_worker: Any, jobs: Any
) -> None:
    gateway, _ = stack(start_gateway, start_worker, 2)
    spec = {
        "methods": [{"method": "rope_ntk"}, {"method": "rope_yarn"}],
        "extension": {"factor": 2, "finetune_steps": 3},
        "data": {"task": "probes", "probes": ["passkey"]},
        "model": {"layers": 1, "dim": 16, "heads": 2},
        "train": {"length": 48, "steps": 60, "batch_size": 4, "checkpoint_every": 20},
        "eval": {"lengths": [32, 48, 96], "samples": 3},
        "seeds": [0],
        "device": "cpu",
    }
    with gateway.client() as client:
        created = client.post("/v1/jobs", json={"kind": "benchmark", "spec": spec})
        assert created.status_code == 202, created.text
        parent = created.json()["id"]
        done = jobs.wait(client, parent, jobs.is_terminal, timeout=180)
        assert done["status"] == "succeeded", done
        assert [child["method"] for child in done["children"]] == [
            "base", "rope_ntk", "rope_yarn", "base+ft", "rope_ntk+ft", "rope_yarn+ft"
        ]  # fmt: skip
        assert done["result"]["study"]["base_trained"] == {"0": 1}
        assert done["result"]["findings"], done["result"]
        events = client.get(f"/v1/jobs/{parent}/events")
        assert events.status_code == 200, events.text
        lines = [event["event"] for event in events.json()["data"]]
        trained = [line for line in lines if "base model seed 0: trained by run" in line]
        reused = [line for line in lines if "base model seed 0: reused by run" in line]
        assert len(trained) == 1, lines
        assert len(reused) == 5, lines
        assert all(event["at"].startswith("20") for event in events.json()["data"])
        assert client.get("/v1/jobs/no-such-job/events").status_code == 404
