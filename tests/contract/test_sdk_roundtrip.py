"""Server responses validate against the SDK's generated models, and the SDK knows every field they carry."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from posenc_client import _models as sdk
from pydantic import BaseModel
from starlette.testclient import TestClient

from posenc.schemas import jobs as server_jobs
from posenc.settings import Settings
from service.main import create_app


def unknown_fields(model: Any, path: str = "") -> list[str]:
    """Fields the server sent that the SDK model does not declare (extra='allow' keeps them silently)."""
    found: list[str] = []
    if isinstance(model, BaseModel):
        found += [f"{path}.{name}" for name in (model.model_extra or {})]
        for name in type(model).model_fields:
            found += unknown_fields(getattr(model, name), f"{path}.{name}")
    elif isinstance(model, list):
        for index, item in enumerate(model):
            found += unknown_fields(item, f"{path}[{index}]")
    return found


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(state_dir=tmp_path_factory.mktemp("state"), redis_url=None, api_keys=[])
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


def test_method_catalogue(client: TestClient) -> None:
    listing = sdk.MethodList.model_validate_json(client.get("/v1/methods").content)
    assert listing.count == len(listing.data) > 0
    assert unknown_fields(listing) == []
    one = sdk.MethodInfo.model_validate_json(client.get(f"/v1/methods/{listing.data[0].name}").content)
    assert one == listing.data[0]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/bias", {"method": "alibi", "num_heads": 2, "query_length": 3}),
        ("/v1/encodings", {"method": "sinusoidal", "length": 4, "dim": 4}),
        ("/v1/rotary", {"method": "rope", "q": {"random": {"shape": [1, 1, 2, 4]}}, "rotate": "query"}),
        (
            "/v1/attention",
            {
                "method": "alibi",
                "q": {"random": {"shape": [1, 2, 3, 4]}},
                "k": {"random": {"shape": [1, 2, 3, 4]}},
            },
        ),
    ],
)
def test_tensor_responses(client: TestClient, path: str, body: dict[str, Any]) -> None:
    response = client.post(path, json=body, headers={"Accept": "application/json"})
    assert response.status_code == 200, response.text
    parsed = sdk.TensorResponse.model_validate_json(response.content)
    assert parsed.tensors
    assert unknown_fields(parsed) == []
    # The SDK request model accepts what we just sent.
    request_model = {
        "/v1/bias": sdk.BiasRequest,
        "/v1/encodings": sdk.EncodingRequest,
        "/v1/rotary": sdk.RotaryRequest,
        "/v1/attention": sdk.AttentionRequest,
    }[path]
    assert unknown_fields(request_model.model_validate(body)) == []


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/v1/methods/no_such_method", None, 404),
        ("POST", "/v1/bias", {"method": "alibi", "num_heads": 0, "query_length": 4}, 422),
        ("POST", "/v1/bias", {"method": "alibi", "num_heads": 64, "query_length": 65536}, 413),
    ],
)
def test_problem_responses(
    client: TestClient, method: str, path: str, body: dict[str, Any] | None, status: int
) -> None:
    response = client.request(method, path, json=body)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    problem = sdk.Problem.model_validate_json(response.content)
    assert problem.status == status
    assert unknown_fields(problem) == []


def test_job_records(tmp_path: Path) -> None:
    """A full job record as the server models it (every optional part filled) parses into the SDK's Job."""
    now = datetime.now(UTC)
    create = server_jobs.JobCreate.model_validate(
        {"kind": "benchmark", "spec": {"methods": [{"method": "rope"}, {"method": "alibi"}]}}
    )
    job = server_jobs.Job(
        id="abc123",
        kind="benchmark",
        status="succeeded",
        progress=server_jobs.JobProgress(step=10, total=10, loss=1.5, eta_s=0.0, stage="eval 256"),
        result={"table": [{"method": "rope", "seed": 0, "length": 128, "metric": "perplexity", "value": 3.2}]},
        error=None,
        artifacts=[server_jobs.Artifact(name="plot.png", url="/v1/jobs/abc123/artifacts/plot.png", size=10)],
        spec=create.spec.model_dump(mode="json"),
        created_at=now,
        started_at=now,
        finished_at=now,
        updated_at=now,
    )
    parsed = sdk.Job.model_validate_json(job.model_dump_json())
    assert unknown_fields(parsed) == []
    assert parsed.status == "succeeded"
    summary = server_jobs.JobSummary(
        **job.model_dump(include=set(server_jobs.JobSummary.model_fields) - {"error", "parent"}),
        error="a failure",
        methods=["rope", "alibi"],
        parent="abc",
        runs=2,
    )
    listing = sdk.JobList.model_validate_json(server_jobs.JobList(data=[summary], count=1).model_dump_json())
    assert unknown_fields(listing) == []
    assert listing.data[0].model_dump(mode="json") == summary.model_dump(mode="json")
    assert listing.data[0].progress == parsed.progress
    sent = sdk.JobCreate.model_validate(create.model_dump(mode="json"))
    assert unknown_fields(sent) == []
