"""Request bodies with tensors: inline JSON (base64) for small inputs, a safetensors file for large ones."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posenc_client._base_client import UploadMode
from posenc_client._constants import INLINE_MAX_ELEMENTS
from posenc_client._safetensors import write_safetensors
from posenc_client._tensors import RawTensor, encode_input

SAFETENSORS = "application/vnd.safetensors"


@dataclass(frozen=True)
class TensorArg:
    """An input tensor of a request: a torch tensor, numpy array, nested list, or a wire dict passed as is
    (``{"random": {...}}`` or ``{"dtype", "shape", "data"|"base64"}``)."""

    value: Any
    default_dtype: str


@dataclass(frozen=True)
class Body:
    json_body: dict[str, Any] | None = None
    content: bytes | None = None
    content_type: str | None = None


def build_body(
    fields: Mapping[str, Any],
    tensors: Mapping[str, TensorArg | None],
    *,
    upload: UploadMode,
    binary_allowed: bool,
) -> Body:
    """The JSON request ``fields`` plus its tensors, inline or as a safetensors file (see module doc)."""
    request: dict[str, Any] = {key: value for key, value in fields.items() if value is not None}
    encoded: dict[str, RawTensor] = {}
    for name, arg in tensors.items():
        if arg is None:
            continue
        if isinstance(arg.value, Mapping):
            request[name] = dict(arg.value)
        else:
            encoded[name] = encode_input(arg.value, default_dtype=arg.default_dtype)
    if upload == "safetensors" and not binary_allowed:
        raise ValueError("this route takes JSON only; use upload='json' or 'auto'")
    total = sum(tensor.num_elements for tensor in encoded.values())
    large = upload == "auto" and total > INLINE_MAX_ELEMENTS
    binary = binary_allowed and (upload == "safetensors" or large)
    if binary and encoded:
        content = write_safetensors(encoded, metadata={"request": json.dumps(request, separators=(",", ":"))})
        return Body(content=content, content_type=SAFETENSORS)
    request.update({name: tensor.inline_json() for name, tensor in encoded.items()})
    return Body(json_body=request)
