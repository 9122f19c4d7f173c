"""A GGUF file's header, read on the client so that only its metadata travels (``POST /v1/models/gguf``; the
server never needs the file).

The header is parsed here with the ``gguf`` package's constants (magic, value types, quantisation sizes) rather
than with its ``GGUFReader``: that reader builds a numpy view per array element (about 30 s and 680 MB for a Llama
3 vocabulary's header, 128k tokens and 280k merges) and trusts the counts it reads, so a damaged file can make it
loop or allocate without end. This one checks every count against the file's size, seeks past long arrays (the
vocabulary) and reads nothing of the tensor data but the small rope tensors: a header-only read of a file of any
size. What it keeps matches the server's bounds (``posenc.schemas.models.GgufRequest``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

GGUF_MAX_KEYS = 4096
GGUF_MAX_KEY_CHARS = 256
GGUF_MAX_STRING_CHARS = 4096
GGUF_MAX_ARRAY = 8192  # longer arrays (the vocabulary, the merges) are skipped
GGUF_MAX_TENSOR_VALUES = 4096
GGUF_ROPE_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
GgufSource = str | Path | Mapping[str, Any]


class GgufReadError(ValueError):
    """A file that is not a GGUF the reader can read (what is wrong, and where)."""


def is_gguf(path: str | Path) -> bool:
    """Whether ``path`` names a GGUF file: its suffix, or its first four bytes (b"GGUF")."""
    path = Path(path)
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with path.open("rb") as file:
            return file.read(4) == b"GGUF"
    except OSError:
        return False


class _GgufHeader:
    """Sequential reads of a GGUF header, each checked against the file's size."""

    def __init__(self, file: BinaryIO, size: int, scalars: dict[int, str], string: int, array: int) -> None:
        self.file, self.size, self.scalars, self.string_type, self.array_type = file, size, scalars, string, array

    def bytes(self, count: int) -> bytes:
        data = self.file.read(count)
        if len(data) != count:
            raise GgufReadError(f"truncated at byte {self.file.tell()}: the header needs {count} more bytes")
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack("<" + fmt, self.bytes(struct.calcsize(fmt)))[0]

    def count(self, per_item: int) -> int:
        value: int = self.unpack("Q")
        if value * per_item > self.size - self.file.tell():
            raise GgufReadError(
                f"a value of {value} items at byte {self.file.tell() - 8} runs past the end of the file"
            )
        return value

    def skip(self, count: int) -> None:
        if self.file.tell() + count > self.size:
            raise GgufReadError(f"a value at byte {self.file.tell()} runs past the end of the file")
        self.file.seek(count, 1)

    def skip_strings(self, count: int) -> None:
        position, block, at = self.file.tell(), b"", 0
        for _ in range(count):
            if at + 8 > len(block):
                position += at
                self.file.seek(position)
                block, at = self.file.read(1 << 20), 0
                if len(block) < 8:
                    raise GgufReadError(f"an array of strings runs past the end of the file at byte {position}")
            at += 8 + int.from_bytes(block[at : at + 8], "little")
        if position + at > self.size:
            raise GgufReadError("an array of strings runs past the end of the file")
        self.file.seek(position + at)

    def string(self, keep: bool = True) -> str | None:
        length = self.count(1)
        if not keep or length > GGUF_MAX_STRING_CHARS * 4:
            self.skip(length)
            return None
        text = self.bytes(length).decode("utf-8", errors="replace")
        return text if len(text) <= GGUF_MAX_STRING_CHARS else None

    def value(self, kind: int, keep: bool = True, depth: int = 0) -> Any:
        """One value; None for one skipped (too long, non-finite, an array of arrays)."""
        if kind in self.scalars:
            value = self.unpack(self.scalars[kind])
            return value if not isinstance(value, float) or math.isfinite(value) else None
        if kind == self.string_type:
            return self.string(keep)
        if kind != self.array_type or depth > 4:
            raise GgufReadError(f"unknown value type {kind} (or arrays nested too deep) at byte {self.file.tell()}")
        item: int = self.unpack("I")
        if item in self.scalars:
            width = struct.calcsize(self.scalars[item])
            length = self.count(width)
            if not keep or length > GGUF_MAX_ARRAY:
                self.skip(length * width)
                return None
            values = struct.unpack(f"<{length}{self.scalars[item]}", self.bytes(length * width))
            return [v if not isinstance(v, float) or math.isfinite(v) else None for v in values]
        length = self.count(8 if item == self.string_type else 12)
        keep = keep and length <= GGUF_MAX_ARRAY and item == self.string_type
        if item == self.string_type and not keep:
            self.skip_strings(length)
            return None
        strings = [self.value(item, keep, depth + 1) for _ in range(length)]
        return strings if keep and all(isinstance(v, str) for v in strings) else None


def read_gguf(path: str | Path) -> dict[str, Any]:
    """A GGUF file's header as the ``/v1/models/gguf`` request wants it: ``{"metadata": {key: value},
    "tensors": {rope tensor: [factors]}}``. Reads the header and, of the tensor data (the weights), only the small
    rope tensors; arrays over 8192 values (the vocabulary) and strings over 4096 characters are skipped. Needs the
    ``gguf`` package (``pip install 'posenc-client[gguf]'``); ``GgufReadError`` for a file that is not a GGUF."""
    try:
        from gguf.constants import GGML_QUANT_SIZES, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType
    except ImportError:
        raise ImportError(
            "reading a GGUF file needs the gguf package: pip install 'posenc-client[gguf]' (or pip install gguf)"
        ) from None
    scalars: dict[int, str] = {
        GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
        GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i", GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "?",
        GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d",
    }  # fmt: skip
    floats: dict[int, str] = {
        GGMLQuantizationType.F32: "f", GGMLQuantizationType.F16: "e", GGMLQuantizationType.F64: "d"
    }  # fmt: skip
    with Path(path).open("rb") as file:
        size = file.seek(0, 2)
        file.seek(0)
        header = _GgufHeader(file, size, scalars, GGUFValueType.STRING, GGUFValueType.ARRAY)
        if size < 4 or header.unpack("I") != GGUF_MAGIC:
            raise GgufReadError("not a GGUF file (it does not start with the magic bytes 'GGUF')")
        version = header.unpack("I")
        if version not in (2, 3):
            raise GgufReadError(f"GGUF version {version} (big-endian, or not one this reader knows: 2 and 3)")
        tensor_count, key_count = header.unpack("Q"), header.unpack("Q")
        if key_count > 1 << 20 or tensor_count > 1 << 20:
            raise GgufReadError(f"a header of {key_count} keys and {tensor_count} tensors is not a model's")
        metadata: dict[str, Any] = {}
        for _ in range(key_count):
            key = header.string() or ""
            keep = len(metadata) < GGUF_MAX_KEYS and 0 < len(key) <= GGUF_MAX_KEY_CHARS
            value = header.value(header.unpack("I"), keep)
            if value is not None:
                metadata[key] = value
        infos: dict[str, tuple[int, int, int]] = {}
        for _ in range(tensor_count):
            name = header.string() or ""
            dims = header.unpack("I")
            if dims > 4:
                raise GgufReadError(f"tensor {name[:GGUF_MAX_KEY_CHARS]!r} has {dims} dimensions (at most 4)")
            shape = [header.unpack("Q") for _ in range(dims)]
            kind, offset = header.unpack("I"), header.unpack("Q")
            if name in GGUF_ROPE_TENSORS:
                infos[name] = (math.prod(shape), kind, offset)
        alignment = metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
            raise GgufReadError(f"general.alignment is {alignment!r}: must be a power of two")
        start = -(-file.tell() // alignment) * alignment
        tensors: dict[str, list[float]] = {}
        for name, (elements, kind, offset) in infos.items():
            fmt = floats.get(kind)
            if fmt is None or not 1 <= elements <= GGUF_MAX_TENSOR_VALUES:
                raise GgufReadError(f"tensor {name!r}: {elements} values of ggml type {kind}; a rope tensor is "
                                    f"1 ... {GGUF_MAX_TENSOR_VALUES} F32, F16 or F64 values")  # fmt: skip
            width = GGML_QUANT_SIZES[GGMLQuantizationType(kind)][1]
            if start + offset + elements * width > size:
                raise GgufReadError(f"tensor {name!r} lies past the end of the file (truncated?)")
            file.seek(start + offset)
            tensors[name] = [float(v) for v in struct.unpack(f"<{elements}{fmt}", file.read(elements * width))]
    return {"metadata": metadata, "tensors": tensors}
