"""Positions beyond 1D through the real app: grids with prefix tokens, explicit (N, A) positions, graphs.

Every multi-axis method answers /v1/attention on a grid exactly as the library does in process with the same
positions; prefix tokens are left alone (identity rotation, zero bias); graph methods read the graph on /v1/bias,
/v1/attention and /v1/encodings; bad grids, graphs and prefix counts are 422s naming the field.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from starlette.testclient import TestClient

from posenc.attention import attention_maps
from posenc.pe import MethodSpec, get_method, list_methods
from posenc.pe.appliers import grid_positions
from posenc.pe.types import Graph
from posenc.schemas.tensors import RandomTensor
from posenc.tensors import random_tensor

SAFETENSORS = {"Accept": "application/vnd.safetensors"}
GRID_METHODS = [spec for spec in list_methods() if spec.axes >= 2]
GRAPH_METHODS = [spec for spec in list_methods() if spec.axes == 0]


def _grid_for(spec: MethodSpec) -> list[int]:
    return [3, 4] if spec.axes == 2 else [2, 2, 3]


def _random(shape: list[int], seed: int) -> dict[str, Any]:
    return {"random": {"shape": shape, "seed": seed}}


def _tensor(spec: dict[str, Any]) -> torch.Tensor:
    return random_tensor(RandomTensor.model_validate(spec))


def test_there_are_grid_and_graph_methods() -> None:
    assert {"alibi_2d", "rope_2d_axial", "sinusoidal_2d", "sinusoidal_3d"} <= {s.name for s in GRID_METHODS}
    assert {"vit_learned", "rope_mixed", "liere", "comrope", "swin"} <= {s.name for s in GRID_METHODS}
    assert {"graphormer", "laplacian_pe"} <= {s.name for s in GRAPH_METHODS}


@pytest.mark.parametrize("prefix", [0, 1])
@pytest.mark.parametrize("spec", GRID_METHODS, ids=lambda spec: spec.name)
def test_every_grid_method_answers_attention_on_a_grid(
    client: TestClient, wire: Any, example_params: Any, spec: MethodSpec, prefix: int
) -> None:
    grid = _grid_for(spec)
    tokens = prefix + math.prod(grid)
    q, k, v = _random([1, 2, tokens, 16], 1), _random([1, 2, tokens, 16], 2), _random([1, 2, tokens, 3], 3)
    raw = example_params(spec.name, 16)  # the heads here are 16 wide
    body = {"method": spec.name, "params": raw, "q": q, "k": k, "v": v, "grid": grid, "prefix_tokens": prefix}
    response = client.post("/v1/attention", json=body, headers=SAFETENSORS)
    assert response.status_code == 200, response.text
    tensors, meta = wire.safetensors(response)
    assert meta["causal"] is False  # a grid has no direction: causal defaults to false
    expected = attention_maps(
        _tensor(q),
        _tensor(k),
        v=_tensor(v),
        spec=spec,
        params=spec.parse_params(raw),
        causal=False,
        positions=grid_positions(tuple(grid), prefix),
    )
    torch.testing.assert_close(tensors["weights"], expected.weights, rtol=0, atol=0)
    torch.testing.assert_close(tensors["output"], expected.output, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["rope_2d_axial", "rope_mixed", "liere", "comrope"])
def test_rotary_grid_methods_leave_prefix_tokens_unrotated(
    client: TestClient, wire: Any, example_params: Any, name: str
) -> None:
    q = _random([1, 2, 1 + 12, 16], 4)
    body = {
        "method": name,
        "params": example_params(name),
        "q": q,
        "rotate": "query",
        "grid": [3, 4],
        "prefix_tokens": 1,
    }
    response = client.post("/v1/rotary", json=body, headers=SAFETENSORS)
    assert response.status_code == 200, response.text
    tensors, meta = wire.safetensors(response)
    original = _tensor(q)
    torch.testing.assert_close(tensors["q"][:, :, 0], original[:, :, 0], rtol=0, atol=0)  # the CLS token
    assert not torch.allclose(tensors["q"][:, :, 1:], original[:, :, 1:])
    assert meta["positions"].startswith("grid [3, 4] with 1 prefix")
    # explicit (N, 2) positions give the same rotation as the grid they spell
    positions = grid_positions((3, 4), 1).tolist()
    explicit = client.post("/v1/rotary", json={**body, "grid": None, "prefix_tokens": 0, "positions": positions})
    assert explicit.status_code == 200, explicit.text
    torch.testing.assert_close(wire.json_tensor(explicit.json()["tensors"]["q"]), tensors["q"], rtol=0, atol=1e-6)


def test_bias_on_a_grid_gives_zero_rows_to_prefix_tokens_and_the_2d_distance(client: TestClient, wire: Any) -> None:
    body = {"method": "alibi_2d", "num_heads": 2, "grid": [3, 3], "prefix_tokens": 1, "dtype": "float64"}
    response = client.post("/v1/bias", json=body, headers=SAFETENSORS)
    assert response.status_code == 200, response.text
    bias = wire.safetensors(response)[0]["bias"]  # (H, 10, 10)
    assert bias.shape == (2, 10, 10)
    assert torch.equal(bias[:, 0, :], torch.zeros(2, 10, dtype=torch.float64))
    assert torch.equal(bias[:, :, 0], torch.zeros(2, 10, dtype=torch.float64))
    # patch 0 at (0, 0) and patch 8 at (2, 2): distance 2·sqrt(2), slope of head 0 is 2^-4 for H = 2
    assert bias[0, 1, 9].item() == pytest.approx(-(2**-4) * 2 * math.sqrt(2), rel=1e-12)


def test_swin_with_beit_cls_entries_on_the_prefix_token(client: TestClient, wire: Any) -> None:
    table = torch.arange(((2 * 2 - 1) ** 2 + 3) * 2, dtype=torch.float64).reshape(-1, 2)  # (R, H)
    params = {
        "window": [2, 2],
        "beit_cls": True,
        "table": {"dtype": "float64", "shape": list(table.shape), "data": table.reshape(-1).tolist()},
    }
    body = {"method": "swin", "params": params, "num_heads": 2, "grid": [2, 2], "prefix_tokens": 1, "dtype": "float64"}
    response = client.post("/v1/bias", json=body, headers=SAFETENSORS)
    assert response.status_code == 200, response.text
    bias = wire.safetensors(response)[0]["bias"]  # (H, 5, 5)
    rows = table.shape[0]
    assert torch.equal(bias[:, 0, 1:], table[rows - 3][:, None].expand(2, 4))  # CLS → token
    assert torch.equal(bias[:, 1:, 0], table[rows - 2][:, None].expand(2, 4))  # token → CLS
    assert torch.equal(bias[:, 0, 0], table[rows - 1])  # CLS → CLS


PATH = {"num_nodes": 4, "edges": [[0, 1], [1, 2], [2, 3]]}


def test_graphormer_bias_on_a_path_is_the_table_at_the_hop_distance(client: TestClient, wire: Any) -> None:
    table = torch.randn(512, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    params = {"spatial_table": {"dtype": "float64", "shape": [512, 2], "data": table.reshape(-1).tolist()}}
    body = {"method": "graphormer", "params": params, "num_heads": 2, "graph": PATH, "dtype": "float64"}
    response = client.post("/v1/bias", json=body, headers=SAFETENSORS)
    assert response.status_code == 200, response.text
    bias = wire.safetensors(response)[0]["bias"]  # (H, 4, 4)
    for i in range(4):
        for j in range(4):
            assert torch.equal(bias[:, i, j], table[abs(i - j) + 1]), (i, j)  # row = SPD + 1


def test_graph_methods_answer_attention_and_encodings(client: TestClient, wire: Any) -> None:
    graph = Graph(num_nodes=4, edges=torch.tensor(PATH["edges"]))
    q, k = _random([1, 2, 5, 8], 5), _random([1, 2, 5, 8], 6)
    for name in ("graphormer", "laplacian_pe"):
        spec = get_method(name)
        params: dict[str, Any] = {}
        body = {"method": name, "q": q, "k": k, "graph": PATH, "prefix_tokens": 1, "params": params}
        response = client.post("/v1/attention", json=body, headers=SAFETENSORS)
        assert response.status_code == 200, response.text  # laplacian_pe: 3 eigenvectors, zero-padded to D = 8
        expected = attention_maps(
            _tensor(q),
            _tensor(k),
            spec=spec,
            params=spec.parse_params(params),
            causal=False,
            positions=torch.tensor([-1, 0, 1, 2, 3]),
            graph=graph,
        )
        torch.testing.assert_close(wire.safetensors(response)[0]["weights"], expected.weights, rtol=0, atol=0)
    encoding = client.post("/v1/encodings", json={"method": "laplacian_pe", "graph": PATH, "dim": 2})
    assert encoding.status_code == 200, encoding.text
    pe = wire.json_tensor(encoding.json()["tensors"]["encoding"])
    assert pe.shape == (4, 2)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"method": "rope_2d_axial", "grid": [3, 3]}, ["body", "grid"]),  # 9 grid tokens for 12 keys
        ({"method": "rope_2d_axial", "grid": [2, 2, 3]}, ["body", "grid"]),  # a 2D method given 3 axes
        ({"method": "rope", "grid": [3, 4]}, ["body", "grid"]),  # a 1D method given a grid
        ({"method": "rope_2d_axial", "grid": [3, 4], "prefix_tokens": 20}, ["body", "prefix_tokens"]),
        ({"method": "rope_2d_axial", "prefix_tokens": 1}, ["body", "prefix_tokens"]),  # prefix without a grid
        ({"method": "rope_2d_axial", "positions": [[0, 0]] * 5}, ["body", "positions"]),  # 5 rows for 12 keys
        ({"method": "graphormer", "graph": {"num_nodes": 12, "edges": [[0, 12]]}}, ["body", "graph", "edges", 0]),
        ({"method": "graphormer", "graph": {"num_nodes": 11}}, ["body", "graph", "num_nodes"]),
        ({"method": "graphormer"}, ["body", "graph"]),  # a graph method without a graph
        ({"method": "alibi", "graph": {"num_nodes": 12}}, ["body", "graph"]),  # not a graph method
    ],
)
def test_bad_layouts_are_422_naming_the_field(
    client: TestClient, wire: Any, body: dict[str, Any], loc: list[Any]
) -> None:
    tensors = {"q": _random([1, 2, 12, 8], 7), "k": _random([1, 2, 12, 8], 8)}
    response = client.post("/v1/attention", json={**tensors, **body})
    assert wire.locs(wire.problem(response, 422)) == [loc], response.text


def test_attention_statistics_on_a_grid_use_the_grid_distance(client: TestClient, wire: Any) -> None:
    """On a 3 x 4 grid with a CLS token, a query's distance to a key is Σ|Δrow| + |Δcol| (0 to and from the CLS),
    not the distance of their token indices; the answer says which distance it used."""
    grid, prefix = [3, 4], 1
    tokens = prefix + 12
    q, k = _random([1, 2, tokens, 8], 1), _random([1, 2, tokens, 8], 2)
    body = {"method": "alibi_2d", "q": q, "k": k, "grid": grid, "prefix_tokens": prefix}
    response = client.post("/v1/attention", json=body, headers=SAFETENSORS)
    assert response.status_code == 200, response.text
    tensors, meta = wire.safetensors(response)
    cells = grid_positions(tuple(grid), prefix)  # (13, 2), the CLS row negative
    rows = torch.tensor([[0, 0]] + [[r, c] for r in range(3) for c in range(4)])  # (13, 2)
    distance = (rows[:, None, :] - rows[None, :, :]).abs().sum(-1).to(torch.float64)  # (13, 13)
    distance[0, :] = 0
    distance[:, 0] = 0
    assert bool((cells[1:] >= 0).all())
    weights = tensors["weights"].to(torch.float64)[0]  # (H, N, N)
    expected = (weights * distance).sum(-1).mean(-1)  # (H,)
    torch.testing.assert_close(tensors["mean_distance"].to(torch.float64), expected, rtol=1e-5, atol=1e-6)
    token_order = (weights * (torch.arange(tokens)[:, None] - torch.arange(tokens)[None, :]).abs()).sum(-1).mean(-1)
    assert not torch.allclose(expected, token_order)
    assert "grid distance" in meta["stats"]
