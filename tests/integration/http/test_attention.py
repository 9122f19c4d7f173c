"""POST /v1/attention: the weights and statistics of the real app against posenc.attention in process."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from starlette.testclient import TestClient

from posenc.attention import attention_maps, attention_statistics
from posenc.errors import InvalidInput
from posenc.pe import (
    AbsoluteContext,
    BiasContext,
    MethodSpec,
    RotaryContext,
    bias_dense,
    encoding,
    get_method,
    list_methods,
    rotary_frequencies,
)
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import RandomTensor
from posenc.tensors import random_tensor

Q = {"random": {"shape": [2, 2, 5, 8], "seed": 11}}
K = {"random": {"shape": [2, 2, 5, 8], "seed": 12}}
SAFETENSORS = {"Accept": "application/vnd.safetensors"}


def one_dimensional(spec: MethodSpec, params: dict[str, Any]) -> bool:
    """Attention maps place tokens on a line; methods that need a 2D/3D grid say so with an InvalidInput
    in process, and answer 422 over HTTP."""
    parsed = spec.parse_params(params)
    try:
        if spec.kind is Kind.ROTARY:
            freqs = rotary_frequencies(spec, parsed, RotaryContext(rotary_dim=8, seq_len=5))
            return freqs.num_axes == 1
        if spec.kind is Kind.BIAS:
            bias_dense(spec, parsed, BiasContext(num_heads=2, query_length=5, key_length=5, causal=True))
        else:
            encoding(spec, parsed, AbsoluteContext(grid=(5,), dim=8))
    except InvalidInput:
        return False
    return True


ATTENTION_METHODS = [s for s in list_methods() if s.kind in (Kind.ABSOLUTE, Kind.BIAS, Kind.ROTARY)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("spec", ATTENTION_METHODS, ids=lambda spec: spec.name)
def test_every_method_gives_the_library_weights(
    client: TestClient, wire: Any, example_params: Any, spec: MethodSpec, causal: bool
) -> None:
    raw_params = example_params(spec.name)
    request = {"method": spec.name, "params": raw_params, "q": Q, "k": K, "causal": causal}
    response = client.post("/v1/attention", json=request, headers=SAFETENSORS)
    if not one_dimensional(spec, raw_params):
        assert response.status_code == 422, response.text
        return
    assert response.status_code == 200, response.text
    tensors, meta = wire.safetensors(response)
    q = random_tensor(RandomTensor.model_validate(Q))
    k = random_tensor(RandomTensor.model_validate(K))
    maps = attention_maps(q, k, spec=spec, params=spec.parse_params(raw_params), causal=causal)
    torch.testing.assert_close(tensors["weights"], maps.weights, rtol=0, atol=0)
    torch.testing.assert_close(tensors["weights"].sum(-1), torch.ones(2, 2, 5))
    stats = attention_statistics(maps.weights, maps.fully_masked)
    torch.testing.assert_close(tensors["entropy"], stats.entropy, rtol=0, atol=0)
    torch.testing.assert_close(tensors["mean_distance"], stats.mean_distance, rtol=0, atol=0)
    torch.testing.assert_close(tensors["mass_by_distance"], stats.mass_by_distance, rtol=0, atol=0)
    torch.testing.assert_close(tensors["mass_by_distance"].sum(-1), torch.ones(2))
    assert meta["method"] == spec.name
    assert meta["fully_masked_rows"] == 0
    if causal:
        assert bool((torch.triu(tensors["weights"], diagonal=1) == 0).all())


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
    full_request = {"method": spec.name, "params": params, "q": q_full, "k": k, "causal": True, "stats": False}
    if not one_dimensional(spec, params):  # tokens on a line cannot carry 2D/3D positions: a 422, as documented
        wire.problem(client.post("/v1/attention", json=full_request), 422)
        return
    full = wire.safetensors(client.post("/v1/attention", json=full_request, headers=SAFETENSORS))[0]["weights"]

    last_query = random_tensor(RandomTensor.model_validate(q_full))[:, :, 7:]  # (1, 2, 1, 8)
    decode = {**full_request, "q": {"dtype": "float32", "shape": [1, 2, 1, 8], "data": last_query.flatten().tolist()}}
    response = client.post("/v1/attention", json={**decode, "stats": True}, headers=SAFETENSORS)
    assert response.status_code == 200, response.text
    tensors, meta = wire.safetensors(response)
    assert meta["query_offset"] == 7
    assert bool((tensors["weights"] > 0).all()), "every cached key gets weight"
    torch.testing.assert_close(tensors["weights"][:, :, 0], full[:, :, 7], rtol=1e-5, atol=1e-6)
    assert tensors["mass_by_distance"].shape == (2, 8)

    top_left = wire.safetensors(client.post("/v1/attention", json={**decode, "query_offset": 0}, headers=SAFETENSORS))[
        0
    ]["weights"]
    assert int((top_left > 0).sum(-1).max()) == 1, "at position 0 the query attends to key 0 only"


def test_statistics_measure_distance_from_the_query_position() -> None:
    """A decode query at position 7 that puts all its weight on key 7 is at distance 0, not 7."""
    weights = torch.zeros(1, 1, 1, 8)
    weights[..., 7] = 1.0
    stats = attention_statistics(weights, query_offset=7)
    assert float(stats.mean_distance[0]) == 0.0
    assert float(stats.mass_by_distance[0, 0]) == 1.0
    top_left = attention_statistics(weights)
    assert float(top_left.mean_distance[0]) == 7.0
