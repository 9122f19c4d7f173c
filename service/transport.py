"""Tensors on the wire: content negotiation, response encoders, and safetensors request bodies.

Responses by ``Accept`` (``Vary: Accept`` on all of them):
    application/json            TensorResponse; non-finite values as "nan", "inf", "-inf"; small outputs only
    application/octet-stream    one tensor, raw little-endian C-order bytes; X-Tensor-Dtype, X-Tensor-Shape
    application/vnd.safetensors every tensor; meta in the safetensors metadata, one JSON string per key
    application/x-npy           one tensor as a .npy file (no bfloat16: numpy has no such dtype)
A missing Accept, ``*/*`` and ``application/*`` mean JSON; anything else is a 406.

Requests to ``/v1/rotary`` and ``/v1/attention`` may instead be a safetensors file
(Content-Type application/vnd.safetensors): ``__metadata__["request"]`` holds the JSON request and tensors
named like the request's tensor fields (q, k, positions, key_padding_mask) stand in for those fields.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pydantic_core
import torch
from pydantic import BaseModel, ValidationError
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from posenc.compute import OutputSpec, TensorResult, safetensors_metadata
from posenc.errors import InvalidInput
from posenc.schemas.errors import Problem
from posenc.schemas.tensors import TensorData, TensorDType, TensorResponse
from posenc.tensors import SafetensorsBody, dtype_name, le_bytes, to_wire
from service.errors import ProblemError, validation_error

JSON = "application/json"
OCTET_STREAM = "application/octet-stream"
SAFETENSORS = "application/vnd.safetensors"
NPY = "application/x-npy"
TENSOR_MEDIA_TYPES = (JSON, OCTET_STREAM, SAFETENSORS, NPY)
SINGLE_TENSOR_TYPES = (OCTET_STREAM, NPY)
_ALIASES = {"application/x-safetensors": SAFETENSORS, "*/*": JSON, "application/*": JSON}
SAFETENSORS_TYPES = (SAFETENSORS, "application/x-safetensors")  # request bodies read as safetensors files

# safetensors header dtype codes <-> our dtype names (the ones a request may carry)
_SAFETENSORS_DTYPES: dict[str, TensorDType] = {
    "F32": "float32",
    "F64": "float64",
    "BF16": "bfloat16",
    "F16": "float16",
    "I64": "int64",
    "I32": "int32",
    "BOOL": "bool",
}
_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the format's own cap


# --------------------------------------------------------------------------------------------- negotiation
def negotiate(accept: str | None) -> str:
    """Pick the response type from an Accept header (q-values honoured, order breaks ties)."""
    if accept is None or not accept.strip():
        return JSON
    candidates: list[tuple[float, int, str]] = []
    for position, part in enumerate(accept.split(",")):
        media, *parameters = (piece.strip() for piece in part.split(";"))
        quality = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if media and quality > 0:
            candidates.append((-quality, position, media.lower()))
    for _, _, media in sorted(candidates):
        resolved = _ALIASES.get(media, media)
        if resolved in TENSOR_MEDIA_TYPES:
            return resolved
    raise ProblemError(
        406,
        f"cannot produce {accept!r}; this route answers with one of {', '.join(TENSOR_MEDIA_TYPES)}",
    )


def content_type(headers: Mapping[str, str]) -> str:
    """A request's media type, lower case, without parameters ('' when absent)."""
    return headers.get("content-type", "").split(";")[0].strip().lower()


# ------------------------------------------------------------------------------------------------ results
def chosen_tensor(outputs: Sequence[OutputSpec], requested: str | None) -> OutputSpec:
    if requested is None:
        return outputs[0]
    for output in outputs:
        if output.name == requested:
            return output
    names = ", ".join(output.name for output in outputs)
    raise InvalidInput(("query", "tensor"), f"this response has no tensor {requested!r}; it has {names}")


def check_deliverable(outputs: Sequence[OutputSpec], media_type: str, requested: str | None) -> None:
    """Refuse, before computing, what the chosen media type cannot carry."""
    single = chosen_tensor(outputs, requested)
    if media_type == NPY and single.dtype == "bfloat16":
        raise ProblemError(
            406,
            f"application/x-npy cannot carry {single.name!r}: numpy has no bfloat16; ask for "
            "application/octet-stream or application/vnd.safetensors, or request dtype float32",
        )


def render(result: TensorResult, media_type: str, requested: str | None = None) -> Response:
    names = list(result.tensors)
    common = {"Vary": "Accept", "X-Posenc-Tensors": ",".join(names)}
    if media_type == JSON:
        body = TensorResponse.model_construct(
            tensors={name: to_wire(tensor) for name, tensor in result.tensors.items()}, meta=result.meta
        ).model_dump_json()
        return Response(content=body, media_type=JSON, headers=common)

    meta_header = json.dumps(result.meta, separators=(",", ":"), ensure_ascii=True, default=str)
    if media_type == SAFETENSORS:
        pieces = safetensors_pieces(result.tensors, safetensors_metadata(result.meta))
        return PiecesResponse(pieces, media_type=SAFETENSORS, headers={**common, "X-Posenc-Meta": meta_header})

    name = requested if requested is not None else names[0]
    tensor = result.tensors[name].detach().to("cpu").contiguous()
    headers = {
        **common,
        "X-Posenc-Meta": meta_header,
        "X-Posenc-Tensor": name,
        "X-Tensor-Dtype": dtype_name(tensor.dtype),
        "X-Tensor-Shape": ",".join(str(size) for size in tensor.shape),
    }
    if media_type == NPY:
        buffer = io.BytesIO()
        np.save(buffer, tensor.numpy(), allow_pickle=False)
        return Response(content=buffer.getbuffer(), media_type=NPY, headers=headers)
    return Response(content=raw_bytes(tensor), media_type=OCTET_STREAM, headers=headers)


_SAFETENSORS_CODES: dict[str, str] = {name: code for code, name in _SAFETENSORS_DTYPES.items()}


def json_answer(value: Any) -> Response:
    """A JSON answer encoded where it is called (in a compute slot, not on the event loop): a pydantic model or
    plain data, non-finite floats as null, as FastAPI would encode a route's return value."""
    return Response(pydantic_core.to_json(value), media_type=JSON)


def safetensors_pieces(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> list[memoryview | bytes]:
    """A safetensors file as its pieces: the 8-byte header length and the JSON header (padded with spaces to a
    multiple of 8, as the format's writer pads it), then each tensor's own bytes (``raw_bytes``: views, no copy)."""
    data = {name: raw_bytes(tensor) for name, tensor in tensors.items()}
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, tensor in tensors.items():
        size = len(data[name])
        code = _SAFETENSORS_CODES[dtype_name(tensor.dtype)]
        header[name] = {"dtype": code, "shape": list(tensor.shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    return [len(encoded).to_bytes(8, "little") + encoded, *data.values()]


class PiecesResponse(Response):
    """A body sent as its pieces, one after another, with the total length declared: a large answer goes out
    from the tensors' own memory instead of being joined into one bytes object first."""

    def __init__(self, pieces: Sequence[memoryview | bytes], *, media_type: str, headers: Mapping[str, str]) -> None:
        self.pieces = pieces
        super().__init__(content=b"", media_type=media_type, headers=dict(headers))
        self.headers["content-length"] = str(sum(len(piece) for piece in pieces))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        for piece in self.pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def raw_bytes(tensor: torch.Tensor) -> memoryview | bytes:
    """Little-endian C-order bytes; on little-endian hosts a view of the tensor's memory (no copy)."""
    if sys.byteorder != "little":
        return le_bytes(tensor)
    cpu = tensor.detach().to("cpu").contiguous()
    if cpu.dtype == torch.bfloat16:
        cpu = cpu.view(torch.int16)  # numpy has no bfloat16; the 2-byte pattern is what goes on the wire
    array: Any = cpu.numpy().reshape(-1)  # numpy's stubs do not declare the buffer protocol
    return memoryview(array).cast("B")


# ------------------------------------------------------------------------------- safetensors request body
M = TypeVar("M", bound=BaseModel)


# A safetensors tensor named "params.<field>" stands in for the method's tensor parameter <field>, and
# "state.<name>" for a tensor of the position state; a route lists "params." and "state." when it takes them.
NESTED_GROUPS = ("params", "state")


def parse_json_request(body: bytes, model: type[M]) -> M:
    """Parse the body into plain Python values, then validate them; 400 for JSON that does not parse.

    Not ``model_validate_json``: it holds the whole document in pydantic-core's own form while it validates,
    beside the Python list each tensor's ``data`` validator is handed (about 6.5x the body at its peak). Parsed
    first (pydantic-core's parser: straight from bytes, no str copy, nesting depth capped), only the Python
    values exist, and each ``data`` list is replaced by a compact array as it validates (TensorData). NaN,
    Infinity and 1e400 parse as floats so that the models refuse them as invalid fields (422 naming the field).
    """
    try:
        document = pydantic_core.from_json(body)
    except ValueError as exc:
        error = {"type": "json_invalid", "loc": (), "msg": f"Invalid JSON: {exc}", "input": None}
        raise validation_error([error], ("body",)) from None
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False, include_input=False), ("body",)) from None


def parse_safetensors_request(body: bytes, model: type[M], tensor_names: frozenset[str], max_header_bytes: int) -> M:
    """The request of a safetensors body: its header checked (the JSON cap, ``max_header_bytes``, holds it, so
    tensors belong in the file, not inline in ``__metadata__["request"]``; every tensor a field of the route), the
    tensors put in their fields as ``TensorData.from_body`` (the declared dtype and shape, decoded from the body on
    first use, after the budgets): downstream, an input is read the same way whether JSON or the file carried it.
    """
    header = _safetensors_header(body, max_header_bytes)
    metadata = header.pop("__metadata__", None) or {}
    raw_request = metadata.get("request", "{}") if isinstance(metadata, dict) else "{}"
    try:
        fields = json.loads(raw_request)
    except json.JSONDecodeError as exc:
        raise InvalidInput(("body", "__metadata__", "request"), f"not valid JSON: {exc.msg}") from None
    if not isinstance(fields, dict):
        raise InvalidInput(("body", "__metadata__", "request"), "must be a JSON object")

    source = SafetensorsBody(body)
    for name, info in header.items():
        group, _, member = name.partition(".")
        nested = group in NESTED_GROUPS and bool(member) and f"{group}." in tensor_names
        if name not in tensor_names and not nested:
            raise InvalidInput(
                ("body", name),
                f"unexpected tensor {name!r}; this route takes {', '.join(sorted(tensor_names))} "
                "(<group>.<name> for a tensor inside that field)",
            )
        target = fields.setdefault(group, {}) if nested else fields
        key = member if nested else name
        if not isinstance(target, dict) or key in target:
            raise InvalidInput(("body", name), "given both in the request JSON and as a safetensors tensor")
        if not isinstance(info, dict):
            raise InvalidInput(("body", name), "a safetensors header entry must have dtype and shape")
        dtype = _SAFETENSORS_DTYPES.get(str(info.get("dtype")))
        if dtype is None:
            raise InvalidInput(
                ("body", name, "dtype"),
                f"unsupported safetensors dtype {info.get('dtype')!r}; use one of {', '.join(_SAFETENSORS_DTYPES)}",
            )
        shape = [int(size) for size in info.get("shape", [])]
        target[key] = TensorData.from_body(dtype, shape, source, name)
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False, include_input=False), ("body",)) from None


def _safetensors_header(body: bytes, max_header_bytes: int) -> dict[str, Any]:
    if len(body) < 8:
        raise InvalidInput(("body",), "a safetensors body starts with an 8-byte header length")
    length = int.from_bytes(body[:8], "little")
    if max_header_bytes < length <= len(body) - 8:
        raise ProblemError(
            413,
            f"the safetensors header is {length} bytes of JSON, over the limit of {max_header_bytes} bytes for "
            "JSON (max_json_body_bytes); put the tensors in the file, not inline in __metadata__['request']",
            size=length,
            limit=max_header_bytes,
        )
    if length > _MAX_SAFETENSORS_HEADER or 8 + length > len(body):
        raise InvalidInput(("body",), f"safetensors header length {length} does not fit the {len(body)}-byte body")
    try:
        header = json.loads(body[8 : 8 + length])
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(("body",), f"safetensors header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise InvalidInput(("body",), "safetensors header must be a JSON object")
    return header


# ------------------------------------------------------------------------------------------------ OpenAPI
BINARY_SCHEMA = {"type": "string", "format": "binary"}
TENSOR_HEADERS = {
    "Vary": {"description": "always Accept", "schema": {"type": "string"}},
    "X-Posenc-Tensors": {
        "description": "comma-separated names of the tensors computed",
        "schema": {"type": "string"},
    },
    "X-Tensor-Dtype": {
        "description": "octet-stream and x-npy: dtype of the tensor",
        "schema": {"type": "string"},
    },
    "X-Tensor-Shape": {
        "description": "octet-stream and x-npy: comma-separated shape",
        "schema": {"type": "string"},
    },
    "X-Posenc-Meta": {"description": "binary types: the meta object as JSON", "schema": {"type": "string"}},
}


def tensor_responses(description: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a tensor route: every media type it answers with, and its problem statuses."""
    problem: dict[str, Any] = {"model": Problem}
    return {
        200: {
            "model": TensorResponse,
            "description": description,
            "headers": TENSOR_HEADERS,
            "content": {
                OCTET_STREAM: {"schema": BINARY_SCHEMA},
                SAFETENSORS: {"schema": BINARY_SCHEMA},
                NPY: {"schema": BINARY_SCHEMA},
            },
        },
        401: {**problem, "description": "missing or invalid X-API-Key"},
        404: {**problem, "description": "unknown method"},
        406: {**problem, "description": "the Accept type cannot be produced"},
        413: {**problem, "description": "input, output or body over budget; size and limit say by how much"},
        422: {**problem, "description": "a field is invalid; errors[].loc names it"},
        429: {**problem, "description": "rate limited; see Retry-After"},
        503: {**problem, "description": "compute slots busy; see Retry-After"},
    }


def binary_request_body(model: type[BaseModel], tensor_names: Sequence[str]) -> dict[str, Any]:
    """``openapi_extra`` for routes that read the body themselves (JSON or safetensors)."""
    names = ", ".join(tensor_names)
    return {
        "requestBody": {
            "required": True,
            "content": {
                JSON: {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}},
                SAFETENSORS: {
                    "schema": BINARY_SCHEMA,
                    "description": "a safetensors file: __metadata__['request'] holds the JSON request "
                    f"(without its tensors); tensors named {names} stand in for those fields (<group>.<name>: "
                    "a tensor inside that field, e.g. params.<name> for the method's tensor parameter <name>)",
                },
            },
        }
    }
