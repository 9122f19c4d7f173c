"""One error shape everywhere: RFC 9457 problem details (``application/problem+json``).

Every way a request can fail ends here: a body that is not JSON (400), unknown routes and methods (404),
wrong verbs (405), an Accept type
we cannot produce (406), bodies and outputs over budget (413), validation by FastAPI, by a method's params
model or by the math itself (422, with ``errors[].loc`` naming the field), missing keys (401), rate limits
(429), a saturated compute pool (503) and bugs (500).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from posenc.errors import BudgetExceeded, FieldErrors, InvalidInput
from posenc.pe.registry import UnknownMethodError
from posenc.real_models.presets import UnknownPresetError
from posenc.schemas.errors import FieldError, Problem

PROBLEM_MEDIA_TYPE = "application/problem+json"
logger = logging.getLogger(__name__)


class ProblemError(Exception):
    """Raised anywhere in the gateway to answer with a problem; the handler renders it."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        size: int | None = None,
        limit: int | None = None,
        errors: list[FieldError] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = dict(headers or {})
        self.size = size
        self.limit = limit
        self.errors = errors


def problem_response(
    request: Request,
    status: int,
    detail: str | None,
    *,
    headers: Mapping[str, str] | None = None,
    size: int | None = None,
    limit: int | None = None,
    errors: list[FieldError] | None = None,
) -> Response:
    problem = Problem(
        title=_title(status),
        status=status,
        detail=detail,
        instance=request.url.path,
        errors=errors,
        size=size,
        limit=limit,
    )
    # json.dumps escapes every non-ASCII character, so a detail that quotes a client's string is always
    # encodable, even one with a lone surrogate (a "\\ud800" escape) that UTF-8 cannot carry
    return Response(
        content=json.dumps(problem.model_dump(mode="json", exclude_none=True), separators=(",", ":")),
        status_code=status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=dict(headers or {}),
    )


# Pydantic puts the member of a union it was trying into the loc: a model's class name ("RandomTensor"), a
# type ("list[int]", "int") or a validator's label ("function-after[_one_payload(), TensorData]"). None of them
# is a field of the request, so they are dropped; the error's message still says what was expected.
_TYPE_LABELS = frozenset({"int", "float", "str", "bool", "bytes", "none"})


def _is_union_member_label(part: str, model_names: frozenset[str]) -> bool:
    return part in model_names or part in _TYPE_LABELS or "[" in part or "(" in part


def _model_names() -> frozenset[str]:
    """Names of every pydantic model class loaded (request models, params models): the union labels."""
    names: set[str] = set()
    pending: list[type[BaseModel]] = [BaseModel]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return frozenset(names)


def request_loc(loc: Iterable[Any]) -> list[str | int]:
    """The path of an error in the request's own field names: pydantic's union-member labels removed."""
    model_names = _model_names()
    return [
        part if isinstance(part, int) else str(part)
        for part in loc
        if isinstance(part, int) or not _is_union_member_label(str(part), model_names)
    ]


def field_errors(raw: Iterable[Mapping[str, Any]]) -> list[FieldError]:
    """Pydantic/FastAPI error dicts to wire field errors; the offending input is never echoed back."""
    return [
        FieldError(
            loc=request_loc(error.get("loc", ())),
            msg=str(error.get("msg", "")),
            type=str(error.get("type", "value_error")),
        )
        for error in raw
    ]


def validation_error(errors: Iterable[Mapping[str, Any]], prefix: Sequence[str | int] = ()) -> RequestValidationError:
    """A 422 for errors found outside FastAPI's own parsing (params models, binary bodies), locs prefixed."""
    return RequestValidationError([{**error, "loc": (*prefix, *error.get("loc", ()))} for error in errors])


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ProblemError, _problem_error)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _request_validation)
    app.add_exception_handler(InvalidInput, _invalid_input)
    app.add_exception_handler(FieldErrors, _field_errors)
    app.add_exception_handler(BudgetExceeded, _budget_exceeded)
    app.add_exception_handler(UnknownMethodError, _unknown_method)
    app.add_exception_handler(UnknownPresetError, _unknown_method)
    app.add_exception_handler(Exception, _unexpected)


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


async def _problem_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemError)
    return problem_response(
        request,
        exc.status,
        exc.detail,
        headers=exc.headers,
        size=exc.size,
        limit=exc.limit,
        errors=exc.errors,
    )


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else None
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no route {request.method} {request.url.path}; see /docs"
    elif exc.status_code == 413:  # a chunked body that grew past the cap while being read
        limit = request.app.state.settings.max_body_bytes
        return problem_response(
            request,
            413,
            f"the request body is over the limit of {limit} bytes; send large tensors as "
            "application/vnd.safetensors, generate them on the server with {'random': {'shape', 'seed'}}, "
            "or run the work as a job (POST /v1/jobs)",
            limit=limit,
        )
    return problem_response(request, exc.status_code, detail, headers=exc.headers)


async def _request_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    unparseable = [error for error in exc.errors() if error.get("type") == "json_invalid"]
    if unparseable:
        return _unparseable_body(request, unparseable[0])
    return _validation_problem(request, exc.errors())


def _unparseable_body(request: Request, error: Mapping[str, Any]) -> Response:
    """A body that is not JSON at all is a malformed request (400), not an invalid field (422).

    FastAPI reports its own JSON parse failure as ``loc = ("body", <character offset>)``; the offset is not a
    field, so the problem names the body and keeps the parser's message (pydantic's says line and column).
    """
    message = str(error.get("msg", "JSON decode error"))
    detail = f"the request body is not valid JSON: {message}"
    field = FieldError(loc=["body"], msg=message, type="json_invalid")
    return problem_response(request, 400, detail, errors=[field])


async def _field_errors(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, FieldErrors)
    return _validation_problem(request, exc.errors)


def _validation_problem(request: Request, raw: Iterable[Mapping[str, Any]]) -> Response:
    """One 422 shape for FastAPI's validation errors and the library's (a method's params model)."""
    errors = field_errors(raw)
    summary = "; ".join(f"{'.'.join(map(str, e.loc))}: {e.msg}" for e in errors[:5])
    return problem_response(request, 422, summary or "invalid request", errors=errors)


async def _invalid_input(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidInput)
    error = FieldError(loc=list(exc.loc), msg=exc.msg, type="invalid_input")
    return problem_response(request, 422, str(exc), errors=[error])


async def _budget_exceeded(request: Request, exc: Exception) -> Response:
    """413: the size, the limit (with its setting in the detail) and, in ``errors``, the fields that drive it."""
    assert isinstance(exc, BudgetExceeded)
    drivers = [
        FieldError(loc=list(loc), msg=f"drives {exc.what} ({exc.size} {exc.unit}; limit {exc.limit})", type="budget")
        for loc in exc.fields
    ]
    return problem_response(request, 413, str(exc), size=exc.size, limit=exc.limit, errors=drivers or None)


async def _unknown_method(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, UnknownMethodError | UnknownPresetError)
    return problem_response(request, 404, str(exc))


async def _unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(request, 500, "internal error; the server log has the details")
