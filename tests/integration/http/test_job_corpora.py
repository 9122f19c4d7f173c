"""A job's corpus is a registered name or a file under the data directories, checked by the real app at
submission (POST /v1/jobs, a real Redis behind it) and again by a real worker with its own settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from posenc.corpora import CORPUS_RULE

pytestmark = pytest.mark.integration

TEXT = "Whether 'tis nobler in the mind to suffer the slings and arrows of outrageous fortune. " * 40


def _listed(client: Any) -> list[str]:
    response = client.get("/v1/jobs")
    assert response.status_code == 200, response.text
    return [job["id"] for job in response.json()["data"]]


def test_paths_outside_the_data_dir_are_422_with_the_message_of_a_missing_file(
    make_client: Any, redis_url: str, data_dir: Path, tmp_path: Path, wire: Any, jobs: Any
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:not a corpus\n")
    (data_dir / "corpus.txt").write_text(TEXT)
    (data_dir / "escape.txt").symlink_to(secret)
    (data_dir / "sub").mkdir()
    client = make_client(redis_url=redis_url, data_dir=data_dir)

    refused = {
        "/etc/passwd": "a system file",
        str(secret): "an existing file outside, absolute",
        "../secret.txt": "'..' out of the data dir to an existing file",
        "escape.txt": "a symlink in the data dir pointing outside",
        str(data_dir / "escape.txt"): "the same symlink by absolute path",
        "sub": "a directory",
        "missing.txt": "a missing file inside",
        str(data_dir / "missing.txt"): "a missing file inside, absolute",
        "../missing.txt": "a missing file outside",
    }
    bodies = {}
    for name in refused:
        response = client.post("/v1/jobs", json=jobs.request(Path(name), steps=5))
        problem = wire.problem(response, 422)
        [error] = problem["errors"]
        assert error["loc"] == ["body", "spec", "data", "corpus"], (name, problem)
        assert error["msg"] == CORPUS_RULE, (name, problem)
        bodies[name] = json.dumps(problem, sort_keys=True)
    assert len(set(bodies.values())) == 1, bodies  # byte for byte: nothing tells an existing path from a missing one
    assert "secret" not in next(iter(bodies.values()))
    assert _listed(client) == []  # nothing was queued

    relative = client.post("/v1/jobs", json=jobs.request(Path("corpus.txt"), steps=5))
    absolute = client.post("/v1/jobs", json=jobs.request(data_dir / "corpus.txt", steps=5))
    registered = client.post("/v1/jobs", json=jobs.request(Path("stdlib"), steps=5))
    for accepted in (relative, absolute, registered):
        assert accepted.status_code == 202, accepted.text
    assert len(_listed(client)) == 3


def test_a_file_only_the_gateway_can_see_fails_on_the_worker_with_the_same_message(
    make_client: Any, redis_url: str, start_worker: Any, tmp_path: Path, jobs: Any
) -> None:
    # The worker's POSENC_DATA_DIR is the data_dir fixture (job_env); the gateway is configured with another.
    gateway_only = tmp_path / "gateway-data"
    gateway_only.mkdir()
    (gateway_only / "corpus.txt").write_text(TEXT)
    start_worker()
    client = make_client(redis_url=redis_url, data_dir=gateway_only)

    response = client.post("/v1/jobs", json=jobs.request(gateway_only / "corpus.txt", steps=5))
    assert response.status_code == 202, response.text
    job = jobs.wait(client, response.json()["id"], jobs.is_terminal, timeout=120)
    assert job["status"] == "failed", job
    assert CORPUS_RULE in job["error"], job
    assert job["artifacts"] == []  # nothing was trained
