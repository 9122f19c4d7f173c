"""JSON request bodies: a cap of their own (413 pointing to safetensors), exact values under it, and numbers
that JSON parsers accept but no field may hold (NaN, Infinity, 1e400, integers past int64) refused as 422s
that name the field. Bodies are sent as raw text: Python's json module would not write these tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import safetensors.torch
import torch
from starlette.testclient import TestClient

JSON = {"Content-Type": "application/json"}
Q = {"random": {"shape": [1, 2, 4, 8]}}
NON_FINITE_TOKENS = ["1e400", "-1e400", "Infinity", "-Infinity", "NaN"]


def raw(template: str, token: str) -> str:
    """A JSON body with ``token`` written in place of TOKEN, exactly as a client would send it."""
    return template.replace("TOKEN", token)


# ------------------------------------------------------------------------------------- NaN and infinity
@pytest.mark.parametrize("token", NON_FINITE_TOKENS)
@pytest.mark.parametrize(
    ("path", "template", "loc"),
    [
        # /v1/attention and /v1/rotary parse their own bodies; /v1/bias and /v1/jobs are parsed by FastAPI
        ("/v1/attention", '{"method": "rope", "q": Q, "k": Q, "scale": TOKEN}', ["body", "scale"]),
        ("/v1/rotary", '{"method": "rope", "q": Q, "rotate": "query", "params": {"base": TOKEN}}', None),
        ("/v1/bias", '{"method": "alibi", "num_heads": 2, "query_length": 4, "params": {"max_bias": TOKEN}}', None),
        (
            "/v1/jobs",
            '{"kind": "train", "spec": {"methods": [{"method": "rope"}], "train": {"weight_decay": TOKEN}}}',
            ["body", "spec", "train", "weight_decay"],
        ),
    ],
)
def test_non_finite_numbers_are_422_naming_the_field(
    client: TestClient, wire: Any, path: str, template: str, loc: list[str] | None, token: str
) -> None:
    body = raw(template.replace("Q", json.dumps(Q)), token)
    problem = wire.problem(client.post(path, content=body, headers=JSON), 422)
    expected = loc or ["body", "params", "base" if path == "/v1/rotary" else "max_bias"]
    assert wire.locs(problem) == [expected]
    assert "finite" in problem["errors"][0]["msg"]


def test_the_same_parameters_finite_are_served(client: TestClient) -> None:
    """The 422s above are about the value: the same bodies with a finite number answer 200."""
    q = json.dumps(Q)
    attention = f'{{"method": "rope", "q": {q}, "k": {q}, "scale": 0.5}}'
    assert client.post("/v1/attention", content=attention, headers=JSON).is_success
    bias = '{"method": "alibi", "num_heads": 2, "query_length": 4, "params": {"max_bias": 8.0}}'
    assert client.post("/v1/bias", content=bias, headers=JSON).is_success


@pytest.mark.parametrize("token", NON_FINITE_TOKENS)
def test_a_non_finite_number_in_tensor_data_must_be_spelled(client: TestClient, wire: Any, token: str) -> None:
    """In ``data`` a non-finite value is the string "nan", "inf" or "-inf"; as a number it is refused as such,
    before the route's own rule (no non-finite inputs to rotary) is even reached."""
    body = raw('{"method": "rope", "rotate": "query", "q": {"shape": [1, 1, 1, 2], "data": [1.0, TOKEN]}}', token)
    problem = wire.problem(client.post("/v1/rotary", content=body, headers=JSON), 422)
    assert ["body", "q", "data"] in wire.locs(problem)
    assert "value 1" in problem["detail"]
    assert "'nan', 'inf', '-inf'" in problem["detail"]

    spelled = {"method": "rope", "rotate": "query", "q": {"shape": [1, 1, 1, 2], "data": [1.0, "inf"]}}
    problem = wire.problem(client.post("/v1/rotary", json=spelled), 422)
    assert wire.locs(problem) == [["body", "q", "data"]]
    assert "1 non-finite values (NaN or infinity) are not allowed here" in problem["detail"]


# ---------------------------------------------------------------------------------- integers past int64
@pytest.mark.parametrize(
    ("request_", "loc", "bound"),
    [
        ({"positions": [0, 1, 2, 2**64]}, ["body", "positions", 3], str(2**63 - 1)),
        ({"positions": [0, 1, 2, -(2**63) - 1]}, ["body", "positions", 3], str(-(2**63))),
        (
            {"positions": {"dtype": "int64", "shape": [4], "data": [0, 1, 2, 2**63]}},
            ["body", "positions", "data"],
            str(2**63 - 1),
        ),
        (
            {"positions": {"dtype": "int32", "shape": [4], "data": [0, 1, 2, 2**31]}},
            ["body", "positions", "data"],
            str(2**31 - 1),
        ),
        ({"q": {"random": {"shape": [1, 2, 4, 8], "seed": 2**64}}}, ["body", "q", "random", "seed"], str(2**63 - 1)),
    ],
)
def test_integers_beyond_their_range_are_422(
    client: TestClient, wire: Any, request_: dict[str, Any], loc: list[Any], bound: str
) -> None:
    """Positions (a list or an integer tensor) and seeds reach torch, which cannot hold them: a 500 before."""
    body = {"method": "rope", "q": Q, "rotate": "query"} | request_
    problem = wire.problem(client.post("/v1/rotary", content=json.dumps(body), headers=JSON), 422)
    messages = [error["msg"] for error in problem["errors"] if error["loc"] == loc]
    assert messages, wire.locs(problem)
    assert bound in messages[0]


def test_job_seeds_beyond_int64_are_422(client: TestClient, wire: Any) -> None:
    job = {"kind": "train", "spec": {"methods": [{"method": "rope"}], "seeds": [0, 2**64]}}
    problem = wire.problem(client.post("/v1/jobs", content=json.dumps(job), headers=JSON), 422)
    assert wire.locs(problem) == [["body", "spec", "seeds", 1]]


# ------------------------------------------------------------------------------------------ the JSON cap
def big_rotary_body() -> dict[str, Any]:
    """q of 1 x 1 x 128 x 8 float32 values inline: about 20 kB of JSON."""
    q = torch.randn(1, 1, 128, 8, generator=torch.Generator().manual_seed(3))
    return {"method": "rope", "rotate": "query", "q": {"shape": list(q.shape), "data": q.flatten().tolist()}}


def in_two_chunks(body: bytes) -> Iterator[bytes]:
    """No Content-Length: the gateway must count the bytes as they arrive."""
    yield body[: len(body) // 2]
    yield body[len(body) // 2 :]


@pytest.mark.parametrize("path", ["/v1/rotary", "/v1/attention", "/v1/bias", "/v1/encodings", "/v1/jobs"])
def test_a_json_body_over_the_json_cap_is_413_naming_size_limit_and_safetensors(
    make_client: Any, wire: Any, path: str
) -> None:
    client = make_client(max_json_body_bytes=4096)
    body = json.dumps(big_rotary_body()).encode()
    problem = wire.problem(client.post(path, content=body, headers=JSON), 413)
    assert problem["size"] == len(body)
    assert problem["limit"] == 4096
    assert "application/vnd.safetensors" in problem["detail"]
    assert "max_json_body_bytes" in problem["detail"]

    problem = wire.problem(client.post(path, content=in_two_chunks(body), headers=JSON), 413)
    assert problem["limit"] == 4096
    assert problem["size"] > 4096
    assert "application/vnd.safetensors" in problem["detail"]


def test_the_same_tensors_as_safetensors_are_served_and_equal_the_json_answer(make_client: Any, wire: Any) -> None:
    """The way round the 413: the body cap, not the JSON cap, holds for a safetensors body."""
    request = big_rotary_body()
    q = torch.tensor(request["q"]["data"], dtype=torch.float32).reshape(request["q"]["shape"])
    metadata = {"request": json.dumps({"method": "rope", "rotate": "query"})}
    binary = safetensors.torch.save({"q": q}, metadata=metadata)
    capped = make_client(max_json_body_bytes=4096)
    assert len(binary) > 4096
    headers = {"Content-Type": "application/vnd.safetensors", "Accept": "application/vnd.safetensors"}
    served = capped.post("/v1/rotary", content=binary, headers=headers)
    assert served.status_code == 200, served.text

    uncapped = make_client()
    as_json = uncapped.post("/v1/rotary", json=request, headers={"Accept": "application/vnd.safetensors"})
    assert as_json.status_code == 200, as_json.text
    torch.testing.assert_close(wire.safetensors(served)[0]["q"], wire.safetensors(as_json)[0]["q"], rtol=0, atol=0)


def test_json_inline_in_a_safetensors_header_is_held_to_the_json_cap(make_client: Any, wire: Any) -> None:
    """A safetensors header is JSON too: a request with its tensors inline in the metadata is a 413."""
    client = make_client(max_json_body_bytes=4096)
    metadata = {"request": json.dumps(big_rotary_body())}
    binary = safetensors.torch.save({"k": torch.zeros(1, 1, 128, 8)}, metadata=metadata)
    problem = wire.problem(
        client.post("/v1/rotary", content=binary, headers={"Content-Type": "application/vnd.safetensors"}), 413
    )
    assert problem["limit"] == 4096
    assert problem["size"] > 4096
    assert "__metadata__" in problem["detail"]


# ------------------------------------------------------------------------------- exact values under it
def test_float_values_round_trip_exactly(client: TestClient, wire: Any) -> None:
    """Rotation by position 0 is the identity, so the answer must be the very values sent: float64 extremes
    (largest, subnormal, awkward decimals) and float32 values as ``tolist`` writes them."""
    awkward = [0.1, -2.5e-308, 5e-324, 1.7976931348623157e308, -1 / 3, 123456789.123456789, 1e-5, 7.0]
    float32 = torch.randn(8, generator=torch.Generator().manual_seed(5)).tolist()
    for dtype, values in (("float64", awkward), ("float32", float32)):
        request = {
            "method": "rope",
            "rotate": "query",
            "q": {"dtype": dtype, "shape": [1, 1, 1, 8], "data": values},
            "positions": {"dtype": "int64", "shape": [1], "data": [0]},
        }
        response = client.post("/v1/rotary", json=request)
        assert response.status_code == 200, response.text
        got = response.json()["tensors"]["q"]
        assert got["dtype"] == dtype
        assert got["data"] == values


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_integer_position_tensors_equal_the_position_list(client: TestClient, wire: Any, dtype: str) -> None:
    q = {"random": {"shape": [1, 2, 4, 8], "seed": 4}}
    positions = [7, 0, 2**20 + 3, 5]
    as_list = client.post("/v1/rotary", json={"method": "rope", "rotate": "query", "q": q, "positions": positions})
    tensor = {"dtype": dtype, "shape": [4], "data": positions}
    as_tensor = client.post("/v1/rotary", json={"method": "rope", "rotate": "query", "q": q, "positions": tensor})
    assert as_list.status_code == as_tensor.status_code == 200, as_tensor.text
    expected = wire.json_tensor(as_list.json()["tensors"]["q"])
    torch.testing.assert_close(wire.json_tensor(as_tensor.json()["tensors"]["q"]), expected, rtol=0, atol=0)


def test_a_bool_mask_tensor_equals_the_mask_list(client: TestClient, wire: Any) -> None:
    mask = [[False, True, False, False], [False, False, False, True]]
    base = {"method": "alibi", "q": {"random": {"shape": [2, 2, 4, 8]}}, "k": {"random": {"shape": [2, 2, 4, 8]}}}
    as_list = client.post("/v1/attention", json=base | {"key_padding_mask": mask, "causal": False})
    tensor = {"dtype": "bool", "shape": [2, 4], "data": [value for row in mask for value in row]}
    as_tensor = client.post("/v1/attention", json=base | {"key_padding_mask": tensor, "causal": False})
    assert as_list.status_code == as_tensor.status_code == 200, as_tensor.text
    weights = wire.json_tensor(as_tensor.json()["tensors"]["weights"])
    torch.testing.assert_close(weights, wire.json_tensor(as_list.json()["tensors"]["weights"]), rtol=0, atol=0)
    assert bool((weights[0, :, :, 1] == 0).all())
    assert bool((weights[1, :, :, 3] == 0).all())
    assert bool((weights[0, :, :, 0] > 0).all())


@pytest.mark.parametrize(
    ("field", "tensor", "reason"),
    [
        ("positions", {"dtype": "bool", "shape": [2], "data": [True, 2]}, "true or false"),
        ("positions", {"dtype": "int64", "shape": [2], "data": [1, 1.5]}, "integer"),
        ("q", {"dtype": "float32", "shape": [1, 1, 1, 2], "data": [1.0, "NaN"]}, "'nan', 'inf', '-inf'"),
        ("q", {"dtype": "float32", "shape": [1, 1, 1, 2], "data": [1.0, None]}, "a number"),
    ],
)
def test_a_value_the_dtype_cannot_hold_is_422_naming_data(
    client: TestClient, wire: Any, field: str, tensor: dict[str, Any], reason: str
) -> None:
    request = {"method": "rope", "rotate": "query", "q": Q} | {field: tensor}
    problem = wire.problem(client.post("/v1/rotary", json=request), 422)
    assert ["body", field, "data"] in wire.locs(problem)
    assert "value 1" in problem["detail"]
    assert reason in problem["detail"]


def test_a_data_list_of_the_wrong_length_is_refused_before_conversion(client: TestClient, wire: Any) -> None:
    request = {"method": "rope", "rotate": "query", "q": {"shape": [1, 1, 4, 8], "data": [0.5] * 31}}
    problem = wire.problem(client.post("/v1/rotary", json=request), 422)
    assert ["body", "q", "data"] in wire.locs(problem)
    assert "has 31 values but shape [1, 1, 4, 8] needs 32" in problem["detail"]


@pytest.mark.parametrize(
    ("path", "request_body", "loc"),
    [
        ("/v1/bias", {"method": "t5", "num_heads": 2, "query_length": 4, "params": {"seed": 2**64}}, "seed"),
        ("/v1/bias", {"method": "fire", "num_heads": 2, "query_length": 4, "params": {"seed": 2**64}}, "seed"),
        ("/v1/bias", {"method": "fire", "num_heads": 2, "query_length": 4, "params": {"L_init": 2**64}}, "L_init"),
        ("/v1/bias", {"method": "kerple_log", "num_heads": 2, "query_length": 4, "params": {"seed": 2**64}}, "seed"),
        ("/v1/encodings", {"method": "learned_absolute", "length": 4, "dim": 8, "params": {"seed": 2**64}}, "seed"),
        ("/v1/encodings", {"method": "axial", "length": 4, "dim": 8, "params": {"seed": -1}}, "seed"),
    ],
)
def test_method_seeds_beyond_int64_are_422(
    client: TestClient, wire: Any, path: str, request_body: dict[str, Any], loc: str
) -> None:
    problem = wire.problem(client.post(path, json=request_body), 422)
    assert wire.locs(problem) == [["body", "params", loc]]
