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

BIAS_METHODS = list_methods(Kind.BIAS)
TOEPLITZ_METHODS = [spec for spec in BIAS_METHODS if spec.toeplitz]


def expected_dense(spec: MethodSpec, heads: int, q_len: int, k_len: int, causal: bool) -> torch.Tensor:
    ctx = BiasContext(num_heads=heads, query_length=q_len, key_length=k_len, causal=causal)
    return bias_dense(spec, spec.parse_params({}), ctx)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("spec", BIAS_METHODS, ids=lambda spec: spec.name)
def test_dense_json_matches_the_library(client: TestClient, wire: Any, spec: MethodSpec, causal: bool) -> None:
    request = {"method": spec.name, "num_heads": 3, "query_length": 4, "key_length": 9, "causal": causal}
    response = client.post("/v1/bias", json=request)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    got = wire.json_tensor(body["tensors"]["bias"])
    assert got.shape == (3, 4, 9)
    torch.testing.assert_close(got, expected_dense(spec, 3, 4, 9, causal), rtol=0, atol=0)
    assert body["meta"]["method"] == spec.name
    assert body["meta"]["kind"] == "bias"


@pytest.mark.parametrize("spec", TOEPLITZ_METHODS, ids=lambda spec: spec.name)
def test_toeplitz_table_expands_to_the_dense_bias(client: TestClient, wire: Any, spec: MethodSpec) -> None:
    request = {"method": spec.name, "num_heads": 2, "query_length": 4, "key_length": 9, "form": "toeplitz"}
    response = client.post("/v1/bias", json=request, headers={"Accept": "application/octet-stream"})
    assert response.status_code == 200, response.text
    table = wire.octet_stream(response)
    assert table.shape == (2, 4 + 9 - 1)
    ctx = BiasContext(num_heads=2, query_length=4, key_length=9, causal=True)
    torch.testing.assert_close(table, bias_toeplitz(spec, spec.parse_params({}), ctx), rtol=0, atol=0)
    torch.testing.assert_close(toeplitz_to_dense(table, 4, 9), expected_dense(spec, 2, 4, 9, True), rtol=0, atol=0)
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
