"""The error half of the OpenAPI document: every status a route can answer with, each as problem+json.

FastAPI documents only what a route declares (and a 422 with its own ``HTTPValidationError`` shape, which this
service never sends). The gateway's errors come from layers around the routes too: the body-size cap and the
JSON parser (every route with a body), the key check and rate limit (every route behind ``X-API-Key``), the
compute slots and the job store (503). This module adds those statuses by what an operation has, and points
every 4xx and 5xx at the one ``Problem`` schema under ``application/problem+json``.
"""

from __future__ import annotations

import json
from typing import Any

from posenc.schemas.errors import Problem
from service.errors import PROBLEM_MEDIA_TYPE

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}

# status -> description, added to an operation when the layer that answers it is in front of the route
BODY_ERRORS = {
    "400": "the body is not valid JSON (errors[].loc is ['body'])",
    "413": "the body, its tensors or the output is over a limit; size and limit say by how much",
    "422": "a field is invalid; errors[].loc names it in the request's own field names",
}
KEY_ERRORS = {
    "401": "missing or invalid X-API-Key (when keys are configured)",
    "429": "rate limited (per key, or per client address after failed keys); see Retry-After",
}
PARAMETER_ERRORS = {"422": "a path or query parameter is invalid; errors[].loc names it"}
# tags whose routes depend on a resource that can be busy or down
UNAVAILABLE = {
    "compute": "every compute slot is busy; see Retry-After",
    "jobs": "the job store (Redis) is unavailable, or no worker takes the queue; see Retry-After",
}


def document_problems(schema: dict[str, Any]) -> None:
    """Add the error statuses each operation can answer with and type them all as ``Problem`` (in place)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(problem.pop("$defs", {}))  # FieldError
    components["Problem"] = problem
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            responses: dict[str, Any] = operation.setdefault("responses", {})
            for status, description in _expected_errors(operation).items():
                responses.setdefault(status, {"description": description})
            for status, response in responses.items():
                if status[:1] in "45":
                    response["content"] = {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_REF}}
    # FastAPI's own 422 shapes are never sent: drop them unless something else still refers to them
    for unused in ("HTTPValidationError", "ValidationError"):
        if f'"#/components/schemas/{unused}"' not in json.dumps(schema):
            components.pop(unused, None)


def _expected_errors(operation: dict[str, Any]) -> dict[str, str]:
    errors: dict[str, str] = {}
    if "requestBody" in operation:
        errors |= BODY_ERRORS
        if len(operation["requestBody"].get("content", {})) > 1:  # routes that read JSON or safetensors
            errors["415"] = "the Content-Type is neither of the body types this route reads"
    elif operation.get("parameters"):
        errors |= PARAMETER_ERRORS
    if operation.get("security"):
        errors |= KEY_ERRORS
    for tag in operation.get("tags", []):
        if tag in UNAVAILABLE:
            errors["503"] = UNAVAILABLE[tag]
    return errors
