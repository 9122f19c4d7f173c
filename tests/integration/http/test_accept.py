"""Every response media type, decoded back the way a client would and compared with the library."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from starlette.testclient import TestClient

from posenc.pe import BiasContext, bias_dense, get_method

ALIBI = {"method": "alibi", "num_heads": 4, "query_length": 6, "key_length": 6, "causal": True}
ROTARY = {
    "method": "rope",
    "q": {"random": {"shape": [1, 2, 5, 8], "seed": 1}},
    "k": {"random": {"shape": [1, 2, 5, 8], "seed": 2}},
    "return_tables": True,
}


def alibi_reference() -> torch.Tensor:
    spec = get_method("alibi")
    return bias_dense(spec, spec.parse_params({}), BiasContext(num_heads=4, query_length=6, key_length=6, causal=True))


@pytest.mark.parametrize("accept", [None, "*/*", "application/json", "application/*", "text/html;q=0.5, */*;q=0.1"])
def test_json_is_the_default(client: TestClient, wire: Any, accept: str | None) -> None:
    headers = {"Accept": accept} if accept is not None else {}
    response = client.post("/v1/bias", json=ALIBI, headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["vary"] == "Accept"
    torch.testing.assert_close(wire.json_tensor(response.json()["tensors"]["bias"]), alibi_reference())


def test_octet_stream_is_raw_little_endian_bytes(client: TestClient, wire: Any) -> None:
    response = client.post("/v1/bias", json=ALIBI, headers={"Accept": "application/octet-stream"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["vary"] == "Accept"
    assert response.headers["x-tensor-dtype"] == "float32"
    assert response.headers["x-tensor-shape"] == "4,6,6"
    assert response.headers["x-posenc-tensors"] == "bias"
    assert len(response.content) == 4 * 6 * 6 * 4
    expected = alibi_reference().numpy().astype("<f4").tobytes()
    assert response.content == expected
    torch.testing.assert_close(wire.octet_stream(response), alibi_reference(), rtol=0, atol=0)


def test_npy_loads_with_numpy(client: TestClient, wire: Any) -> None:
    response = client.post("/v1/bias", json=ALIBI, headers={"Accept": "application/x-npy"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-npy"
    assert response.headers["vary"] == "Accept"
    array = wire.npy(response)
    assert array.dtype == np.float32
    np.testing.assert_array_equal(array, alibi_reference().numpy())


def test_safetensors_carries_every_tensor_and_the_meta(client: TestClient, wire: Any) -> None:
    response = client.post("/v1/rotary", json=ROTARY, headers={"Accept": "application/vnd.safetensors"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/vnd.safetensors"
    assert response.headers["vary"] == "Accept"
    tensors, metadata = wire.safetensors(response)
    assert set(tensors) == {"q", "k", "cos", "sin"}
    assert tensors["q"].shape == (1, 2, 5, 8)
    assert tensors["cos"].shape == (5, 4)
    assert metadata["method"] == "rope"
    assert metadata["kind"] == "rotary"
    assert metadata["params"] == {"base": 10000.0}
    # the same tensors as the JSON answer
    as_json = client.post("/v1/rotary", json=ROTARY).json()["tensors"]
    for name, tensor in tensors.items():
        torch.testing.assert_close(tensor, wire.json_tensor(as_json[name]), rtol=0, atol=0)


def test_tensor_query_picks_one_tensor(client: TestClient, wire: Any) -> None:
    all_of_them, _ = wire.safetensors(
        client.post("/v1/rotary", json=ROTARY, headers={"Accept": "application/vnd.safetensors"})
    )
    for name in ("q", "k", "cos", "sin"):
        for accept in ("application/octet-stream", "application/x-npy"):
            response = client.post("/v1/rotary", json=ROTARY, params={"tensor": name}, headers={"Accept": accept})
            assert response.status_code == 200
            assert response.headers["x-posenc-tensors"] == "q,k,cos,sin"
            got = (
                wire.octet_stream(response) if accept.endswith("octet-stream") else torch.from_numpy(wire.npy(response))
            )
            torch.testing.assert_close(got, all_of_them[name], rtol=0, atol=0)
    default = client.post("/v1/rotary", json=ROTARY, headers={"Accept": "application/octet-stream"})
    torch.testing.assert_close(wire.octet_stream(default), all_of_them["q"], rtol=0, atol=0)


def test_unknown_tensor_name_is_422(client: TestClient, wire: Any) -> None:
    response = client.post(
        "/v1/rotary", json=ROTARY, params={"tensor": "v"}, headers={"Accept": "application/octet-stream"}
    )
    assert wire.locs(wire.problem(response, 422)) == [["query", "tensor"]]


def test_bfloat16_octet_stream_round_trips(client: TestClient, wire: Any) -> None:
    response = client.post(
        "/v1/bias", json=ALIBI | {"dtype": "bfloat16"}, headers={"Accept": "application/octet-stream"}
    )
    assert response.headers["x-tensor-dtype"] == "bfloat16"
    assert len(response.content) == 4 * 6 * 6 * 2
    torch.testing.assert_close(wire.octet_stream(response), alibi_reference().to(torch.bfloat16), rtol=0, atol=0)


def test_bfloat16_as_npy_is_406_and_says_why(client: TestClient, wire: Any) -> None:
    response = client.post("/v1/bias", json=ALIBI | {"dtype": "bfloat16"}, headers={"Accept": "application/x-npy"})
    problem = wire.problem(response, 406)
    assert "bfloat16" in problem["detail"]
    assert "numpy" in problem["detail"]


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "image/png, text/csv", "application/json;q=0"])
def test_anything_else_is_406(client: TestClient, wire: Any, accept: str) -> None:
    problem = wire.problem(client.post("/v1/bias", json=ALIBI, headers={"Accept": accept}), 406)
    assert "application/octet-stream" in problem["detail"]


def test_quality_values_choose_the_type(client: TestClient) -> None:
    accept = "application/json;q=0.2, application/x-npy;q=0.9, application/octet-stream;q=0.5"
    response = client.post("/v1/bias", json=ALIBI, headers={"Accept": accept})
    assert response.headers["content-type"] == "application/x-npy"


def test_json_spells_non_finite_values_as_strings(client: TestClient, wire: Any) -> None:
    text = client.post("/v1/bias", json=ALIBI).text
    assert '"-inf"' in text
    assert "Infinity" not in text
    assert "null" not in text.split('"meta"')[0]  # no silent nulls among the tensor values
    body = client.post("/v1/bias", json=ALIBI).json()
    round_tripped = wire.json_tensor(body["tensors"]["bias"])
    assert torch.isneginf(round_tripped).sum() == 4 * 15  # 15 future keys per head in a 6x6 causal bias
    torch.testing.assert_close(round_tripped, alibi_reference(), rtol=0, atol=0)


def test_a_safetensors_answer_is_sent_from_the_tensors_own_memory() -> None:
    """The answer's pieces are the header, then views of each tensor (no joined copy); joined, they are a file
    the safetensors library reads back to the same tensors and dtypes, with the metadata in its header."""
    import json

    import safetensors.torch

    from service.transport import safetensors_pieces

    tensors = {
        "q": torch.randn(2, 3, 5),
        "half": torch.randn(4, 3).to(torch.bfloat16),
        "mask": torch.rand(3, 3) > 0.5,
        "ids": torch.arange(7),
    }
    pieces = safetensors_pieces(tensors, {"method": '"rope"'})
    for piece, tensor in zip(pieces[1:], tensors.values(), strict=True):
        assert isinstance(piece, memoryview)
        assert np.shares_memory(np.asarray(piece), tensor.view(torch.uint8).numpy())
    assert len(pieces[0]) % 8 == 0
    body = b"".join(pieces)
    loaded = safetensors.torch.load(body)
    assert set(loaded) == set(tensors)
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype
        assert torch.equal(loaded[name], tensor)
    header_length = int.from_bytes(body[:8], "little")
    assert json.loads(body[8 : 8 + header_length])["__metadata__"] == {"method": '"rope"'}
