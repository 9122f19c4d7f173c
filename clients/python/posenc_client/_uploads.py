"""Request bodies with tensors: inline JSON (base64) for small inputs, a safetensors file for large ones.

Tensor-valued entries of params (torch tensors, numpy arrays: a method's learned weights, e.g. T5's
table) travel like the other tensors: inline in params as {"dtype", "shape", "base64"}, or in the
safetensors file as params.<name> (and then left out of the JSON request in its metadata).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posenc_client._backends import is_numpy_array, is_torch_tensor
from posenc_client._base_client import UploadMode
from posenc_client._constants import INLINE_MAX_ELEMENTS
from posenc_client._safetensors import safetensors_parts
from posenc_client._tensors import RawTensor, encode_input

SAFETENSORS = "application/vnd.safetensors"
PARAMS_PREFIX = "params."  # a safetensors tensor "params.<name>" stands in for the tensor parameter <name>


@dataclass(frozen=True)
class TensorArg:
    """An input tensor of a request: a torch tensor, numpy array, nested list, or a wire dict passed as is
    ({"random": {...}} or {"dtype", "shape", "data"|"base64"})."""

    value: Any
    default_dtype: str


@dataclass(frozen=True)
class Body:
    json_body: dict[str, Any] | None = None
    content: tuple[bytes | memoryview, ...] | None = None  # a binary body's pieces, sent one after another
    content_type: str | None = None


def build_body(
    fields: Mapping[str, Any],
    tensors: Mapping[str, TensorArg | None],
    *,
    upload: UploadMode,
    binary_allowed: bool,
) -> Body:
    """The JSON request fields plus its tensors, inline or as a safetensors file (see module doc)."""
    request: dict[str, Any] = {key: value for key, value in fields.items() if value is not None}
    encoded: dict[str, RawTensor] = {}
    params = request.get("params")
    if isinstance(params, Mapping):
        request["params"] = {}
        for name, value in params.items():
            if _is_array(value) and len(value.shape) > 0:
                encoded[PARAMS_PREFIX + name] = encode_input(value, default_dtype="float32")
            else:  # numbers, strings, lists, wire dicts; 0-d arrays and tensors as the Python number they hold
                request["params"][name] = value.item() if _is_array(value) else value
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
        content = safetensors_parts(encoded, metadata={"request": json.dumps(request, separators=(",", ":"))})
        return Body(content=content, content_type=SAFETENSORS)
    for name, tensor in encoded.items():
        if name.startswith(PARAMS_PREFIX):
            request["params"][name.removeprefix(PARAMS_PREFIX)] = tensor.inline_json()
        else:
            request[name] = tensor.inline_json()
    return Body(json_body=request)


def _is_array(value: Any) -> bool:
    return is_torch_tensor(value) or is_numpy_array(value)
