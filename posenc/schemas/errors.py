"""One error shape for every error: RFC 9457 problem details, plus the field errors of a 422."""

from __future__ import annotations

from pydantic import BaseModel, Field


class FieldError(BaseModel):
    """One invalid field: ``loc`` is the path into the request (e.g. ``["body", "params", "factor"]``)."""

    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """``application/problem+json`` body."""

    type: str = Field(default="about:blank", description="URI naming the kind of problem")
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[FieldError] | None = Field(
        default=None, description="field errors of a 422; for a 413, the fields that drive the size (type 'budget')"
    )
    limit: int | None = Field(default=None, description="the limit that was exceeded (413)")
    size: int | None = Field(default=None, description="the size that was asked for (413)")
