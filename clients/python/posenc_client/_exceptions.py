"""The exception tree: one class per HTTP status family, each carrying the server's problem details.

APIError is the root of everything the SDK raises on purpose:

    APIError
    ├── APIStatusError                 the server answered with an error status (problem+json body)
    │   ├── BadRequestError            400
    │   ├── AuthenticationError        401
    │   ├── PermissionDeniedError      403
    │   ├── NotFoundError              404
    │   ├── NotAcceptableError         406
    │   ├── ConflictError              409
    │   ├── PayloadTooLargeError       413
    │   ├── ValidationError            422 (.errors: the field errors)
    │   ├── RateLimitError             429 (.retry_after)
    │   └── ServerError                5xx
    │       └── ServiceUnavailableError 503 (.retry_after)
    ├── APIConnectionError             no answer: refused, reset, DNS
    │   └── APITimeoutError            no answer in time
    └── JobError                       raised by jobs.wait()
        ├── JobFailedError             the job ended failed or expired (.job, .error)
        ├── JobCancelledError          the job ended cancelled
        └── JobWaitTimeoutError        still not finished when wait()'s timeout ran out
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posenc_client._models import Job


@dataclass(frozen=True)
class FieldError:
    """One invalid field of a 422; loc is the path into the request, e.g. ("body", "params", "x")."""

    loc: tuple[str | int, ...]
    msg: str
    type: str

    @property
    def field(self) -> str:
        """The path as a dotted name without the leading 'body' (params.factor)."""
        parts = self.loc[1:] if self.loc and self.loc[0] == "body" else self.loc
        return ".".join(str(part) for part in parts)


@dataclass(frozen=True)
class ProblemDetails:
    """An application/problem+json body (RFC 9457), as far as the server sent one."""

    status: int
    title: str
    detail: str | None = None
    type: str = "about:blank"
    instance: str | None = None
    errors: tuple[FieldError, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_body(cls, *, status: int, reason: str, body: bytes) -> ProblemDetails:
        """Parse a problem body; a non-JSON body (a proxy's HTML page) becomes the detail text."""
        try:
            parsed = json.loads(body) if body else {}
        except (UnicodeDecodeError, json.JSONDecodeError):
            return cls(status=status, title=reason, detail=body.decode("utf-8", "replace")[:2000] or None)
        if not isinstance(parsed, dict):
            return cls(status=status, title=reason, detail=str(parsed))
        known = {"status", "title", "detail", "type", "instance", "errors"}
        return cls(
            status=int(parsed.get("status") or status),
            title=str(parsed.get("title") or reason),
            detail=_text_or_none(parsed.get("detail")),
            type=str(parsed.get("type") or "about:blank"),
            instance=_text_or_none(parsed.get("instance")),
            errors=_field_errors(parsed.get("errors")),
            extra={key: value for key, value in parsed.items() if key not in known},
        )


def _text_or_none(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _field_errors(raw: Any) -> tuple[FieldError, ...]:
    if not isinstance(raw, list):
        return ()
    found: list[FieldError] = []
    for item in raw:
        if isinstance(item, dict):
            loc = item.get("loc") or ()
            found.append(
                FieldError(
                    loc=tuple(part if isinstance(part, int) else str(part) for part in loc),
                    msg=str(item.get("msg", "")),
                    type=str(item.get("type", "")),
                )
            )
    return tuple(found)


class APIError(Exception):
    """Root of every error the SDK raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class APIStatusError(APIError):
    """The server answered with an error status; its problem details are on the exception."""

    def __init__(self, *, problem: ProblemDetails, body: bytes, headers: dict[str, str], method: str, url: str) -> None:
        text = f"{problem.status} {problem.title}"
        if problem.detail:
            text += f": {problem.detail}"
        super().__init__(text)
        self.problem = problem
        self.body = body
        self.headers = headers
        self.method = method
        self.url = url

    @property
    def status(self) -> int:
        return self.problem.status

    @property
    def title(self) -> str:
        return self.problem.title

    @property
    def detail(self) -> str | None:
        return self.problem.detail

    @property
    def errors(self) -> tuple[FieldError, ...]:
        return self.problem.errors

    @property
    def retry_after(self) -> float | None:
        """The server's Retry-After hint in seconds, when it sent one."""
        from posenc_client._retry import parse_retry_after

        return parse_retry_after(self.headers)


class BadRequestError(APIStatusError):
    """400."""


class AuthenticationError(APIStatusError):
    """401: the API key is missing or not valid (set api_key= or POSENC_API_KEY)."""


class PermissionDeniedError(APIStatusError):
    """403."""


class NotFoundError(APIStatusError):
    """404: unknown method, job or artifact."""


class NotAcceptableError(APIStatusError):
    """406: the server cannot produce the asked media type."""


class ConflictError(APIStatusError):
    """409: e.g. an Idempotency-Key reused with a different request, or cancelling a finished job."""


class PayloadTooLargeError(APIStatusError):
    """413: the output (or the request body) is over the server's budget; size and limit say how."""

    @property
    def size(self) -> int | None:
        value = self.problem.extra.get("size")
        return int(value) if isinstance(value, int) else None

    @property
    def limit(self) -> int | None:
        value = self.problem.extra.get("limit")
        return int(value) if isinstance(value, int) else None


class ValidationError(APIStatusError):
    """422: a parameter or shape the server refused; errors names each field."""

    def __str__(self) -> str:
        lines = [self.message]
        lines.extend(f"  {error.field or '(request)'}: {error.msg}" for error in self.errors)
        return "\n".join(lines)


class RateLimitError(APIStatusError):
    """429: too many requests for this API key; retry_after says when to come back."""


class ServerError(APIStatusError):
    """5xx."""


class ServiceUnavailableError(ServerError):
    """503: compute is saturated (or a dependency is down); retry_after says when to come back."""


class APIConnectionError(APIError):
    """No HTTP answer at all: connection refused or reset, name not resolved, protocol error."""

    def __init__(self, message: str, *, method: str, url: str) -> None:
        super().__init__(message)
        self.method = method
        self.url = url


class APITimeoutError(APIConnectionError):
    """No answer within the client's timeout."""


class JobError(APIError):
    """A job did not end the way jobs.wait() expected; job is its last known record."""

    def __init__(self, message: str, *, job: Job) -> None:
        super().__init__(message)
        self.job = job

    @property
    def job_id(self) -> str:
        return self.job.id


class JobFailedError(JobError):
    """The job ended failed (or expired); error is the server's account of why."""

    @property
    def error(self) -> str | None:
        return self.job.error


class JobCancelledError(JobError):
    """The job ended cancelled."""


class JobWaitTimeoutError(JobError, TimeoutError):
    """jobs.wait(timeout=...) ran out while the job was still queued or running."""


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    406: NotAcceptableError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


def error_class_for(status: int) -> type[APIStatusError]:
    """The exception class for an error status (5xx without its own class is a ServerError)."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else APIStatusError
