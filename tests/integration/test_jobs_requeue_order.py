"""A job requeued after its worker died keeps its place: it is claimed again before the jobs queued after it.

Two real workers of one slot each. One runs the job that will be orphaned, the other a long job that keeps it
busy; more jobs queue behind both. The first worker is killed (kill -9, parent and child): the survivor's sweep
requeues the orphan once its lease expires. Then the long job is cancelled, and the survivor's next claim must
be the orphan, not the oldest of the jobs submitted while it was running.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from posenc import runtime
from posenc.jobstore import JobStore

pytestmark = pytest.mark.integration

LATER_JOBS = 3


def claims(store: JobStore, job_id: str) -> list[tuple[datetime, str]]:
    """When each attempt was claimed, and by which worker ('running attempt N fence F on <hostname>|time')."""
    found = []
    for event in store.events(job_id):
        if event.startswith("running attempt"):
            text, _, at = event.rpartition("|")
            found.append((datetime.fromisoformat(at), text.split(" on ", 1)[1]))
    return found


def test_a_job_requeued_after_its_worker_died_is_claimed_before_the_jobs_queued_after_it(
    start_gateway: Any, start_worker: Any, store: JobStore, corpus: Path, jobs: Any
) -> None:
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(start_gateway)
        workers = [start_worker(), start_worker()]
        gateway = starting.result()
    with gateway.client() as client:

        def submit(steps: int) -> str:
            created = client.post("/v1/jobs", json=jobs.request(corpus, steps=steps))
            assert created.status_code == 202, created.text
            job_id: str = created.json()["id"]
            return job_id

        orphan = submit(600)
        jobs.wait(client, orphan, lambda j: j["status"] == "running" and j["progress"]["step"] >= 20)
        blocker = submit(20_000)  # the other worker's only slot, until it is cancelled below
        jobs.wait(client, blocker, lambda j: j["status"] == "running")
        later = [submit(20) for _ in range(LATER_JOBS)]  # both slots are busy: these wait in the queue
        (doomed,) = [w for w in workers if f"-{w.pid}@" in claims(store, orphan)[0][1]]
        (survivor,) = [w for w in workers if w is not doomed]

        doomed.kill_all()  # nothing is handed back: only the lease tells, and the survivor's sweep requeues
        requeued = runtime.wait_until(
            lambda: any(e.startswith("requeued (lease expired)") for e in store.events(orphan)), timeout=60
        )
        assert requeued, store.events(orphan)
        assert client.get(f"/v1/jobs/{orphan}").json()["status"] == "queued"
        assert all(client.get(f"/v1/jobs/{job_id}").json()["status"] == "queued" for job_id in later)
        assert client.post(f"/v1/jobs/{blocker}/cancel").status_code == 202  # the survivor's slot frees

        done = {job_id: jobs.wait(client, job_id, jobs.is_terminal, timeout=120) for job_id in [orphan, *later]}

    assert all(job["status"] == "succeeded" for job in done.values()), done
    assert done[orphan]["attempts"] == 2
    (first, _), (again, host) = claims(store, orphan)
    assert f"-{survivor.pid}@" in host
    started = sorted(claims(store, job_id)[0][0] for job_id in later)
    # claimed again before every job submitted while it ran (without the raised step it came after all three)
    assert first < again < started[0], (first, again, started)
