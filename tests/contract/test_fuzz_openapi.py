"""Property-based fuzzing of the compute API from its own OpenAPI document (schemathesis).

Whatever a client sends that the schema allows (and a good deal it does not), the gateway answers with a
response and never a 5xx: bad input is a 4xx naming the problem, and outputs larger than the budget are refused
before anything is allocated. Every answer is one the document describes: its status is listed for the
operation, its content type is declared, and its body (the problem+json of an error included) validates
against the declared schema. The job routes need Redis and are exercised by the integration tests instead.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import content_type_conformance, response_schema_conformance, status_code_conformance

from posenc.settings import Settings
from service.main import create_app

MiB = 1024 * 1024
app = create_app(
    Settings(
        max_output_bytes=8 * MiB,  # small budgets: generated sizes are refused early, so examples stay fast
        max_input_elements=MiB,
        max_json_elements=100_000,
        compute_wait_s=5.0,
    )
)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)

COMPUTE = schema.include(path_regex=r"^/v1/(bias|rotary|encodings|attention|methods)")


@COMPUTE.parametrize()
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
# the safetensors request bodies are covered by tests/integration/http/test_binary_requests.py
@pytest.mark.filterwarnings("ignore:Skipped test cases with unsupported payload media types")
def test_the_compute_api_never_answers_5xx(case: schemathesis.Case) -> None:
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.path}: {response.status_code}\n{response.text[:2000]}"
    case.validate_response(
        response, checks=[status_code_conformance, content_type_conformance, response_schema_conformance]
    )
    if response.status_code >= 400:
        content_type = response.headers["content-type"][0]  # schemathesis keeps every header as a list
        assert content_type.startswith("application/problem+json"), response.text[:500]
        problem = response.json()
        assert problem["status"] == response.status_code
        assert problem["title"]
