"""Turn wire tensors (``posenc.schemas.tensors``) into torch tensors, and back into wire pieces."""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Sequence

import safetensors.torch
import torch

from posenc.errors import InvalidInput
from posenc.schemas.tensors import ITEMSIZE, CompactArray, RandomTensor, TensorData, TensorIn, TensorOut

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}
# torch dtype of each array typecode a TensorData's ``data`` can be held in (ARRAY_TYPECODES)
_ARRAY_DTYPES: dict[str, torch.dtype] = {
    "f": torch.float32,
    "d": torch.float64,
    "q": torch.int64,
    "i": torch.int32,
    "B": torch.bool,
}

Loc = tuple[str | int, ...]


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES[dtype]


def to_torch(tensor: TensorIn | torch.Tensor, loc: Loc, *, allow_non_finite: bool = False) -> torch.Tensor:
    """Decode an input tensor; ``loc`` names the field in errors (e.g. ``("body", "q")``).

    A torch tensor passes through unchanged: training substitutes nn.Parameters for a learned method's
    tensor fields (see ``MethodSpec.learned_init``), and gradients must flow through the method.
    """
    if isinstance(tensor, torch.Tensor):
        return tensor
    if isinstance(tensor, RandomTensor):
        return random_tensor(tensor)
    body = tensor.body_tensor()
    values: torch.Tensor = body if body is not None else _decode_data(tensor, loc)
    if values.is_floating_point() and not allow_non_finite and not bool(torch.isfinite(values).all()):
        bad = int((~torch.isfinite(values)).sum())
        raise InvalidInput((*loc, "data"), f"{bad} non-finite values (NaN or infinity) are not allowed here")
    return values


class SafetensorsBody:
    """The bytes of a safetensors request body: its tensors are decoded together on first use, which comes after
    the request's budgets were checked against the shapes its header declares (``TensorData.from_body``)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._decoded: dict[str, torch.Tensor] | None = None

    def tensor(self, name: str) -> torch.Tensor:
        if self._decoded is None:
            try:
                self._decoded = safetensors.torch.load(self._data)
            except Exception as exc:  # the library raises its own SafetensorError on corrupt data
                raise InvalidInput(("body",), f"not a readable safetensors file: {exc}") from None
        return self._decoded[name]


def random_tensor(tensor: RandomTensor) -> torch.Tensor:
    """Deterministic in (shape, seed, distribution, dtype): generated in float32 on the CPU, then cast."""
    spec = tensor.random
    generator = torch.Generator().manual_seed(spec.seed)
    if spec.distribution == "normal":
        values = torch.randn(spec.shape, generator=generator, dtype=torch.float32)
    else:
        values = torch.rand(spec.shape, generator=generator, dtype=torch.float32)
    return values.to(TORCH_DTYPES[spec.dtype])


def _decode_data(tensor: TensorData, loc: Loc) -> torch.Tensor:
    dtype = TORCH_DTYPES[tensor.dtype]
    if tensor.base64 is not None:
        return _from_base64(tensor.base64, tensor.dtype, tensor.shape, (*loc, "base64"))
    assert tensor.data is not None  # the schema guarantees one payload
    return _from_array(tensor.data, dtype).reshape(tensor.shape)


def _from_base64(encoded: str, dtype: str, shape: list[int], loc: Loc) -> torch.Tensor:
    """Decode into a fresh bytearray the tensor then owns (writable, so torch does not warn, and no copy)."""
    try:
        raw = bytearray(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput(loc, f"not valid base64: {exc}") from None
    expected = math.prod(shape) * ITEMSIZE[dtype]
    if len(raw) != expected:
        raise InvalidInput(loc, f"{len(raw)} bytes, but shape {shape} of {dtype} needs {expected}")
    if not raw:
        return torch.empty(shape, dtype=TORCH_DTYPES[dtype])
    return torch.frombuffer(raw, dtype=TORCH_DTYPES[dtype]).reshape(shape)


def _from_array(values: CompactArray, dtype: torch.dtype) -> torch.Tensor:
    """A flat tensor over the array's memory (no copy) when the array holds ``dtype`` itself; the half types,
    held as float64, are rounded to ``dtype`` once here. The tensor shares memory with the request model."""
    held = _ARRAY_DTYPES[values.typecode]
    flat = torch.frombuffer(values, dtype=held) if len(values) else torch.empty(0, dtype=held)
    return flat.to(dtype)


def positions_tensor(value: TensorIn | Sequence[int] | Sequence[Sequence[int]], loc: Loc) -> torch.Tensor:
    """Integer positions stay int64: they are converted to floating point only at the frequency multiply."""
    if isinstance(value, TensorData | RandomTensor):
        decoded = to_torch(value, loc)
        if decoded.is_floating_point():
            if not bool((decoded == decoded.round()).all()):
                raise InvalidInput(loc, "positions must be integers")
            decoded = decoded.round()
        return decoded.to(torch.int64)
    return torch.tensor(list(value), dtype=torch.int64)


def to_wire(tensor: torch.Tensor) -> TensorOut:
    """A JSON tensor: flat row-major values; NaN and infinities as the strings 'nan', 'inf', '-inf'."""
    cpu = tensor.detach().to("cpu").contiguous()
    name = dtype_name(cpu.dtype)
    if cpu.is_floating_point():
        flat = cpu.reshape(-1)  # (numel,)
        data: list[float | int | bool | str] = flat.to(torch.float64).tolist()
        # only the non-finite entries are looked at in Python (a causal bias has one per future key)
        for index in (~torch.isfinite(flat)).nonzero().reshape(-1).tolist():  # (non-finite,) flat indices
            value = data[index]
            assert isinstance(value, float)
            data[index] = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    else:
        data = cpu.reshape(-1).tolist()
    return TensorOut(dtype=name, shape=list(cpu.shape), data=data)


def le_bytes(tensor: torch.Tensor) -> bytes:
    """Raw little-endian C-order bytes of a CPU tensor (bfloat16 as its 2-byte pattern)."""
    cpu = tensor.detach().to("cpu").contiguous()
    if cpu.dtype == torch.bfloat16:
        cpu = cpu.view(torch.int16)
    array = cpu.numpy()
    if array.dtype.byteorder == ">":
        array = array.byteswap().view(array.dtype.newbyteorder("<"))
    return array.tobytes(order="C")
