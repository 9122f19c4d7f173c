"""What every compute response says about itself: method, kind, resolved params, conventions, dtype,
and for learned methods whether their parameters were supplied or seeded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from posenc.pe import get_method, list_methods


def test_bias_meta_resolves_defaults(client: TestClient) -> None:
    request = {"method": "alibi", "num_heads": 2, "query_length": 3, "params": {"max_bias": 4.0}}
    meta = client.post("/v1/bias", json=request).json()["meta"]
    assert meta["method"] == "alibi"
    assert meta["kind"] == "bias"
    assert meta["params"] == {"max_bias": 4.0, "train_length": None, "eval_length": None}
    assert meta["conventions"] == get_method("alibi").conventions
    assert meta["dtype"] == "float32"
    assert "parameters" not in meta  # alibi learns nothing


def test_octet_stream_meta_header_is_the_same_object(client: TestClient) -> None:
    request = {"method": "alibi", "num_heads": 2, "query_length": 3}
    as_json = client.post("/v1/bias", json=request).json()["meta"]
    header = client.post("/v1/bias", json=request, headers={"Accept": "application/octet-stream"}).headers
    assert json.loads(header["x-posenc-meta"]) == as_json


LEARNED = [spec for spec in list_methods() if spec.learned]


# four tokens, laid out the way each method's positions are: a sequence, a 2 x 2 grid, a 4-node path
LAYOUTS: dict[int, dict[str, Any]] = {
    1: {"query_length": 4},
    2: {"grid": [2, 2]},
    0: {"graph": {"num_nodes": 4, "edges": [[0, 1], [1, 2], [2, 3]]}},
}


@pytest.mark.parametrize("spec", LEARNED, ids=lambda spec: spec.name)
def test_learned_methods_say_they_were_seeded(client: TestClient, spec: Any, example_params: Any) -> None:
    layout = LAYOUTS[spec.axes]
    params = example_params(spec.name)
    if spec.kind.value == "bias":
        response = client.post("/v1/bias", json={"method": spec.name, "num_heads": 2, "params": params} | layout)
    elif spec.kind.value == "absolute":
        size = {"length": 4} if spec.axes == 1 else layout
        response = client.post("/v1/encodings", json={"method": spec.name, "dim": 8, "params": params} | size)
    else:
        tensor = {"random": {"shape": [1, 2, 4, 8]}}
        request = {"method": spec.name, "q": tensor, "k": tensor, "x": {"random": {"shape": [1, 4, 16]}}}
        placed = {} if spec.axes == 1 else layout
        response = client.post("/v1/attention", json=request | {"params": params} | placed)
    assert response.status_code == 200, response.text
    meta = response.json()["meta"]
    assert meta["parameters"] == "seeded"
    assert meta["seed"] == (0 if "seed" in spec.params_model.model_fields else None)


def test_learned_parameters_supplied_are_summarised_not_echoed(client: TestClient, wire: Any, inline: Any) -> None:
    import torch

    table = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    params = {"max_positions": 6, "table": inline(table)}
    response = client.post(
        "/v1/encodings", json={"method": "learned_absolute", "length": 5, "dim": 4, "params": params}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["meta"]["parameters"] == "supplied"
    assert body["meta"]["params"]["table"] == {"dtype": "float32", "shape": [6, 4]}
    torch.testing.assert_close(wire.json_tensor(body["tensors"]["encoding"]), table[:5])
