"""Tensor codecs: what goes into a request, and what comes out of a response.

Everything travels as little-endian C-order bytes described by a dtype name (the server's names:
float32, float64, bfloat16, float16, int64, int32, bool) and a shape. RawTensor is that triple;
encode_input makes one from a torch tensor, a numpy array or nested lists, and to_format
turns one into a torch tensor, a numpy array or nested lists.

numpy has no bfloat16: with return_format="numpy" a bfloat16 tensor comes back as its uint16 bit
patterns (with a BFloat16BitsWarning); bfloat16_bits_to_float32 widens them exactly.
"""

from __future__ import annotations

import base64
import math
import os
import struct
import sys
import warnings
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from posenc_client._backends import ConcreteFormat, is_numpy_array, is_torch_tensor, require

Shape = tuple[int, ...]


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    safetensors_code: str
    array_code: str | None  # the stdlib ``array``/``struct`` code; None for bfloat16
    numpy_name: str  # bfloat16 maps to its bits, uint16


DTYPES: dict[str, DType] = {
    dtype.name: dtype
    for dtype in (
        DType("float32", 4, "F32", "f", "<f4"),
        DType("float64", 8, "F64", "d", "<f8"),
        DType("float16", 2, "F16", "e", "<f2"),
        DType("bfloat16", 2, "BF16", None, "<u2"),
        DType("int64", 8, "I64", "q", "<i8"),
        DType("int32", 4, "I32", "i", "<i4"),
        DType("int16", 2, "I16", "h", "<i2"),
        DType("int8", 1, "I8", "b", "|i1"),
        DType("uint8", 1, "U8", "B", "|u1"),
        DType("bool", 1, "BOOL", "?", "|b1"),
    )
}
BY_SAFETENSORS_CODE: dict[str, DType] = {dtype.safetensors_code: dtype for dtype in DTYPES.values()}
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class BFloat16BitsWarning(UserWarning):
    """A bfloat16 tensor was returned as uint16 bit patterns because numpy has no bfloat16."""


def dtype_info(name: str) -> DType:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unsupported tensor dtype {name!r}; known: {', '.join(DTYPES)}") from None


@dataclass(frozen=True)
class RawTensor:
    """Little-endian C-order bytes plus dtype name and shape."""

    dtype: str
    shape: Shape
    # owned, a view of a response buffer (writable: frombuffer on bytes would warn), or, for a tensor being
    # sent, a view of the caller's own array or tensor (read, never written)
    data: bytearray | memoryview

    def __post_init__(self) -> None:
        expected = math.prod(self.shape) * dtype_info(self.dtype).itemsize
        if len(self.data) != expected:
            raise ValueError(f"{len(self.data)} bytes for {self.dtype} {list(self.shape)}; expected {expected}")

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    def inline_json(self) -> dict[str, Any]:
        """The request form {"dtype", "shape", "base64"}."""
        encoded = base64.b64encode(self.data).decode()
        return {"dtype": self.dtype, "shape": list(self.shape), "base64": encoded}


# ----------------------------------------------------------------------------------------------- inputs


def encode_input(value: Any, *, default_dtype: str) -> RawTensor:
    """A torch tensor, numpy array or (nested) list of numbers as raw bytes.

    Lists take default_dtype (float32 for q and k, bool for masks); arrays and tensors keep their own
    dtype (numpy float64 stays float64; integer kinds other than int32 become int64).
    """
    if is_torch_tensor(value):
        return _from_torch(value)
    if is_numpy_array(value):
        return _from_numpy(value)
    if isinstance(value, Sequence | int | float | bool) and not isinstance(value, str | bytes):
        return _from_nested(value, dtype=default_dtype)
    raise TypeError(f"cannot send {type(value).__name__} as a tensor; give a torch tensor, numpy array or list")


def _from_torch(tensor: Any) -> RawTensor:
    torch = require("torch", purpose="sending a torch tensor")
    cpu = tensor.detach().to("cpu").contiguous()
    names = {
        torch.float32: "float32",
        torch.float64: "float64",
        torch.float16: "float16",
        torch.bfloat16: "bfloat16",
        torch.int64: "int64",
        torch.int32: "int32",
        torch.bool: "bool",
    }
    if cpu.dtype not in names:
        cpu = cpu.to(torch.int64) if not cpu.is_floating_point() else cpu.to(torch.float32)
    name = names[cpu.dtype]
    as_bytes = cpu.reshape(-1).view(torch.uint8)  # (nbytes,): the tensor's own memory, byte by byte
    # with numpy, a view of the tensor's memory: the bytes go out without a copy of their own
    data: bytearray | memoryview = memoryview(as_bytes.numpy()) if _numpy_importable() else bytearray(as_bytes.tolist())
    if sys.byteorder != "little":
        data = _byteswap(data, dtype_info(name))
    return RawTensor(name, tuple(int(size) for size in cpu.shape), data)


def _from_numpy(values: Any) -> RawTensor:
    np = require("numpy", purpose="sending a numpy array")
    kind = values.dtype.kind
    if kind == "b":
        name = "bool"
    elif kind == "f":
        name = {2: "float16", 4: "float32", 8: "float64"}.get(values.dtype.itemsize, "float64")
    elif kind in "iu":
        name = "int32" if values.dtype == np.int32 else "int64"
    else:
        raise TypeError(f"cannot send a numpy array of dtype {values.dtype}")
    converted = np.ascontiguousarray(values, dtype=np.dtype(DTYPES[name].numpy_name))  # no copy when it already is
    data: bytearray | memoryview = memoryview(converted.reshape(-1)).cast("B")  # (nbytes,) a view, not a copy
    if sys.byteorder != "little":
        data = _byteswap(data, dtype_info(name))
    return RawTensor(name, tuple(int(size) for size in values.shape), data)


def _numpy_importable() -> bool:
    from posenc_client._backends import has_module

    return has_module("numpy")


def _from_nested(value: Any, *, dtype: str) -> RawTensor:
    shape = _infer_shape(value)
    flat = _flatten(value, shape)
    return RawTensor(dtype, shape, pack_values(flat, dtype=dtype))


def _infer_shape(value: Any) -> Shape:
    shape: list[int] = []
    level = value
    while isinstance(level, Sequence) and not isinstance(level, str | bytes):
        shape.append(len(level))
        if not level:
            break
        level = level[0]
    return tuple(shape)


def _flatten(value: Any, shape: Shape) -> list[Any]:
    if not shape:
        return [value]
    if len(value) != shape[0]:
        raise ValueError(f"ragged nested list: expected {shape[0]} items, found {len(value)}")
    flat: list[Any] = []
    for item in value:
        flat.extend(_flatten(item, shape[1:]))
    return flat


def pack_values(flat: Sequence[Any], *, dtype: str) -> bytearray:
    """Little-endian bytes of a flat list of Python numbers (or 'nan'/'inf'/'-inf' strings)."""
    info = dtype_info(dtype)
    numbers = [_NON_FINITE[item] if isinstance(item, str) else item for item in flat]
    if info.array_code is None:  # bfloat16: round float32 bits to nearest even, keep the top half
        bits = array("I", struct.pack(f"<{len(numbers)}f", *numbers))
        halves = array("H", (_round_to_bfloat16(word) for word in bits))
        data = bytearray(halves.tobytes())
    elif info.array_code in ("e", "?"):
        data = bytearray(struct.pack(f"<{len(numbers)}{info.array_code}", *numbers))
    else:
        data = bytearray(array(info.array_code, numbers).tobytes())
        if sys.byteorder != "little":
            data = _byteswap(data, info)
    return data


def _round_to_bfloat16(word: int) -> int:
    if (word & 0x7F800000) == 0x7F800000 and word & 0x007FFFFF:  # NaN stays a (quiet) NaN
        return (word >> 16) | 0x0040
    return ((word + 0x7FFF + ((word >> 16) & 1)) >> 16) & 0xFFFF


def _byteswap(data: bytearray | memoryview, info: DType) -> bytearray:
    if info.itemsize == 1:
        return data if isinstance(data, bytearray) else bytearray(data)
    swapped = bytearray(len(data))
    for start in range(0, len(data), info.itemsize):
        swapped[start : start + info.itemsize] = data[start : start + info.itemsize][::-1]
    return swapped


# ---------------------------------------------------------------------------------------------- outputs


def from_json_tensor(payload: dict[str, Any]) -> RawTensor:
    """A TensorOut of a JSON response (flat data, non-finite values as strings) as raw bytes."""
    dtype = str(payload["dtype"])
    shape = tuple(int(size) for size in payload["shape"])
    return RawTensor(dtype, shape, pack_values(payload["data"], dtype=dtype))


def to_format(raw: RawTensor, fmt: ConcreteFormat) -> Any:
    if fmt == "torch":
        return _to_torch(raw)
    if fmt == "numpy":
        return _to_numpy(raw)
    return _to_nested_list(raw)


def _to_torch(raw: RawTensor) -> Any:
    torch = require("torch", purpose="return_format='torch'")
    dtype = getattr(torch, raw.dtype)
    if raw.num_elements == 0:
        return torch.empty(raw.shape, dtype=dtype)
    data = raw.data if sys.byteorder == "little" else _byteswap(raw.data, dtype_info(raw.dtype))
    return torch.frombuffer(data, dtype=dtype).reshape(raw.shape)


def _to_numpy(raw: RawTensor) -> Any:
    np = require("numpy", purpose="return_format='numpy'")
    info = dtype_info(raw.dtype)
    if raw.dtype == "bfloat16":
        warnings.warn(
            "numpy has no bfloat16: returning the uint16 bit patterns; "
            "posenc_client.bfloat16_bits_to_float32(array) widens them exactly "
            "(or use return_format='torch')",
            BFloat16BitsWarning,
            stacklevel=_first_frame_outside_package(),
        )
    if raw.num_elements == 0:
        return np.empty(raw.shape, dtype=np.dtype(info.numpy_name))
    array_ = np.frombuffer(raw.data, dtype=np.dtype(info.numpy_name)).reshape(raw.shape)
    return array_.astype(array_.dtype.newbyteorder("="), copy=False)


def _first_frame_outside_package() -> int:
    """The stacklevel that points a warning at the caller's code rather than at this package."""
    package_dir = os.path.dirname(__file__)
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(package_dir):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _to_nested_list(raw: RawTensor) -> Any:
    flat = unpack_values(raw)
    return _nest(flat, raw.shape)


def unpack_values(raw: RawTensor) -> list[Any]:
    """The flat list of Python numbers in a raw tensor (bfloat16 widened to float exactly)."""
    info = dtype_info(raw.dtype)
    count = raw.num_elements
    data = bytes(raw.data)
    if info.array_code is None:
        halves = struct.unpack(f"<{count}H", data)
        return list(struct.unpack(f"<{count}f", struct.pack(f"<{count}I", *(half << 16 for half in halves))))
    return list(struct.unpack(f"<{count}{info.array_code}", data))


def _nest(flat: list[Any], shape: Shape) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = math.prod(shape[1:])
    return [_nest(flat[index * step : (index + 1) * step], shape[1:]) for index in range(shape[0])]


def bfloat16_bits_to_float32(bits: Any) -> Any:
    """Widen a numpy uint16 array of bfloat16 bit patterns to float32 (exact)."""
    np = require("numpy", purpose="bfloat16_bits_to_float32")
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
