"""A run of a benchmark that fanned out shows its own setup: ``GET /v1/jobs/{run}`` answers with the run's method
entry and seed as its spec (not every run's), while the benchmark keeps its whole spec and its table.

Real Redis, a real ``posenc worker``, the gateway over HTTP; a tiny benchmark (two methods, two seeds, 1 layer of
dim 16, 30 steps: each run takes about a second on one core).
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration

SPEC = {
    "methods": [{"method": "rope"}, {"method": "alibi", "label": "alibi-causal"}],
    "data": {"task": "copy_single", "size": 4},
    "model": {"layers": 1, "dim": 16, "heads": 2},
    "train": {"steps": 30, "batch_size": 8, "warmup_steps": 5},
    "eval": {"samples": 10},
    "seeds": [0, 1],
    "device": "cpu",
}


def test_each_run_of_a_benchmark_shows_its_own_method_and_seed(
    start_gateway: Any, start_worker: Any, jobs: Any
) -> None:
    start_worker()
    gateway = start_gateway()
    with gateway.client() as client:
        created = client.post("/v1/jobs", json={"kind": "benchmark", "spec": SPEC})
        assert created.status_code == 202, created.text
        parent = created.json()["id"]
        done = jobs.wait(client, parent, jobs.is_terminal, timeout=240)
        assert done["status"] == "succeeded", done
        assert [entry["method"] for entry in done["spec"]["methods"]] == ["rope", "alibi"]
        assert done["spec"]["seeds"] == [0, 1]
        assert len(done["children"]) == 4

        seen = []
        for child in done["children"]:
            answer = client.get(f"/v1/jobs/{child['id']}")
            assert answer.status_code == 200, answer.text
            run = answer.json()
            assert run["parent"] == parent
            (entry,) = run["spec"]["methods"]
            assert run["spec"]["seeds"] == [child["seed"]]
            assert (entry.get("label") or entry["method"]) == child["method"]
            assert run["spec"]["train"]["steps"] == 30
            assert run["result"]["method"] == entry["method"]  # the run's record agrees with the spec it shows
            seen.append((entry["method"], run["spec"]["seeds"][0]))
        assert sorted(seen) == [("alibi", 0), ("alibi", 1), ("rope", 0), ("rope", 1)]

        listed = client.get("/v1/jobs", params={"parent": parent})
        assert listed.status_code == 200, listed.text
        assert [summary["methods"] for summary in listed.json()["data"]] == [
            [child["method"]] for child in done["children"]
        ]
