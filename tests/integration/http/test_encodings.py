"""POST /v1/encodings for every absolute method, against posenc.pe.encoding in process."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from starlette.testclient import TestClient

from posenc.errors import InvalidInput
from posenc.pe import AbsoluteContext, MethodSpec, encoding, list_methods
from posenc.schemas.methods import Kind

DIM = 12


def grid_for(spec: MethodSpec) -> tuple[int, ...]:
    """The first of a 1D, 2D and 3D grid that the method accepts (it says which by an InvalidInput)."""
    for grid in ((16,), (4, 4), (2, 2, 4)):
        try:
            encoding(spec, spec.parse_params({}), AbsoluteContext(grid=grid, dim=DIM))
        except InvalidInput:
            continue
        return grid
    raise AssertionError(f"{spec.name} accepts none of the test grids")


# graph methods (axes 0) encode a graph's nodes: tested in test_grids_and_graphs.py
@pytest.mark.parametrize("spec", [s for s in list_methods(Kind.ABSOLUTE) if s.axes], ids=lambda spec: spec.name)
def test_every_absolute_method_matches_the_library(client: TestClient, wire: Any, spec: MethodSpec) -> None:
    grid = grid_for(spec)
    shape_field = {"length": grid[0]} if len(grid) == 1 else {"grid": list(grid)}
    request = {"method": spec.name, "dim": DIM} | shape_field
    response = client.post("/v1/encodings", json=request, headers={"Accept": "application/octet-stream"})
    assert response.status_code == 200, response.text
    got = wire.octet_stream(response)
    assert got.shape == (*grid, DIM)
    expected = encoding(spec, spec.parse_params({}), AbsoluteContext(grid=grid, dim=DIM))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_sinusoidal_by_hand(client: TestClient, wire: Any) -> None:
    """Vaswani et al.: P[n, 2i] = sin(n / 10000^(2i/D)), P[n, 2i + 1] = cos(same)."""
    body = client.post("/v1/encodings", json={"method": "sinusoidal", "length": 5, "dim": 6, "dtype": "float64"}).json()
    got = wire.json_tensor(body["tensors"]["encoding"])
    expected = torch.empty(5, 6, dtype=torch.float64)
    for n in range(5):
        for i in range(3):
            expected[n, 2 * i] = math.sin(n / 10000 ** (2 * i / 6))
            expected[n, 2 * i + 1] = math.cos(n / 10000 ** (2 * i / 6))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert body["meta"]["dtype"] == "float64"
    assert body["meta"]["grid"] == [5]


def test_length_and_grid_together_is_422(client: TestClient, wire: Any) -> None:
    request = {"method": "sinusoidal", "length": 4, "grid": [2, 2], "dim": 8}
    problem = wire.problem(client.post("/v1/encodings", json=request), 422)
    assert "exactly one" in problem["detail"]


def test_a_rotary_method_is_not_an_encoding(client: TestClient, wire: Any) -> None:
    problem = wire.problem(client.post("/v1/encodings", json={"method": "rope", "length": 4, "dim": 8}), 422)
    assert wire.locs(problem) == [["body", "method"]]
