"""Positions beyond 1D through the SDK against a live gateway: grids with prefix tokens, (N, A) positions, graphs.

Every answer is checked against the library computed in process with the same positions (or against the
formula), through ``Client`` and ``AsyncClient`` where the ``call`` fixture is used.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from posenc_client import Client, GraphIn, ValidationError
from posenc_client._safetensors import read_safetensors
from posenc_client.resources.attention import _attention_request
from posenc_client.resources.rotary import _rotary_request

from posenc.attention import attention_maps
from posenc.pe import AbsoluteContext, encoding, get_method
from posenc.pe.appliers import grid_positions
from posenc.pe.types import Graph

pytestmark = pytest.mark.integration
Call = Callable[..., Any]
CLI = str(Path(sys.executable).with_name("posenc-client"))
PATH_EDGES = [[0, 1], [1, 2], [2, 3]]
PATH = {"num_nodes": 4, "edges": PATH_EDGES}  # the path 0 - 1 - 2 - 3


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------- attention
@pytest.mark.parametrize("prefix", [0, 1])
@pytest.mark.parametrize("method", ["rope_2d_axial", "alibi_2d"])
def test_attention_on_a_grid_matches_the_library(call: Call, method: str, prefix: int) -> None:
    grid = (3, 4)
    tokens = prefix + math.prod(grid)
    q, k, v = _randn(1, 2, tokens, 8, seed=1), _randn(1, 2, tokens, 8, seed=2), _randn(1, 2, tokens, 3, seed=3)
    result = call(lambda c: c.attention.compute(q, k, v=v, method=method, grid=grid, prefix_tokens=prefix))
    assert result.meta["causal"] is False  # a grid has no direction: the server's default
    spec = get_method(method)
    expected = attention_maps(
        q, k, v=v, spec=spec, params=spec.parse_params({}), causal=False, positions=grid_positions(grid, prefix)
    )
    torch.testing.assert_close(result.weights, expected.weights, rtol=0, atol=0)
    torch.testing.assert_close(result.output, expected.output, rtol=0, atol=0)
    assert result.mass_by_distance is not None


@pytest.mark.parametrize("upload", ["json", "safetensors"])
@pytest.mark.parametrize("form", ["list", "numpy", "torch"])
def test_attention_with_explicit_grid_positions_equals_the_grid(call: Call, upload: str, form: str) -> None:
    grid, prefix = (3, 4), 1
    q, k = _randn(1, 2, 13, 8, seed=4), _randn(1, 2, 13, 8, seed=5)
    coords = grid_positions(grid, prefix)  # (13, 2), the CLS token at (-1, -1)
    positions: Any = {"list": coords.tolist(), "numpy": coords.numpy(), "torch": coords}[form]
    by_grid = call(lambda c: c.attention.compute(q, k, method="rope_2d_axial", grid=grid, prefix_tokens=prefix))
    explicit = call(lambda c: c.attention.compute(q, k, method="rope_2d_axial", positions=positions, upload=upload))
    assert explicit.meta["causal"] is False  # explicit positions: not causal unless asked
    torch.testing.assert_close(explicit.weights, by_grid.weights, rtol=0, atol=0)
    causal = call(
        lambda c: c.attention.compute(q, k, method="rope_2d_axial", positions=positions, causal=True, upload=upload)
    )
    assert torch.all(torch.triu(causal.weights, diagonal=1) == 0)  # causal=True still masks, in token order


def test_one_dimensional_attention_stays_causal_by_default(call: Call) -> None:
    q, k = _randn(1, 1, 4, 8, seed=6), _randn(1, 1, 4, 8, seed=7)
    result = call(lambda c: c.attention.compute(q, k, method="rope", stats=False))
    assert result.meta["causal"] is True
    assert torch.all(torch.triu(result.weights, diagonal=1) == 0)


def test_graphormer_attention_on_a_path_graph(call: Call) -> None:
    spec = get_method("graphormer")
    graph = Graph(num_nodes=4, edges=torch.tensor(PATH_EDGES))
    for prefix in (0, 1):
        q, k = _randn(1, 2, 4 + prefix, 8, seed=8), _randn(1, 2, 4 + prefix, 8, seed=9)
        result = call(
            lambda c, p=prefix, q=q, k=k: c.attention.compute(q, k, method="graphormer", graph=PATH, prefix_tokens=p)
        )
        assert result.meta["causal"] is False
        positions = torch.cat((-torch.arange(1, prefix + 1), torch.arange(4)))
        expected = attention_maps(
            q, k, spec=spec, params=spec.parse_params({}), causal=False, positions=positions, graph=graph
        )
        torch.testing.assert_close(result.weights, expected.weights, rtol=0, atol=0)
    # the graph as the generated model, and with numpy edges: the same request
    q, k = _randn(1, 2, 4, 8, seed=8), _randn(1, 2, 4, 8, seed=9)
    as_dict = call(lambda c: c.attention.compute(q, k, method="graphormer", graph=PATH, stats=False))
    as_model = call(lambda c: c.attention.compute(q, k, method="graphormer", graph=GraphIn(**PATH), stats=False))
    as_numpy = call(
        lambda c: c.attention.compute(
            q, k, method="graphormer", graph={"num_nodes": 4, "edges": np.array(PATH_EDGES)}, stats=False
        )
    )
    torch.testing.assert_close(as_model.weights, as_dict.weights, rtol=0, atol=0)
    torch.testing.assert_close(as_numpy.weights, as_dict.weights, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("layout", "field"),
    [
        ({"grid": [3, 3]}, "grid"),  # 9 grid tokens for 12 keys
        ({"grid": [2, 2, 3]}, "grid"),  # a 2D method given 3 axes
        ({"grid": [3, 4], "prefix_tokens": 20}, "prefix_tokens"),
        ({"positions": [[0, 0]] * 5}, "positions"),  # 5 rows for 12 keys
    ],
)
def test_a_bad_layout_is_a_validation_error_naming_the_field(call: Call, layout: dict[str, Any], field: str) -> None:
    q = {"random": {"shape": [1, 2, 12, 8], "seed": 0}}
    with pytest.raises(ValidationError) as caught:
        call(lambda c: c.attention.compute(q, q, method="rope_2d_axial", **layout))
    error = caught.value
    assert error.status == 422
    assert [e.loc for e in error.errors] == [("body", field)]
    assert error.errors[0].field == field
    assert field in str(error)


def test_what_the_layout_arguments_put_on_the_wire() -> None:
    common: dict[str, Any] = {
        "method": "rope_2d_axial",
        "v": None,
        "x": None,
        "params": None,
        "causal": None,
        "query_offset": None,
        "key_padding_mask": None,
        "stats": True,
        "scale": None,
        "pairing": "half",
        "dtype": None,
        "accept": None,
    }
    q = {"random": {"shape": [1, 2, 13, 8]}}
    plain = _attention_request(q, q, upload="json", **common).json_body
    assert plain is not None
    assert not {"causal", "grid", "prefix_tokens", "positions", "graph"} & set(plain)  # the server decides
    gridded = _attention_request(q, q, upload="json", grid=(3, 4), prefix_tokens=1, **common).json_body
    assert gridded is not None
    assert gridded["grid"] == [3, 4]
    assert gridded["prefix_tokens"] == 1
    graph = GraphIn(num_nodes=3, edges=[[0, 1], [1, 2]])
    with_graph = _attention_request(q, q, upload="json", graph=graph, **common).json_body
    assert with_graph is not None
    assert with_graph["graph"] == {"num_nodes": 3, "edges": [[0, 1], [1, 2]], "directed": False}

    coords = grid_positions((3, 4), 1).tolist()  # (13, 2) as lists of lists
    inline = _attention_request(q, q, upload="json", positions=coords, **common).json_body
    assert inline is not None
    assert inline["positions"]["shape"] == [13, 2]
    assert inline["positions"]["dtype"] == "int64"
    body = _attention_request(q, q, upload="safetensors", positions=np.array(coords, np.int32), **common).content
    assert body is not None
    tensors, metadata = read_safetensors(b"".join(body))
    assert (tensors["positions"].dtype, tensors["positions"].shape) == ("int32", (13, 2))
    assert "positions" not in json.loads(metadata["request"])


@pytest.mark.parametrize("method", ["rope_2d_axial", "alibi_2d"])
def test_async_attention_on_a_grid(compute_gateway: Any, method: str) -> None:
    """The AsyncClient on its own (the ``call`` tests run both), several requests in flight at once."""
    import asyncio

    from posenc_client import AsyncClient

    q, k = _randn(1, 2, 13, 8, seed=10), _randn(1, 2, 13, 8, seed=11)
    coords = grid_positions((3, 4), 1)

    async def main() -> list[Any]:
        async with AsyncClient(base_url=compute_gateway.url) as client:
            return list(
                await asyncio.gather(
                    client.attention.compute(q, k, method=method, grid=[3, 4], prefix_tokens=1),
                    client.attention.compute(q, k, method=method, positions=coords, upload="safetensors"),
                )
            )

    by_grid, explicit = asyncio.run(main())
    spec = get_method(method)
    expected = attention_maps(q, k, spec=spec, params=spec.parse_params({}), causal=False, positions=coords)
    torch.testing.assert_close(by_grid.weights, expected.weights, rtol=0, atol=0)
    torch.testing.assert_close(explicit.weights, expected.weights, rtol=0, atol=0)


# --------------------------------------------------------------------------------------------------- bias
def test_bias_over_a_grid_is_not_causal_by_default(call: Call) -> None:
    result = call(lambda c: c.bias.compute("alibi_2d", num_heads=2, grid=[3, 3], prefix_tokens=1, dtype="float64"))
    bias = result.bias
    assert bias.shape == (2, 1 + 9, 1 + 9)
    assert result.meta["causal"] is False
    assert torch.isfinite(bias).all()
    assert torch.equal(bias[:, 0, :], torch.zeros(2, 10, dtype=torch.float64))  # the CLS token: no bias
    # patch 0 at (0, 0) and patch 8 at (2, 2): distance 2·sqrt(2), slope of head 0 is 2^-4 for H = 2
    assert bias[0, 1, 9].item() == pytest.approx(-(2**-4) * 2 * math.sqrt(2), rel=1e-12)
    torch.testing.assert_close(bias, bias.transpose(1, 2))  # |distance|: symmetric

    causal = call(lambda c: c.bias.compute("alibi_2d", num_heads=2, grid=[3, 3], prefix_tokens=1, causal=True))
    assert causal.meta["causal"] is True
    assert torch.isinf(causal.bias[:, 0, 1:]).all()  # masked in token order


def test_bias_over_a_graph_and_save(compute_gateway: Any, tmp_path: Path) -> None:
    with Client(base_url=compute_gateway.url) as client:
        bias = client.bias.compute("graphormer", num_heads=2, graph=PATH).bias
        path = client.bias.save("alibi_2d", tmp_path / "grid.npy", num_heads=4, grid=[2, 3])
    assert bias.shape == (2, 4, 4)
    assert torch.equal(bias[:, 0, 1], bias[:, 2, 3])  # both one hop apart on the path
    assert np.load(path).shape == (4, 6, 6)


def test_bias_needs_exactly_one_layout() -> None:
    with Client(base_url="http://127.0.0.1:9") as client:
        with pytest.raises(ValueError, match="exactly one"):
            client.bias.compute("alibi_2d", num_heads=2)
        with pytest.raises(ValueError, match="exactly one"):
            client.bias.compute("alibi_2d", num_heads=2, query_length=4, grid=[2, 2])


def test_cli_bias_over_a_grid(compute_gateway: Any, tmp_path: Path) -> None:
    target = tmp_path / "grid.npy"
    args = ["bias", "alibi_2d", "--heads", "2", "--grid", "3", "3", "--prefix-tokens", "1", "-o", str(target)]
    done = subprocess.run(
        [CLI, "--base-url", compute_gateway.url, "--max-retries", "0", *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    saved = np.load(target)
    assert saved.shape == (2, 10, 10)
    assert np.isfinite(saved).all()  # a grid is not causal


# ------------------------------------------------------------------------------------------------- rotary
@pytest.mark.parametrize("upload", ["json", "safetensors"])
def test_rotary_with_two_axis_positions(call: Call, upload: str) -> None:
    q = _randn(1, 2, 13, 16, seed=12)
    coords = grid_positions((3, 4), 1)  # (13, 2)
    by_grid = call(lambda c: c.rotary.apply(q, method="rope_2d_axial", rotate="query", grid=(3, 4), prefix_tokens=1))
    as_lists = call(
        lambda c: c.rotary.apply(q, method="rope_2d_axial", rotate="query", positions=coords.tolist(), upload=upload)
    )
    as_tensor = call(
        lambda c: c.rotary.apply(q, method="rope_2d_axial", rotate="query", positions=coords, upload=upload)
    )
    torch.testing.assert_close(by_grid.q[:, :, 0], q[:, :, 0], rtol=0, atol=0)  # the CLS token: unrotated
    assert not torch.allclose(by_grid.q[:, :, 1:], q[:, :, 1:])
    torch.testing.assert_close(as_lists.q, by_grid.q, rtol=0, atol=1e-6)
    torch.testing.assert_close(as_tensor.q, by_grid.q, rtol=0, atol=1e-6)
    assert by_grid.meta["positions"].startswith("grid [3, 4] with 1 prefix")
    assert as_tensor.meta["positions"] == "given"


def test_rotary_positions_on_the_wire() -> None:
    common: dict[str, Any] = {
        "method": "rope_2d_axial",
        "params": None,
        "offset": 0,
        "pairing": "half",
        "rotate": "query",
        "rotary_dim": None,
        "return_tables": False,
        "dtype": None,
        "accept": None,
    }
    q = [[[[0.5] * 4] * 3]]  # (1, 1, 3, 4)
    coords = [[0, 0], [0, 1], [1, 0]]
    inline = _rotary_request(q, None, positions=coords, upload="json", **common).json_body
    assert inline is not None
    assert (inline["positions"]["dtype"], inline["positions"]["shape"]) == ("int64", [3, 2])
    body = _rotary_request(q, None, positions=torch.tensor(coords), upload="safetensors", **common).content
    assert body is not None
    tensors, _ = read_safetensors(b"".join(body))
    assert (tensors["positions"].dtype, tensors["positions"].shape) == ("int64", (3, 2))


# ---------------------------------------------------------------------------------------------- encodings
def test_laplacian_pe_of_a_path_graph(call: Call) -> None:
    result = call(lambda c: c.encodings.compute("laplacian_pe", graph=PATH, dim=2))
    assert result.encoding.shape == (4, 2)
    assert result.prefix is None
    spec = get_method("laplacian_pe")
    graph = Graph(num_nodes=4, edges=torch.tensor(PATH_EDGES))
    expected = encoding(spec, spec.parse_params({}), AbsoluteContext(grid=(4,), dim=2, graph=graph))
    torch.testing.assert_close(result.encoding, expected, rtol=0, atol=0)
    as_model = call(lambda c: c.encodings.compute("laplacian_pe", graph=GraphIn(**PATH), dim=2))
    torch.testing.assert_close(as_model.encoding, result.encoding, rtol=0, atol=0)


def test_vit_learned_returns_the_prefix_rows(call: Call) -> None:
    table = np.random.default_rng(0).normal(size=(1 + 2 * 3, 4)).astype(np.float32)  # (P + Hs·Ws, dim)
    params = {"table": table, "source_grid": [2, 3], "prefix_tokens": 1}
    result = call(lambda c: c.encodings.compute("vit_learned", grid=[2, 3], dim=4, prefix_tokens=1, params=params))
    assert result.media_type == "application/vnd.safetensors"  # two tensors: not octet-stream
    assert result.prefix.shape == (1, 4)
    assert result.encoding.shape == (2, 3, 4)
    np.testing.assert_array_equal(result.prefix.numpy(), table[:1])  # the CLS row, unchanged
    np.testing.assert_array_equal(result.encoding.numpy(), table[1:].reshape(2, 3, 4))  # same grid: no resize
    without = call(lambda c: c.encodings.compute("vit_learned", grid=[2, 3], dim=4, params=params))
    assert without.prefix is None
    assert without.media_type == "application/octet-stream"


def test_encodings_need_exactly_one_layout() -> None:
    with Client(base_url="http://127.0.0.1:9") as client, pytest.raises(ValueError, match="exactly one"):
        client.encodings.compute("laplacian_pe", dim=2, length=4, graph=PATH)
