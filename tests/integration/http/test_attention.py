"""POST /v1/attention: the weights and statistics of the real app against posenc.attention in process."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from starlette.testclient import TestClient

from posenc.attention import attention_maps, attention_statistics
from posenc.pe import (
    MethodSpec,
    get_method,
    list_methods,
)
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import RandomTensor
from posenc.tensors import random_tensor

Q = {"random": {"shape": [2, 2, 5, 8], "seed": 11}}
K = {"random": {"shape": [2, 2, 5, 8], "seed": 12}}
SAFETENSORS = {"Accept": "application/vnd.safetensors"}


def one_dimensional(spec: MethodSpec) -> bool:
    """Attention maps place tokens on a line; methods of 2D/3D positions answer 422 over HTTP."""
    return spec.axes == 1


ATTENTION_METHODS = list_methods()
V = {"random": {"shape": [2, 2, 5, 3], "seed": 13}}
X = {"random": {"shape": [2, 5, 16], "seed": 14}}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("spec", ATTENTION_METHODS, ids=lambda spec: spec.name)
def test_every_method_gives_the_library_weights_and_output(
    client: TestClient, wire: Any, example_params: Any, spec: MethodSpec, causal: bool
) -> None:
    raw_params = example_params(spec.name)
    request = {"method": spec.name, "params": raw_params, "q": Q, "k": K, "v": V, "x": X, "causal": causal}
    response = client.post("/v1/attention", json=request, headers=SAFETENSORS)
    if not one_dimensional(spec):
        assert response.status_code == 422, response.text
        return
    if spec.causal_only and not causal:
        assert wire.locs(wire.problem(response, 422)) == [["body", "causal"]]
        return
    if spec.name == "shaw":  # its value table has the head width: v of another width is refused, naming v
        assert wire.locs(wire.problem(response, 422)) == [["body", "v", "shape"]]
        v_head = {"random": {"shape": [2, 2, 5, 8], "seed": 13}}
        request = {**request, "v": v_head}
        response = client.post("/v1/attention", json=request, headers=SAFETENSORS)
    assert response.status_code == 200, response.text
    tensors, meta = wire.safetensors(response)
    q, k, v, x = (random_tensor(RandomTensor.model_validate(t)) for t in (Q, K, request["v"], X))
    params = spec.parse_params(raw_params)
    maps = attention_maps(q, k, v=v, x=x, spec=spec, params=params, causal=causal)
    torch.testing.assert_close(tensors["weights"], maps.weights, rtol=0, atol=0)
    assert maps.output is not None
    torch.testing.assert_close(tensors["output"], maps.output, rtol=0, atol=0)
    if maps.leftover is None:  # softmax kinds: rows sum to one
        torch.testing.assert_close(tensors["weights"].sum(-1), torch.ones(2, 2, 5))
    else:  # methods that replace the softmax may keep mass for no key
        torch.testing.assert_close(tensors["weights"].sum(-1) + tensors["leftover"], torch.ones(2, 2, 5))
    stats = attention_statistics(maps.weights, maps.fully_masked)
    torch.testing.assert_close(tensors["entropy"], stats.entropy, rtol=0, atol=0)
    torch.testing.assert_close(tensors["mean_distance"], stats.mean_distance, rtol=0, atol=0)
    torch.testing.assert_close(tensors["mass_by_distance"], stats.mass_by_distance, rtol=0, atol=0)
    assert meta["method"] == spec.name
    assert meta["fully_masked_rows"] == 0
    if causal:
        assert bool((torch.triu(tensors["weights"], diagonal=1) == 0).all())
    as_json = client.post("/v1/attention", json=request)
    assert as_json.status_code == 200, as_json.text
    assert as_json.json()["tensors"]["output"]["shape"] == [2, 2, 5, v.shape[-1]]


@pytest.mark.parametrize("spec", [s for s in list_methods() if "x" in s.needs], ids=lambda spec: spec.name)
def test_a_method_that_reads_the_layer_input_names_x_when_it_is_missing(
    client: TestClient, wire: Any, spec: MethodSpec
) -> None:
    problem = wire.problem(client.post("/v1/attention", json={"method": spec.name, "q": Q, "k": K}), 422)
    assert wire.locs(problem) == [["body", "x"]]
    assert spec.name in problem["detail"] or spec.name in str(problem)


def test_v_and_x_of_the_wrong_shape_are_422_naming_them(client: TestClient, wire: Any) -> None:
    bad_v = {"random": {"shape": [2, 2, 4, 3]}}
    problem = wire.problem(client.post("/v1/attention", json={"method": "alibi", "q": Q, "k": K, "v": bad_v}), 422)
    assert wire.locs(problem) == [["body", "v", "shape"]]
    bad_x = {"random": {"shape": [2, 4, 16]}}
    problem = wire.problem(client.post("/v1/attention", json={"method": "alibi", "q": Q, "k": K, "x": bad_x}), 422)
    assert wire.locs(problem) == [["body", "x", "shape"]]


def test_bias_route_points_content_methods_to_attention(client: TestClient, wire: Any) -> None:
    content = [s.name for s in list_methods() if s.kind in (Kind.SCORE_MOD, Kind.ATTENTION)]
    for name in content:
        problem = wire.problem(client.post("/v1/bias", json={"method": name, "num_heads": 2, "query_length": 4}), 422)
        assert wire.locs(problem) == [["body", "method"]]
        assert "/v1/attention" in str(problem)


def test_json_answer_with_stats(client: TestClient, wire: Any) -> None:
    body = client.post("/v1/attention", json={"method": "alibi", "q": Q, "k": K}).json()
    assert list(body["tensors"]) == ["weights", "entropy", "mean_distance", "mass_by_distance"]
    assert body["tensors"]["weights"]["shape"] == [2, 2, 5, 5]
    assert body["tensors"]["entropy"]["shape"] == [2]
    assert body["tensors"]["mass_by_distance"]["shape"] == [2, 5]
    assert body["meta"]["scale"] == pytest.approx(8**-0.5)


def test_stats_false_returns_only_weights(client: TestClient) -> None:
    body = client.post("/v1/attention", json={"method": "rope", "q": Q, "k": K, "stats": False}).json()
    assert list(body["tensors"]) == ["weights"]


def test_padding_mask_and_fully_masked_rows(client: TestClient, wire: Any) -> None:
    """Batch 0 pads key 0, so under the causal mask its query 0 attends to nothing: zeros, not NaN."""
    mask = [[True, False, False, False, False], [False, False, False, False, True]]
    request = {"method": "nope", "q": Q, "k": K, "key_padding_mask": mask}
    tensors, meta = wire.safetensors(client.post("/v1/attention", json=request, headers=SAFETENSORS))
    weights = tensors["weights"]
    assert not bool(weights.isnan().any())
    assert meta["fully_masked_rows"] == 2  # batch 0, query 0, both heads
    torch.testing.assert_close(weights[0, :, 0], torch.zeros(2, 5))
    assert bool((weights[0, :, 1:, 0] == 0).all())  # nobody attends to the padded key
    assert bool((weights[1, :, :, 4] == 0).all())
    torch.testing.assert_close(weights[0, :, 1:].sum(-1), torch.ones(2, 4))
    torch.testing.assert_close(tensors["mass_by_distance"].sum(-1), torch.ones(2))  # masked rows left out


def test_custom_scale_is_applied_before_the_bias(client: TestClient, wire: Any) -> None:
    request = {"method": "alibi", "q": Q, "k": K, "scale": 0.5, "causal": False}
    tensors, meta = wire.safetensors(client.post("/v1/attention", json=request, headers=SAFETENSORS))
    q = random_tensor(RandomTensor.model_validate(Q))
    k = random_tensor(RandomTensor.model_validate(K))
    spec = get_method("alibi")
    expected = attention_maps(q, k, spec=spec, params=spec.parse_params({}), causal=False, scale=0.5)
    torch.testing.assert_close(tensors["weights"], expected.weights, rtol=0, atol=0)
    assert meta["scale"] == 0.5


def test_mismatched_k_is_422(client: TestClient, wire: Any) -> None:
    k = {"random": {"shape": [2, 3, 5, 8]}}
    problem = wire.problem(client.post("/v1/attention", json={"method": "alibi", "q": Q, "k": k}), 422)
    assert wire.locs(problem) == [["body", "k", "shape"]]


@pytest.mark.parametrize("spec", ATTENTION_METHODS, ids=lambda spec: spec.name)
def test_a_decode_step_attends_to_every_cached_key(
    client: TestClient, wire: Any, example_params: Any, spec: MethodSpec
) -> None:
    """Nq = 1, Nk = 8, causal: by default the query is the last token (bottom-right, as FlashAttention >= 2.1
    and Hugging Face decode), so it attends to all eight keys and equals the last row of the full 8 x 8 map;
    with query_offset=0 it sits at position 0 and attends to key 0 only."""
    params = example_params(spec.name)
    q_full = {"random": {"shape": [1, 2, 8, 8], "seed": 21}}
    k = {"random": {"shape": [1, 2, 8, 8], "seed": 22}}
    x = {"random": {"shape": [1, 8, 16], "seed": 23}}
    full_request = {"method": spec.name, "params": params, "q": q_full, "k": k, "x": x, "causal": True, "stats": False}
    if not one_dimensional(spec):  # tokens on a line cannot carry 2D/3D positions: a 422, as documented
        wire.problem(client.post("/v1/attention", json=full_request), 422)
        return
    full = wire.safetensors(client.post("/v1/attention", json=full_request, headers=SAFETENSORS))[0]["weights"]

    last_query = random_tensor(RandomTensor.model_validate(q_full))[:, :, 7:]  # (1, 2, 1, 8)
    decode = {**full_request, "q": {"dtype": "float32", "shape": [1, 2, 1, 8], "data": last_query.flatten().tolist()}}
    response = client.post("/v1/attention", json={**decode, "stats": True}, headers=SAFETENSORS)
    assert response.status_code == 200, response.text
    tensors, meta = wire.safetensors(response)
    assert meta["query_offset"] == 7
    if spec.kind is not Kind.ATTENTION:  # softmax: every cached key gets weight (ReLU or stick-breaking may not)
        assert bool((tensors["weights"] > 0).all()), "every cached key gets weight"
    torch.testing.assert_close(tensors["weights"][:, :, 0], full[:, :, 7], rtol=1e-5, atol=1e-6)
    assert tensors["mass_by_distance"].shape == (2, 8)

    top_left = wire.safetensors(client.post("/v1/attention", json={**decode, "query_offset": 0}, headers=SAFETENSORS))[
        0
    ]["weights"]
    assert int((top_left > 0).sum(-1).max()) <= 1, "at position 0 the query attends to key 0 only"
    assert bool((top_left[..., 1:] == 0).all())


def test_statistics_measure_distance_from_the_query_position() -> None:
    """A decode query at position 7 that puts all its weight on key 7 is at distance 0, not 7."""
    weights = torch.zeros(1, 1, 1, 8)
    weights[..., 7] = 1.0
    stats = attention_statistics(weights, query_offset=7)
    assert float(stats.mean_distance[0]) == 0.0
    assert float(stats.mass_by_distance[0, 0]) == 1.0
    top_left = attention_statistics(weights)
    assert float(top_left.mean_distance[0]) == 7.0


def test_a_model_coupled_method_updates_a_given_state(client: TestClient, wire: Any) -> None:
    """TAPE on /v1/attention is one layer: the state entering it (cos, sin) in, the state leaving it out."""
    state = {
        "cos": {"random": {"shape": [2, 2, 5, 8], "seed": 31}},
        "sin": {"random": {"shape": [2, 2, 5, 8], "seed": 32}},
    }
    params = {"rho": {"random": {"shape": [2, 2], "seed": 33}}}  # nonzero: the code's init (zeros) keeps the state
    request = {"method": "tape", "q": Q, "k": K, "v": V, "state": state, "params": params}
    response = client.post("/v1/attention", json=request, headers=SAFETENSORS)
    assert response.status_code == 200, response.text
    tensors, _ = wire.safetensors(response)
    assert tensors["state.cos"].shape == (2, 2, 5, 8)
    spec = get_method("tape")
    given = {name: random_tensor(RandomTensor.model_validate(value)) for name, value in state.items()}
    q, k, v = (random_tensor(RandomTensor.model_validate(t)) for t in (Q, K, V))
    maps = attention_maps(q, k, v=v, spec=spec, params=spec.parse_params(params), causal=True, state=given)
    assert maps.state is not None
    torch.testing.assert_close(tensors["weights"], maps.weights, rtol=0, atol=0)
    torch.testing.assert_close(tensors["state.sin"], maps.state["sin"], rtol=0, atol=0)
    assert not torch.allclose(tensors["state.cos"], given["cos"])  # the layer moved the state

    without = wire.safetensors(client.post("/v1/attention", json={**request, "state": None}, headers=SAFETENSORS))
    rope = wire.safetensors(client.post("/v1/attention", json={"method": "rope", "q": Q, "k": K}, headers=SAFETENSORS))
    torch.testing.assert_close(without[0]["weights"], rope[0]["weights"], rtol=1e-5, atol=1e-6)  # layer 0 is RoPE

    wrong_names = {**request, "state": {"cos": state["cos"]}}
    assert wire.locs(wire.problem(client.post("/v1/attention", json=wrong_names), 422)) == [["body", "state"]]
    wrong_shape = {**request, "state": {**state, "sin": {"random": {"shape": [2, 2, 4, 8]}}}}
    problem = wire.problem(client.post("/v1/attention", json=wrong_shape), 422)
    assert wire.locs(problem) == [["body", "state", "sin", "shape"]]
    stateless = {"method": "alibi", "q": Q, "k": K, "state": state}
    assert wire.locs(wire.problem(client.post("/v1/attention", json=stateless), 422)) == [["body", "state"]]
