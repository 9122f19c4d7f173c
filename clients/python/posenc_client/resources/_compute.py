"""Request plumbing shared by the compute resources (bias, rotary, encodings, attention)."""

from __future__ import annotations

from typing import Any

from posenc_client._transport import HTTPRequest
from posenc_client._uploads import Body

OCTET_STREAM = "application/octet-stream"
SAFETENSORS = "application/vnd.safetensors"


def compute_request(path: str, body: Body, *, accept: str) -> HTTPRequest:
    headers = {"Accept": accept}
    if body.content is not None:
        headers["Content-Type"] = body.content_type or "application/octet-stream"
        return HTTPRequest(method="POST", path=path, headers=headers, content=body.content)
    return HTTPRequest(method="POST", path=path, headers=headers, json_body=body.json_body)


def params_or_empty(params: dict[str, Any] | None) -> dict[str, Any]:
    return dict(params) if params else {}
