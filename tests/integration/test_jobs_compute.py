"""A compute request over the gateway's output budget, run as the compute job its 413 points to (real Redis,
a real Celery worker, the gateway under uvicorn)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import safetensors.torch
import torch

from posenc.jobstore import JobStore
from posenc.pe import BiasContext, bias_dense, get_method

pytestmark = pytest.mark.integration

OUTPUT_LIMIT = 100_000  # the gateway's budget for compute routes, in bytes
JOB_LIMIT = 10_000_000  # the budget of a compute job
# 4 x 96 x 80 float32 = 122,880 bytes of output (plus as much workspace): over the route's budget, not the job's
REQUEST = {"method": "alibi", "num_heads": 4, "query_length": 96, "key_length": 80, "params": {"max_bias": 4.0}}


def test_an_output_over_the_budget_runs_as_the_compute_job_its_413_names(
    start_gateway: Any, start_worker: Any, store: JobStore, job_env: dict[str, str], jobs: Any
) -> None:
    gateway = start_gateway(
        env=job_env | {"POSENC_MAX_OUTPUT_BYTES": str(OUTPUT_LIMIT), "POSENC_MAX_JOB_OUTPUT_BYTES": str(JOB_LIMIT)}
    )
    start_worker()
    with gateway.client() as client:
        refused = client.post("/v1/bias", json=REQUEST, headers={"Accept": "application/octet-stream"})
        assert refused.status_code == 413, refused.text
        problem = refused.json()
        assert problem["size"] > OUTPUT_LIMIT
        assert problem["limit"] == OUTPUT_LIMIT
        hint = 'POST /v1/jobs {"kind": "compute", "spec": {"route": "bias", "request": <this body>}}'
        assert hint in problem["detail"]
        assert "tensors.safetensors" in problem["detail"]

        # ... and the job it names takes the same body and succeeds.
        created = client.post("/v1/jobs", json={"kind": "compute", "spec": {"route": "bias", "request": REQUEST}})
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        assert created.json()["kind"] == "compute"
        assert created.json()["queue"] == "cpu"
        done = jobs.wait(client, job_id, jobs.is_terminal)
        assert done["status"] == "succeeded", done
        assert (done["progress"]["step"], done["progress"]["total"]) == (1, 1)
        result = done["result"]
        assert result["route"] == "bias"
        assert result["artifact"] == "tensors.safetensors"
        assert result["tensors"] == {"bias": {"dtype": "float32", "shape": [4, 96, 80]}}
        assert result["meta"]["method"] == "alibi"
        assert result["meta"]["params"]["max_bias"] == 4.0
        assert "tensors.safetensors" in {artifact["name"] for artifact in done["artifacts"]}

        download = client.get(f"/v1/jobs/{job_id}/artifacts/tensors.safetensors")
        assert download.status_code == 200, download.text
        assert download.headers["content-type"] == "application/vnd.safetensors"
        tensors = safetensors.torch.load(download.content)
        method = get_method("alibi")
        context = BiasContext(num_heads=4, query_length=96, key_length=80, causal=True)
        expected = bias_dense(method, method.parse_params({"max_bias": 4.0}), context)
        assert list(tensors) == ["bias"]
        assert tensors["bias"].dtype == torch.float32
        assert torch.equal(tensors["bias"], expected)
        metadata = json.loads(download.content[8 : 8 + int.from_bytes(download.content[:8], "little")])
        assert json.loads(metadata["__metadata__"]["method"]) == "alibi"
        assert json.loads(metadata["__metadata__"]["key_length"]) == 80

        listed = client.get("/v1/jobs", params={"kind": "compute"}).json()
        assert [job["id"] for job in listed["data"]] == [job_id]
        assert store.events(job_id)[-1].startswith("succeeded")


def test_a_compute_job_is_checked_at_submission(start_gateway: Any, store: JobStore, job_env: dict[str, str]) -> None:
    """No worker is needed: what the route would refuse, the submission refuses, and nothing is queued."""
    gateway = start_gateway(env=job_env | {"POSENC_MAX_JOB_OUTPUT_BYTES": str(JOB_LIMIT)})

    def submit(route: str, request: dict[str, Any], kind: str = "compute") -> dict[str, Any]:
        response = client.post("/v1/jobs", json={"kind": kind, "spec": {"route": route, "request": request}})
        assert response.headers["content-type"].startswith("application/problem+json"), response.text
        return {"status": response.status_code, **response.json()}

    with gateway.client() as client:
        unknown = submit("bias", REQUEST | {"method": "no_such_method"})
        assert unknown["status"] == 404
        assert "no_such_method" in unknown["detail"]

        bad_params = submit("bias", REQUEST | {"params": {"max_bias": 4.0, "no_such_param": 1}})
        assert bad_params["status"] == 422
        assert [error["loc"] for error in bad_params["errors"]] == [
            ["body", "spec", "request", "params", "no_such_param"]
        ]

        wrong_value = submit("bias", REQUEST | {"params": {"max_bias": -1}})
        assert wrong_value["status"] == 422
        assert wrong_value["errors"][0]["loc"] == ["body", "spec", "request", "params", "max_bias"]

        missing = submit("bias", {"method": "alibi", "query_length": 4})
        assert missing["status"] == 422
        assert [error["loc"] for error in missing["errors"]] == [["body", "spec", "request", "num_heads"]]

        wrong_kind = submit("bias", REQUEST | {"method": "rope"})
        assert wrong_kind["status"] == 422
        assert wrong_kind["errors"][0]["loc"] == ["body", "spec", "request", "method"]

        training_spec = client.post("/v1/jobs", json={"kind": "compute", "spec": {"methods": [{"method": "rope"}]}})
        assert training_spec.status_code == 422
        assert training_spec.json()["errors"][0]["loc"] == ["body", "spec"]
        assert "a compute job takes a spec {'route', 'request'}" in training_spec.json()["detail"]

        too_big = submit("bias", {"method": "alibi", "num_heads": 64, "query_length": 1024})
        assert too_big["status"] == 413
        assert too_big["size"] == 2 * 64 * 1024 * 1024 * 4
        assert too_big["limit"] == JOB_LIMIT
        assert "max_job_output_bytes" in too_big["detail"]

    assert store.list_jobs() == []
