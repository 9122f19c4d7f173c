"""HTTP tests run the real app (``create_app``) in process through Starlette's TestClient.

Each test that needs a different configuration builds its own app with ``make_client(**settings)``;
nothing of the server is mocked. ``wire`` decodes responses the way a client would.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import numpy as np
import pytest
import safetensors.torch
import torch
from starlette.testclient import TestClient

from posenc.tensors import TORCH_DTYPES
from service.main import create_app

MakeClient = Callable[..., TestClient]
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@pytest.fixture
def make_client(isolated_settings: Callable[..., Any]) -> Iterator[MakeClient]:
    with ExitStack() as stack:

        def build(**overrides: Any) -> TestClient:
            app = create_app(settings=isolated_settings(**overrides))
            return stack.enter_context(TestClient(app, raise_server_exceptions=False))

        yield build


@pytest.fixture
def client(make_client: MakeClient) -> TestClient:
    return make_client()


class Wire:
    """Client-side decoding of every response type, written independently of the server's encoders."""

    @staticmethod
    def json_tensor(item: dict[str, Any]) -> torch.Tensor:
        values = [_NON_FINITE[v] if isinstance(v, str) else v for v in item["data"]]
        dtype = TORCH_DTYPES[item["dtype"]]
        wide = torch.float64 if dtype.is_floating_point else dtype
        return torch.tensor(values, dtype=wide).to(dtype).reshape(item["shape"])

    @staticmethod
    def octet_stream(response: httpx.Response) -> torch.Tensor:
        dtype = TORCH_DTYPES[response.headers["x-tensor-dtype"]]
        shape = [int(s) for s in response.headers["x-tensor-shape"].split(",")]
        buffer = bytearray(response.content)
        if dtype == torch.bfloat16:
            return torch.frombuffer(buffer, dtype=torch.int16).view(torch.bfloat16).reshape(shape)
        return torch.frombuffer(buffer, dtype=dtype).reshape(shape)

    @staticmethod
    def npy(response: httpx.Response) -> np.ndarray[Any, Any]:
        return np.load(io.BytesIO(response.content), allow_pickle=False)

    @staticmethod
    def safetensors(response: httpx.Response) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors = safetensors.torch.load(response.content)
        header_length = int.from_bytes(response.content[:8], "little")
        header = json.loads(response.content[8 : 8 + header_length])
        metadata = {key: json.loads(value) for key, value in header.get("__metadata__", {}).items()}
        return tensors, metadata

    @staticmethod
    def problem(response: httpx.Response, status: int) -> dict[str, Any]:
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/problem+json"
        body: dict[str, Any] = response.json()
        assert body["status"] == status
        assert body["title"]
        return body

    @staticmethod
    def locs(problem: dict[str, Any]) -> list[list[Any]]:
        return [error["loc"] for error in problem.get("errors") or []]


@pytest.fixture
def wire() -> type[Wire]:
    return Wire


def inline_tensor(tensor: torch.Tensor) -> dict[str, Any]:
    """A TensorData field carrying ``tensor`` as base64 little-endian bytes (bfloat16 as its bit pattern)."""
    import base64

    name = str(tensor.dtype).removeprefix("torch.")
    raw = tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor
    return {
        "dtype": name,
        "shape": list(tensor.shape),
        "base64": base64.b64encode(raw.numpy().tobytes()).decode(),
    }


@pytest.fixture
def inline() -> Callable[[torch.Tensor], dict[str, Any]]:
    return inline_tensor
