"""POST /v1/bias through the real app, compared with posenc.pe in process, for every bias method."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from starlette.testclient import TestClient

from posenc.pe import (
    BiasContext,
    MethodSpec,
    bias_dense,
    bias_toeplitz,
    get_method,
    list_methods,
    toeplitz_to_dense,
)
from posenc.schemas.methods import Kind

# methods of token positions (alibi_2d reads them as a row-major grid's indices); grid and graph methods are
# tested in test_grids_and_graphs.py
BIAS_METHODS = [spec for spec in list_methods(Kind.BIAS) if spec.axes == 1 or spec.name == "alibi_2d"]
TOEPLITZ_METHODS = [spec for spec in BIAS_METHODS if spec.toeplitz]


def expected_dense(
    spec: MethodSpec, heads: int, q_len: int, k_len: int, causal: bool, query_offset: int
) -> torch.Tensor:
    ctx = BiasContext(num_heads=heads, query_length=q_len, key_length=k_len, causal=causal, query_offset=query_offset)
    return bias_dense(spec, spec.parse_params({}), ctx)


@pytest.mark.parametrize("query_offset", [None, 0, 2])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("spec", BIAS_METHODS, ids=lambda spec: spec.name)
def test_dense_json_matches_the_library(
    client: TestClient, wire: Any, spec: MethodSpec, causal: bool, query_offset: int | None
) -> None:
    request = {"method": spec.name, "num_heads": 3, "query_length": 4, "key_length": 9, "causal": causal}
    if query_offset is not None:
        request["query_offset"] = query_offset
    response = client.post("/v1/bias", json=request)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    got = wire.json_tensor(body["tensors"]["bias"])
    assert got.shape == (3, 4, 9)
    offset = 9 - 4 if query_offset is None else query_offset  # default: the queries are the last 4 keys
    torch.testing.assert_close(got, expected_dense(spec, 3, 4, 9, causal, offset), rtol=0, atol=0)
    assert body["meta"]["method"] == spec.name
    assert body["meta"]["kind"] == "bias"
    assert body["meta"]["query_offset"] == offset


@pytest.mark.parametrize("spec", BIAS_METHODS, ids=lambda spec: spec.name)
def test_a_decode_step_sees_every_cached_key_by_default(client: TestClient, wire: Any, spec: MethodSpec) -> None:
    """Nq = 1 against Nk = 9 cached keys (a 3 x 3 grid for alibi_2d), causal: bottom-right alignment puts the
    query at position 8, so no key is masked, and its row is the last row of the full 9 x 9 bias.
    query_offset=0 puts it at position 0."""
    decode = {"method": spec.name, "num_heads": 2, "query_length": 1, "key_length": 9, "causal": True}
    row = wire.json_tensor(client.post("/v1/bias", json=decode).json()["tensors"]["bias"])
    assert row.shape == (2, 1, 9)
    assert bool(torch.isfinite(row).all()), "a decode step must attend to all nine cached keys"
    full = {"method": spec.name, "num_heads": 2, "query_length": 9, "causal": True}
    square = wire.json_tensor(client.post("/v1/bias", json=full).json()["tensors"]["bias"])
    torch.testing.assert_close(row[:, 0], square[:, 8], rtol=0, atol=0)

    top_left = wire.json_tensor(client.post("/v1/bias", json={**decode, "query_offset": 0}).json()["tensors"]["bias"])
    assert int(torch.isfinite(top_left).sum(-1).max()) == 1, "at position 0 the query sees only key 0"


@pytest.mark.parametrize("spec", TOEPLITZ_METHODS, ids=lambda spec: spec.name)
def test_toeplitz_table_expands_to_the_dense_bias(client: TestClient, wire: Any, spec: MethodSpec) -> None:
    request = {"method": spec.name, "num_heads": 2, "query_length": 4, "key_length": 9, "form": "toeplitz"}
    response = client.post("/v1/bias", json=request, headers={"Accept": "application/octet-stream"})
    assert response.status_code == 200, response.text
    table = wire.octet_stream(response)
    assert table.shape == (2, 4 + 9 - 1)
    ctx = BiasContext(num_heads=2, query_length=4, key_length=9, causal=True, query_offset=5)
    torch.testing.assert_close(table, bias_toeplitz(spec, spec.parse_params({}), ctx), rtol=0, atol=0)
    dense = expected_dense(spec, 2, 4, 9, True, query_offset=5)
    torch.testing.assert_close(toeplitz_to_dense(table, 4, 9), dense, rtol=0, atol=0)
    meta = response.headers["x-posenc-meta"]
    assert "i - j + key_length - 1" in meta


def test_toeplitz_form_of_a_non_toeplitz_method_names_form(client: TestClient, wire: Any) -> None:
    non_toeplitz = [spec for spec in BIAS_METHODS if not spec.toeplitz]
    assert non_toeplitz, "FIRE depends on i as well as i - j, so at least it has no Toeplitz form"
    for spec in non_toeplitz:
        request = {"method": spec.name, "num_heads": 2, "query_length": 4, "form": "toeplitz"}
        problem = wire.problem(client.post("/v1/bias", json=request), 422)
        assert wire.locs(problem) == [["body", "form"]]


def test_alibi_values_by_hand(client: TestClient, wire: Any) -> None:
    """Two heads: slopes 2^-4 and 2^-8; B[h, i, j] = -m_h (i - j) below the diagonal, -inf above."""
    body = client.post("/v1/bias", json={"method": "alibi", "num_heads": 2, "query_length": 3}).json()
    got = wire.json_tensor(body["tensors"]["bias"])
    inf = float("inf")
    expected = torch.tensor(
        [
            [[0.0, -inf, -inf], [-1 / 16, 0.0, -inf], [-2 / 16, -1 / 16, 0.0]],
            [[0.0, -inf, -inf], [-1 / 256, 0.0, -inf], [-2 / 256, -1 / 256, 0.0]],
        ]
    )
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["float64", "bfloat16", "float16"])
def test_dtype_is_cast_last(client: TestClient, wire: Any, dtype: str) -> None:
    request = {"method": "alibi", "num_heads": 4, "query_length": 9, "dtype": dtype}
    response = client.post("/v1/bias", json=request, headers={"Accept": "application/octet-stream"})
    got = wire.octet_stream(response)
    assert response.headers["x-tensor-dtype"] == dtype
    spec = get_method("alibi")
    ctx = BiasContext(num_heads=4, query_length=9, key_length=9, causal=True, dtype=torch.float64)
    reference = bias_dense(spec, spec.parse_params({}), ctx)
    torch.testing.assert_close(got, reference.to(got.dtype), rtol=0, atol=0)
