"""Request plumbing shared by the compute resources (bias, rotary, encodings, attention)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

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


def grid_json(grid: Sequence[int] | None) -> list[int] | None:
    """A grid's sizes as plain ints (numpy or torch integers and tuples included); None stays None."""
    return None if grid is None else [int(size) for size in grid]


def graph_json(graph: Mapping[str, Any] | BaseModel | None) -> dict[str, Any] | None:
    """A graph (dict or the generated GraphIn model) as its JSON object; array-valued entries as lists."""
    if graph is None:
        return None
    if isinstance(graph, BaseModel):
        fields: dict[str, Any] = graph.model_dump(mode="json", exclude_none=True)
    elif isinstance(graph, Mapping):
        fields = dict(graph)
    else:
        raise TypeError(f"graph must be a dict or a GraphIn model, not {type(graph).__name__}")
    return {name: _plain(value) for name, value in fields.items() if value is not None}


def _plain(value: Any) -> Any:
    """numpy arrays and torch tensors (and the numbers inside them) as nested Python lists and numbers."""
    if hasattr(value, "tolist") and callable(value.tolist):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
