"""Compute results: the tensors a route returned (by name) and its meta, decoded from any media type."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Self

from posenc_client._backends import ConcreteFormat
from posenc_client._safetensors import read_safetensors
from posenc_client._tensors import RawTensor, from_json_tensor, to_format
from posenc_client._transport import HTTPResponse

JSON = "application/json"
OCTET_STREAM = "application/octet-stream"
SAFETENSORS = "application/vnd.safetensors"
NPY = "application/x-npy"


def decode_raw_tensors(response: HTTPResponse) -> tuple[dict[str, RawTensor], dict[str, Any]]:
    """Every tensor of a compute response as raw bytes, and its meta, whatever the media type."""
    media_type = response.media_type
    if media_type in (SAFETENSORS, "application/x-safetensors"):
        tensors, metadata = read_safetensors(response.content)
        return tensors, {key: _json_or_text(value) for key, value in metadata.items()}
    if media_type == OCTET_STREAM:
        listed = (response.header("x-posenc-tensors") or "tensor").split(",")
        name = response.header("x-posenc-tensor") or listed[0]
        shape_text = response.header("x-tensor-shape") or ""
        shape = tuple(int(size) for size in shape_text.split(",") if size.strip())
        dtype = response.header("x-tensor-dtype") or "float32"
        meta = _json_or_text(response.header("x-posenc-meta") or "{}")
        content = response.content
        tensor = RawTensor(dtype, shape, content if isinstance(content, bytearray) else bytearray(content))
        return {name: tensor}, meta if isinstance(meta, dict) else {}
    if media_type == JSON:
        payload = json.loads(response.content)
        tensors = {name: from_json_tensor(value) for name, value in payload.get("tensors", {}).items()}
        return tensors, dict(payload.get("meta") or {})
    raise ValueError(f"cannot decode a {media_type or 'untyped'} response as tensors")


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


@dataclass(frozen=True)
class TensorResult:
    """The tensors of a compute route (torch tensors, numpy arrays or nested lists) and its meta."""

    tensors: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    media_type: str = ""

    def __getitem__(self, name: str) -> Any:
        return self.tensors[name]

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    @classmethod
    def from_response(cls, response: HTTPResponse, *, fmt: ConcreteFormat) -> Self:
        raw, meta = decode_raw_tensors(response)
        tensors = {name: to_format(tensor, fmt) for name, tensor in raw.items()}
        return cls(tensors=tensors, meta=meta, media_type=response.media_type)


class BiasResult(TensorResult):
    @property
    def bias(self) -> Any:
        """(H, Nq, Nk), or the (H, Nq + Nk - 1) table of form='toeplitz'."""
        return self.tensors["bias"]


class RotaryResult(TensorResult):
    @property
    def q(self) -> Any:
        return self.tensors["q"]

    @property
    def k(self) -> Any | None:
        return self.tensors.get("k")

    @property
    def cos(self) -> Any | None:
        return self.tensors.get("cos")

    @property
    def sin(self) -> Any | None:
        return self.tensors.get("sin")


class EncodingResult(TensorResult):
    @property
    def encoding(self) -> Any:
        """(length, dim), (*grid, dim), or (num_nodes, dim) for a graph."""
        return self.tensors["encoding"]

    @property
    def prefix(self) -> Any | None:
        """(P, dim): the prefix tokens' rows when prefix_tokens P > 0 was asked for, else None."""
        return self.tensors.get("prefix")


class AttentionResult(TensorResult):
    @property
    def weights(self) -> Any:
        """Attention weights (B, H, Nq, Nk): post-softmax, or what a method of kind attention puts in its
        place (rows may then sum to less than one, the rest being leftover)."""
        return self.tensors["weights"]

    @property
    def output(self) -> Any | None:
        """weights @ v (B, H, Nq, Dv) when v was given, else None."""
        return self.tensors.get("output")

    @property
    def leftover(self) -> Any | None:
        """(B, H, Nq): the mass given to no key, for methods of kind attention called with v; else None."""
        return self.tensors.get("leftover")

    @property
    def entropy(self) -> Any | None:
        return self.tensors.get("entropy")

    @property
    def mean_distance(self) -> Any | None:
        return self.tensors.get("mean_distance")

    @property
    def mass_by_distance(self) -> Any | None:
        return self.tensors.get("mass_by_distance")
