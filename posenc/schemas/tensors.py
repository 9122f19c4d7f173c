"""How tensors travel in JSON.

An input tensor is either given (``{"dtype", "shape", "data"}`` with a flat row-major list, or
``{"dtype", "shape", "base64"}`` with little-endian C-order bytes) or generated on the server
(``{"random": {"shape", "seed", "distribution"}}``) so that a request can be tiny and reproducible.

Non-finite values are spelled explicitly as the strings ``"nan"``, ``"inf"`` and ``"-inf"``: plain JSON
has no way to write them, and a silent ``null`` would be a wrong answer. A number that is not finite once
parsed (``NaN``, ``Infinity``, or ``1e400`` which overflows to infinity; Python's and pydantic's parsers
accept all three) is refused, so the only way to send a non-finite value is to name it.

A tensor that came in a safetensors request body is a ``TensorData`` too: the gateway reads the body's header
where it arrives and builds each one with ``TensorData.from_body`` (the dtype and shape the header declares, and
the body it is decoded from on first use, once the budgets have been checked against those shapes); JSON cannot
make one. Code downstream reads every input the same way (``posenc.tensors.to_torch``).

A ``data`` list is held as a stdlib ``array.array`` from the moment it validates: one machine value per
element (4 bytes for float32) instead of one Python object each (about 32 bytes), so a parsed request stays a
small multiple of its body's size; it serializes back to the JSON list.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

FloatDType = Literal["float32", "float64", "bfloat16", "float16"]
TensorDType = Literal["float32", "float64", "bfloat16", "float16", "int64", "int32", "bool"]
TENSOR_DTYPES: tuple[str, ...] = ("float32", "float64", "bfloat16", "float16", "int64", "int32", "bool")
ITEMSIZE: dict[str, int] = {
    "float32": 4,
    "float64": 8,
    "bfloat16": 2,
    "float16": 2,
    "int64": 8,
    "int32": 4,
    "bool": 1,
}
NonFinite = Literal["nan", "inf", "-inf"]
Scalar = float | int | bool | NonFinite
NON_FINITE_VALUES: dict[str, float] = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Integers that reach torch (positions, seeds, offsets): beyond int64 torch raises instead of refusing.
# For a narrower range write ``int = Field(ge=0, le=INT64_MAX)``: a ``Field(ge=0)`` on an ``Int64`` field is
# silently overridden by Int64's own ge (pydantic applies the Annotated bounds after the assigned Field's).
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]

# How each dtype's ``data`` is held: in the dtype itself where the stdlib array has it, so that torch can use
# the memory as it is; the half types as float64, which torch rounds once (as it did from the parsed list).
# Typecode "i" is the C int, 4 bytes on every platform CPython and torch run on.
ARRAY_TYPECODES: dict[str, str] = {
    "float32": "f",
    "float64": "d",
    "bfloat16": "d",
    "float16": "d",
    "int64": "q",
    "int32": "i",
    "bool": "B",
}

if TYPE_CHECKING:
    CompactArray = array[Any]
else:  # array.array is subscriptable at runtime only from Python 3.12
    CompactArray = array

MAX_RANK = 8
Dim = Annotated[int, Field(ge=0, le=2**31 - 1)]
Shape = Annotated[list[Dim], Field(max_length=MAX_RANK)]


def num_elements(shape: list[int] | tuple[int, ...]) -> int:
    """Element count of a shape; the empty shape is a scalar (1 element)."""
    return math.prod(shape)


# ------------------------------------------------------------------------------------------- data values
def _float_value(value: object) -> float:
    """One element of a floating-point tensor: a finite number, or a non-finite value spelled as a string."""
    if isinstance(value, str):
        if value in NON_FINITE_VALUES:
            return NON_FINITE_VALUES[value]
        raise ValueError("a string must be one of 'nan', 'inf', '-inf'")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(
                "a number that is not finite (NaN, Infinity, or out of float64 range like 1e400); "
                "write non-finite values as the strings 'nan', 'inf', '-inf'"
            )
        return value
    if isinstance(value, int):  # bool included: true is 1
        try:
            return float(value)
        except OverflowError:
            raise ValueError("an integer out of float64 range") from None
    raise ValueError("expected a number, or one of the strings 'nan', 'inf', '-inf'")


def _int_value(low: int, high: int, dtype: str) -> Callable[[object], int]:
    def convert(value: object) -> int:
        """One element of an integer tensor: a JSON integer (or boolean) within the dtype's range."""
        if not isinstance(value, int):
            raise ValueError(f"expected an integer for a {dtype} tensor")
        if not low <= value <= high:
            raise ValueError(f"an integer outside the {dtype} range [{low}, {high}]")
        return int(value)

    return convert


def _bool_value(value: object) -> int:
    """One element of a bool tensor: true or false (or the integers 1 and 0)."""
    if isinstance(value, int) and value in (0, 1):  # bool is an int subclass; 1.0 is not an int
        return int(value)
    raise ValueError("expected true or false")


_ELEMENT: dict[str, Callable[[object], float | int]] = {
    "float32": _float_value,
    "float64": _float_value,
    "bfloat16": _float_value,
    "float16": _float_value,
    "int64": _int_value(INT64_MIN, INT64_MAX, "int64"),
    "int32": _int_value(INT32_MIN, INT32_MAX, "int32"),
    "bool": _bool_value,
}


def _compact_values(values: Sequence[Any], dtype: str) -> CompactArray:
    """The values of a ``data`` list as an array of ``ARRAY_TYPECODES[dtype]``; ValueError names the first bad one.

    The array constructor converts a list in one C loop, with no object per value; it is tried first, and the
    checks it does not make (finite numbers, bools 0 or 1) run over the result or the list without a Python
    call per value. Lists it refuses (the "nan" strings, or a wrong element) go element by element.
    """
    typecode = ARRAY_TYPECODES[dtype]
    try:
        packed = array(typecode, values)
    except (TypeError, OverflowError):
        return _element_by_element(values, dtype)
    if typecode in "fd" and not all(map(math.isfinite, values)):
        return _element_by_element(values, dtype)  # a NaN or infinity that was a number, not a string
    if typecode == "B" and len(packed) and max(packed) > 1:
        return _element_by_element(values, dtype)
    return packed


def _element_by_element(values: Sequence[Any], dtype: str) -> CompactArray:
    convert = _ELEMENT[dtype]
    try:
        return array(ARRAY_TYPECODES[dtype], map(convert, values))
    except ValueError:
        pass
    for index, value in enumerate(values):  # only to say which value it was
        try:
            convert(value)
        except ValueError as exc:
            raise ValueError(f"value {index}: {exc}") from None
    raise AssertionError("a value failed to convert, then converted")  # pragma: no cover


def _wire_values(values: CompactArray) -> list[float | int | bool | str]:
    """The JSON list of a ``data`` array: floats with non-finite values spelled out, bools as true/false."""
    if values.typecode in "fd":
        return [v if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")) for v in values]
    if values.typecode == "B":
        return [bool(v) for v in values]
    listed: list[float | int | bool | str] = values.tolist()
    return listed


def _validate_data(value: Any, info: ValidationInfo) -> CompactArray:
    """``data`` against the dtype and shape validated before it: the count first, then the compact array."""
    if not isinstance(value, list | tuple):
        raise PydanticCustomError("list_type", "Input should be a valid list")
    dtype, shape = info.data.get("dtype"), info.data.get("shape")
    if dtype is None or shape is None:
        return array("d")  # the dtype or shape is invalid and already reported; there is nothing to check against
    expected = num_elements(shape)
    if len(value) != expected:
        raise PydanticCustomError(
            "tensor_size",
            "has {count} values but shape {shape} needs {expected}",
            {"count": len(value), "shape": str(shape), "expected": expected},
        )
    try:
        return _compact_values(value, dtype)
    except ValueError as exc:
        raise PydanticCustomError("tensor_value", "{reason}", {"reason": str(exc)}) from None


TensorValues = Annotated[
    CompactArray,
    PlainValidator(_validate_data, json_schema_input_type=list[Scalar]),
    PlainSerializer(_wire_values, return_type=list[Scalar]),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class BodySource(Protocol):
    """A request body's tensors by name (``posenc.tensors.SafetensorsBody``)."""

    def tensor(self, name: str, /) -> Any: ...


class TensorData(_Strict):
    """A tensor given inline: exactly one of ``data`` (flat, row-major) or ``base64`` (little-endian bytes)."""

    dtype: TensorDType = "float32"
    shape: Shape
    data: TensorValues | None = None
    base64: str | None = None

    _body: tuple[BodySource, str] | None = PrivateAttr(default=None)  # (its safetensors body, its name) or None

    @model_validator(mode="after")
    def _one_payload(self) -> TensorData:
        if self._body is None and (self.data is None) == (self.base64 is None):
            raise ValueError("give exactly one of 'data' (a flat list) or 'base64' (little-endian bytes)")
        return self

    @classmethod
    def from_body(cls, dtype: TensorDType, shape: list[int], source: BodySource, name: str) -> TensorData:
        """The tensor ``name`` of a safetensors body, as its header declares it: the third payload, besides data
        and base64, which only the gateway's body reader makes."""
        made = cls.model_construct(dtype=dtype, shape=shape, data=None, base64=None)
        made._body = (source, name)
        return made

    def body_tensor(self) -> Any:
        """The tensor a safetensors body carried (decoded on first use), or None for one given in JSON."""
        if self._body is None:
            return None
        source, name = self._body
        return source.tensor(name)

    @property
    def num_elements(self) -> int:
        return num_elements(self.shape)


# The most values a random spec may ask for anywhere (2^30: 4 GiB of float32), whatever the budgets: a shape's
# product is checked before anything is drawn, so no spec can overflow or exhaust memory on its way to a budget.
MAX_RANDOM_ELEMENTS = 1 << 30


class RandomSpec(_Strict):
    """Server-side generated tensor: same shape, seed and distribution give the same values."""

    shape: Shape
    seed: Int64 = 0
    distribution: Literal["normal", "uniform"] = "normal"
    dtype: FloatDType = "float32"

    @field_validator("shape")
    @classmethod
    def _drawable(cls, shape: list[int]) -> list[int]:
        if num_elements(shape) > MAX_RANDOM_ELEMENTS:
            raise ValueError(
                f"{num_elements(shape)} values is over the {MAX_RANDOM_ELEMENTS} a random tensor may have; "
                "send the tensor (application/vnd.safetensors) or ask for fewer values"
            )
        return shape


class RandomTensor(_Strict):
    random: RandomSpec

    @property
    def num_elements(self) -> int:
        return num_elements(self.random.shape)

    @property
    def shape(self) -> list[int]:
        return self.random.shape


TensorIn = TensorData | RandomTensor


class TensorOut(BaseModel):
    """A tensor in a JSON response: flat row-major ``data``; non-finite values as strings."""

    dtype: str
    shape: list[int]
    data: list[float | int | bool | NonFinite]


class TensorResponse(BaseModel):
    """The ``application/json`` body of every compute route."""

    tensors: dict[str, TensorOut]
    meta: dict[str, Any] = Field(default_factory=dict)


CONFIG_FIELDS = frozenset({"config", "against"})  # request fields that hold a model config, never a tensor


def declared_inputs(value: Any, loc: tuple[str | int, ...] = ()) -> list[tuple[tuple[str | int, ...], int]]:
    """(loc, elements) of every input tensor a request declares, read without decoding or drawing anything:
    parsed tensors, and in the raw dicts a route keeps as given (a setup's or a job method's ``params``) every
    ``{"random": {"shape": [...]}}`` and ``{"dtype", "shape", "data"}``. What the input budget is checked against
    before any tensor is made."""
    if isinstance(value, TensorData | RandomTensor):
        return [(loc, value.num_elements)]
    if isinstance(value, BaseModel):  # model configs (``config``, a GGUF's ``against``) hold no tensors
        names = [name for name in type(value).model_fields if name not in CONFIG_FIELDS]
        return [found for name in names for found in declared_inputs(getattr(value, name), (*loc, name))]
    if isinstance(value, list | tuple):
        return [found for index, item in enumerate(value) for found in declared_inputs(item, (*loc, index))]
    if isinstance(value, dict):
        random = value.get("random")
        raw: dict[Any, Any] = random if isinstance(random, dict) else value
        shape = raw.get("shape") if "random" in value or {"shape", "data"} <= value.keys() else None
        if isinstance(shape, list) and all(isinstance(size, int) and size >= 0 for size in shape):
            return [(loc, math.prod(shape))]
        return [found for key, item in value.items() for found in declared_inputs(item, (*loc, str(key)))]
    return []


def tensor_fields(value: Any) -> list[TensorData | RandomTensor]:
    """Every input tensor reachable from a request or params model (for size checks before decoding)."""
    found: list[TensorData | RandomTensor] = []
    if isinstance(value, TensorData | RandomTensor):
        found.append(value)
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            found.extend(tensor_fields(getattr(value, name)))
    elif isinstance(value, list | tuple):
        for item in value:
            found.extend(tensor_fields(item))
    elif isinstance(value, dict):
        for item in value.values():
            found.extend(tensor_fields(item))
    return found
