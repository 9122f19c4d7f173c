"""How tensors travel in JSON.

An input tensor is either given (``{"dtype", "shape", "data"}`` with a flat row-major list, or
``{"dtype", "shape", "base64"}`` with little-endian C-order bytes) or generated on the server
(``{"random": {"shape", "seed", "distribution"}}``) so that a request can be tiny and reproducible.

Non-finite values are spelled explicitly as the strings ``"nan"``, ``"inf"`` and ``"-inf"``: plain JSON
has no way to write them, and a silent ``null`` would be a wrong answer.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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

MAX_RANK = 8
Dim = Annotated[int, Field(ge=0, le=2**31 - 1)]
Shape = Annotated[list[Dim], Field(max_length=MAX_RANK)]


def num_elements(shape: list[int] | tuple[int, ...]) -> int:
    """Element count of a shape; the empty shape is a scalar (1 element)."""
    return math.prod(shape)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TensorData(_Strict):
    """A tensor given inline: exactly one of ``data`` (flat, row-major) or ``base64`` (little-endian bytes)."""

    dtype: TensorDType = "float32"
    shape: Shape
    data: list[Scalar] | None = None
    base64: str | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> TensorData:
        if (self.data is None) == (self.base64 is None):
            raise ValueError("give exactly one of 'data' (a flat list) or 'base64' (little-endian bytes)")
        if self.data is not None and len(self.data) != num_elements(self.shape):
            raise ValueError(
                f"'data' has {len(self.data)} values but shape {self.shape} needs {num_elements(self.shape)}"
            )
        return self

    @property
    def num_elements(self) -> int:
        return num_elements(self.shape)


class RandomSpec(_Strict):
    """Server-side generated tensor: same shape, seed and distribution give the same values."""

    shape: Shape
    seed: int = 0
    distribution: Literal["normal", "uniform"] = "normal"
    dtype: FloatDType = "float32"


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
