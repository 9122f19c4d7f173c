"""Errors as documented: a body that is not JSON is a 400, field errors name the request's own fields, and the
OpenAPI document lists every error status each route answers with as problem+json."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

ROUTES_WITH_BODIES = ["/v1/bias", "/v1/rotary", "/v1/encodings", "/v1/attention", "/v1/jobs"]


@pytest.mark.parametrize("path", ROUTES_WITH_BODIES)
def test_a_body_that_is_not_json_is_a_400(client: TestClient, wire: Any, path: str) -> None:
    response = client.post(path, content=b'{"method": "alibi",', headers={"Content-Type": "application/json"})
    problem = wire.problem(response, 400)
    assert "not valid JSON" in problem["detail"]
    assert wire.locs(problem) == [["body"]]


def test_field_errors_carry_no_pydantic_union_labels(client: TestClient, wire: Any) -> None:
    """q is a union of an inline tensor and a random one; positions of a tensor, a list or a list of rows (its
    entries 0 and 1 are wrong for one or the other). The locs must be
    paths a user can find in their own request, never 'function-after[...]', 'RandomTensor' or 'list[int]'."""
    request = {"method": "rope", "q": {"shape": [1, 1, 2, 8], "data": "not a list"}, "positions": ["x", 1]}
    problem = wire.problem(client.post("/v1/rotary", json=request), 422)
    locs = wire.locs(problem)
    assert ["body", "q", "data"] in locs
    assert ["body", "positions", 0] in locs
    request_fields = {"body", "q", "data", "random", "shape", "positions", "dtype", "base64", 0, 1}
    for loc in locs:
        assert set(loc) <= request_fields, loc
    assert "function-after" not in problem["detail"]


def test_a_parameter_named_by_the_user_stays_in_the_loc(client: TestClient, wire: Any) -> None:
    request = {"method": "alibi", "num_heads": 2, "query_length": 4, "params": {"Slope": 1}}
    problem = wire.problem(client.post("/v1/bias", json=request), 422)
    assert wire.locs(problem) == [["body", "params", "Slope"]]


def test_every_error_status_is_documented_as_a_problem(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    assert "Problem" in document["components"]["schemas"]
    assert "HTTPValidationError" not in document["components"]["schemas"], "FastAPI's 422 shape is never sent"
    for path, item in document["paths"].items():
        for verb, operation in item.items():
            responses = operation["responses"]
            for status, response in responses.items():
                if status[0] in "45":
                    assert response["content"] == {
                        "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
                    }, (path, verb, status)
            if "requestBody" in operation:
                assert {"400", "413", "422"} <= set(responses), (path, verb)
            if path.startswith("/v1"):
                assert {"401", "429"} <= set(responses), (path, verb)
    assert "415" in document["paths"]["/v1/rotary"]["post"]["responses"]
    assert "503" in document["paths"]["/v1/jobs"]["post"]["responses"]
