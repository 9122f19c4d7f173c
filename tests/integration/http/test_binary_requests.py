"""Safetensors request bodies: ``__metadata__["request"]`` holds the JSON, tensors stand in for fields."""

from __future__ import annotations

import json
from typing import Any

import safetensors.torch
import torch
from starlette.testclient import TestClient

BINARY = {"Content-Type": "application/vnd.safetensors", "Accept": "application/vnd.safetensors"}


def body(tensors: dict[str, torch.Tensor], request: dict[str, Any]) -> bytes:
    return safetensors.torch.save(tensors, metadata={"request": json.dumps(request)})


def test_rotary_from_a_safetensors_body_equals_the_json_request(client: TestClient, wire: Any, inline: Any) -> None:
    q = torch.randn(1, 2, 6, 8, generator=torch.Generator().manual_seed(0))
    k = torch.randn(1, 2, 6, 8, generator=torch.Generator().manual_seed(1))
    positions = torch.tensor([3, 1, 4, 1, 5, 9])
    request = {"method": "rope_ntk", "params": {"factor": 2.0}, "pairing": "interleaved"}
    binary = client.post("/v1/rotary", content=body({"q": q, "k": k, "positions": positions}, request), headers=BINARY)
    assert binary.status_code == 200, binary.text
    as_json = client.post(
        "/v1/rotary",
        json=request | {"q": inline(q), "k": inline(k), "positions": positions.tolist()},
        headers={"Accept": "application/vnd.safetensors"},
    )
    got, meta = wire.safetensors(binary)
    expected, _ = wire.safetensors(as_json)
    assert set(got) == {"q", "k"}
    for name in got:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)
    assert meta["positions"] == "given"


def test_attention_from_a_safetensors_body(client: TestClient, wire: Any, inline: Any) -> None:
    q = torch.randn(2, 1, 4, 8, generator=torch.Generator().manual_seed(2))
    mask = torch.tensor([[False, False, True, True], [False, False, False, False]])
    request = {"method": "alibi", "causal": False}
    binary = client.post(
        "/v1/attention",
        content=body({"q": q, "k": q.clone(), "key_padding_mask": mask}, request),
        headers=BINARY,
    )
    assert binary.status_code == 200, binary.text
    as_json = client.post(
        "/v1/attention",
        json=request | {"q": inline(q), "k": inline(q), "key_padding_mask": mask.tolist()},
        headers={"Accept": "application/vnd.safetensors"},
    )
    got, _ = wire.safetensors(binary)
    torch.testing.assert_close(got["weights"], wire.safetensors(as_json)[0]["weights"], rtol=0, atol=0)
    assert bool((got["weights"][0, :, :, 2:] == 0).all())


def test_mixed_json_and_binary_fields(client: TestClient, wire: Any) -> None:
    """q in the file, k generated on the server from the request JSON."""
    q = torch.randn(1, 1, 3, 4, generator=torch.Generator().manual_seed(3))
    request = {"method": "rope", "k": {"random": {"shape": [1, 1, 3, 4], "seed": 7}}}
    response = client.post("/v1/rotary", content=body({"q": q}, request), headers=BINARY)
    assert response.status_code == 200, response.text
    assert set(wire.safetensors(response)[0]) == {"q", "k"}


def test_unexpected_tensor_is_422(client: TestClient, wire: Any) -> None:
    q = torch.zeros(1, 1, 2, 4)
    response = client.post("/v1/rotary", content=body({"q": q, "v": q.clone()}, {"method": "rope"}), headers=BINARY)
    assert wire.locs(wire.problem(response, 422)) == [["body", "v"]]


def test_field_given_twice_is_422(client: TestClient, wire: Any) -> None:
    q = torch.zeros(1, 1, 2, 4)
    request = {"method": "rope", "rotate": "query", "q": {"random": {"shape": [1, 1, 2, 4]}}}
    response = client.post("/v1/rotary", content=body({"q": q}, request), headers=BINARY)
    assert wire.locs(wire.problem(response, 422)) == [["body", "q"]]


def test_validation_errors_point_into_the_request(client: TestClient, wire: Any) -> None:
    q = torch.zeros(1, 1, 2, 4)
    response = client.post(
        "/v1/rotary", content=body({"q": q}, {"method": "rope", "pairing": "zigzag"}), headers=BINARY
    )
    assert ["body", "pairing"] in wire.locs(wire.problem(response, 422))


def test_nan_in_a_binary_tensor_is_422(client: TestClient, wire: Any) -> None:
    q = torch.zeros(1, 1, 2, 4)
    q[0, 0, 1, 2] = float("nan")
    response = client.post("/v1/rotary", content=body({"q": q}, {"method": "rope", "rotate": "query"}), headers=BINARY)
    assert wire.locs(wire.problem(response, 422)) == [["body", "q", "data"]]


def test_declared_shapes_are_budgeted_before_decoding(make_client: Any, wire: Any) -> None:
    """A header that declares a huge q is refused from the header alone (the data is not even there)."""
    client = make_client(max_input_elements=10_000)
    header = {
        "__metadata__": {"request": json.dumps({"method": "rope", "rotate": "query"})},
        "q": {"dtype": "F32", "shape": [1, 8, 4096, 64], "data_offsets": [0, 8 * 4096 * 64 * 4]},
    }
    encoded = json.dumps(header).encode()
    payload = len(encoded).to_bytes(8, "little") + encoded
    problem = wire.problem(client.post("/v1/rotary", content=payload, headers=BINARY), 413)
    assert problem["size"] == 8 * 4096 * 64


def test_garbage_is_422(client: TestClient, wire: Any) -> None:
    response = client.post("/v1/attention", content=b"\x05\x00\x00", headers=BINARY)
    assert wire.locs(wire.problem(response, 422)) == [["body"]]


def test_a_learned_table_in_a_safetensors_body_equals_it_inline(client: TestClient, wire: Any, inline: Any) -> None:
    """params.<name> tensors stand in for the method's tensor parameters (here T5's bucket table)."""
    generator = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 5, 8, generator=generator)
    v = torch.randn(1, 2, 5, 4, generator=generator)
    table = torch.randn(32, 2, generator=generator)  # (num_buckets, H)
    request = {"method": "t5", "causal": True}
    binary = client.post(
        "/v1/attention",
        content=body({"q": q, "k": q.clone(), "v": v, "params.table": table}, request),
        headers=BINARY,
    )
    assert binary.status_code == 200, binary.text
    as_json = client.post(
        "/v1/attention",
        json=request | {"q": inline(q), "k": inline(q), "v": inline(v), "params": {"table": inline(table)}},
        headers={"Accept": "application/vnd.safetensors"},
    )
    assert as_json.status_code == 200, as_json.text
    got, meta = wire.safetensors(binary)
    expected, _ = wire.safetensors(as_json)
    assert set(got) >= {"weights", "output"}
    for name in ("weights", "output"):
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)
    assert meta["parameters"] == "supplied"
    seeded, _ = wire.safetensors(
        client.post("/v1/attention", content=body({"q": q, "k": q.clone()}, request), headers=BINARY)
    )
    assert not torch.equal(seeded["weights"], got["weights"])  # the table was used, not the seeded one


def test_an_unknown_tensor_name_names_the_params_prefix(client: TestClient, wire: Any) -> None:
    q = torch.zeros(1, 1, 2, 4)
    response = client.post(
        "/v1/attention",
        content=body({"q": q, "k": q.clone(), "bogus": q.clone()}, {"method": "alibi"}),
        headers=BINARY,
    )
    problem = wire.problem(response, 422)
    assert "<group>.<name>" in json.dumps(problem)
