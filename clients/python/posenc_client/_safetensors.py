"""The safetensors container, read and written without the safetensors package.

Layout: an 8-byte little-endian header length N, N bytes of JSON {name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}} (padded with spaces to a multiple of 8), then
the tensors' bytes. Offsets count from the end of the header.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

from posenc_client._tensors import BY_SAFETENSORS_CODE, RawTensor, dtype_info

MAX_HEADER_BYTES = 100_000_000


def write_safetensors(tensors: Mapping[str, RawTensor], *, metadata: Mapping[str, str] | None = None) -> bytes:
    """The whole file in one bytes object (for saving to disk)."""
    return b"".join(safetensors_parts(tensors, metadata=metadata))


def safetensors_parts(
    tensors: Mapping[str, RawTensor], *, metadata: Mapping[str, str] | None = None
) -> tuple[bytes | memoryview, ...]:
    """The file as its pieces: the length and header bytes, then each tensor's own data (a view, not a copy),
    so that a request body can be sent from them without joining them first."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, tensor in tensors.items():
        size = len(tensor.data)
        header[name] = {
            "dtype": dtype_info(tensor.dtype).safetensors_code,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    return (struct.pack("<Q", len(encoded)) + encoded, *(memoryview(tensor.data) for tensor in tensors.values()))


def read_safetensors(body: bytes | bytearray) -> tuple[dict[str, RawTensor], dict[str, str]]:
    """Tensors and the __metadata__ strings: views of a bytearray body (no copy), copies of a bytes one
    (so every tensor's data is writable either way)."""
    if len(body) < 8:
        raise ValueError("not a safetensors body: shorter than its 8-byte header length")
    (header_length,) = struct.unpack_from("<Q", body, 0)
    if header_length > min(MAX_HEADER_BYTES, len(body) - 8):
        raise ValueError(f"not a safetensors body: header length {header_length} of a {len(body)}-byte body")
    header = json.loads(bytes(body[8 : 8 + header_length]))
    start = 8 + header_length
    metadata = {str(key): str(value) for key, value in (header.pop("__metadata__", None) or {}).items()}
    tensors: dict[str, RawTensor] = {}
    # a writable body (the transport's one buffer) is viewed, not copied; read-only bytes are copied per tensor
    view = memoryview(body) if isinstance(body, bytearray) else None
    for name, entry in header.items():
        code = entry["dtype"]
        if code not in BY_SAFETENSORS_CODE:
            raise ValueError(f"tensor {name!r} has dtype {code}, which the SDK does not decode")
        begin, end = entry["data_offsets"]
        data = view[start + begin : start + end] if view is not None else bytearray(body[start + begin : start + end])
        tensors[name] = RawTensor(BY_SAFETENSORS_CODE[code].name, tuple(int(size) for size in entry["shape"]), data)
    return tensors, metadata
