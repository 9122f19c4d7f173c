"""``train.until`` through the job API: a real worker trains a tiny copy_single model until it has learned, and the
result says the step it stopped at; a text job without a threshold is refused naming ``train.until.score``."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration

CAP = 600
EVERY = 10


def test_a_train_job_with_until_stops_once_learned(start_gateway: Any, start_worker: Any, jobs: Any) -> None:
    spec = {
        "methods": [{"method": "rope"}],
        "data": {"task": "copy_single", "size": 4},
        "model": {"layers": 1, "dim": 32, "heads": 2},
        "train": {
            "steps": CAP,
            "batch_size": 16,
            "lr": 3e-3,
            "warmup_steps": 10,
            "checkpoint_every": 30,
            "until": {"every": EVERY, "samples": 32},
        },
        "eval": {"samples": 32},
        "device": "cpu",
    }
    gateway = start_gateway()
    start_worker()
    with gateway.client() as client:
        # text has no rule of having learned: a threshold is needed, and the error names where it goes
        text = {"methods": [{"method": "rope"}], "data": {"corpus": "stdlib"}, "train": {"until": {"every": 5}}}
        refused = client.post("/v1/jobs", json={"kind": "train", "spec": text})
        assert refused.status_code == 422, refused.text
        assert ["body", "spec", "train", "until", "score"] in [e["loc"] for e in refused.json()["errors"]]

        created = client.post("/v1/jobs", json={"kind": "train", "spec": spec})
        assert created.status_code == 202, created.text
        done = jobs.wait(client, created.json()["id"], jobs.is_terminal, timeout=300)
        assert done["status"] == "succeeded", done
        [run] = done["result"]["runs"]
        needed = run["steps_needed"]
        assert needed is not None, run["until"]
        assert needed < CAP
        assert needed % EVERY == 0
        until = run["until"]
        assert (until["score"], until["every"], until["reached"]) == (None, EVERY, True)
        assert [step for step, _ in until["checks"]] == list(range(EVERY, needed + 1, EVERY))
        assert until["checks"][-1][1] >= 0.9
        assert all(value < 0.9 for _, value in until["checks"][:-1])
        assert run["steps"] == CAP
        assert len(done["result"]["loss_curve"]) <= needed
        assert done["result"]["loss_curve"][-1][0] == needed  # the curve ends where training stopped
        assert done["progress"]["step"] == done["progress"]["total"] == CAP  # progress counts the cap
