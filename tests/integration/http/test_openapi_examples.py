"""Every operation of the OpenAPI document has a valid request example (what Swagger's "Try it out" sends), and
each one, sent as written, gets a 2xx from the real app (the job example with a real Redis behind it)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

OPERATIONS_WITHOUT_EXAMPLES = {
    # a job's id only exists once a job does; the example of POST /v1/jobs makes one (see below)
    ("get", "/v1/jobs/{job_id}"),
    ("post", "/v1/jobs/{job_id}/cancel"),
    ("get", "/v1/jobs/{job_id}/events"),
    ("get", "/v1/jobs/{job_id}/artifacts/{name}"),
    # 200 only with a live worker's heartbeat (tests/integration/test_jobs_cancel_and_readiness.py); 503 here
    ("get", "/readyz"),
}


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in ("get", "post", "put", "delete", "patch")
    ]


def send(client: TestClient, method: str, path: str, operation: dict[str, Any]) -> Any:
    values = {p["name"]: p["example"] for p in operation.get("parameters", []) if p.get("in") == "path"}
    url = path.format(**values)
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("example")
    return client.request(method.upper(), url, json=body)


def test_every_operation_with_a_body_or_a_path_parameter_has_an_example(make_client: Any) -> None:
    document = make_client().get("/openapi.json").json()
    missing = []
    for method, path, operation in operations(document):
        if (method, path) in OPERATIONS_WITHOUT_EXAMPLES:
            continue
        if "requestBody" in operation and "example" not in operation["requestBody"]["content"]["application/json"]:
            missing.append(f"{method} {path}: body")
        for parameter in operation.get("parameters", []):
            if parameter.get("in") == "path" and "example" not in parameter:
                missing.append(f"{method} {path}: {parameter['name']}")
    assert missing == []


def test_every_example_is_answered_with_a_2xx(make_client: Any, redis_url: str) -> None:
    client = make_client(redis_url=redis_url)
    document = client.get("/openapi.json").json()
    answered = {}
    for method, path, operation in operations(document):
        if (method, path) in OPERATIONS_WITHOUT_EXAMPLES:
            continue
        response = send(client, method, path, operation)
        answered[(method, path)] = response.status_code
        assert 200 <= response.status_code < 300, (method, path, response.text[:500])
    assert ("post", "/v1/bias") in answered
    assert answered[("post", "/v1/jobs")] == 202


@pytest.mark.parametrize("path", ["/v1/bias", "/v1/attention"])
def test_the_documented_example_has_no_bound_written_as_a_float(make_client: Any, path: str) -> None:
    """Swagger used to build POST /v1/bias's body from the schema: an int64 bound as -9223372036854776000 and a
    graph where none belongs. The example replaces it."""
    document = make_client().get("/openapi.json").json()
    example = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["example"]
    assert "graph" not in example
    assert "-9223372036854776000" not in str(example)
