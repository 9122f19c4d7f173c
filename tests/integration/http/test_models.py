"""``/v1/models`` and ``/v1/rotary`` with a config, through the real HTTP app: presets, resolution of configs
in their own dialects, rotations for a config's layer, and 4xx that name the field."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from starlette.testclient import TestClient

from posenc.real_models.presets import PRESETS

JSON = {"Accept": "application/json"}


def buggy_gemma(theta: float = 10000.0) -> dict[str, Any]:
    """Gemma 3 (v5, per layer type) with the global linear factor on its sliding layers too."""
    text = copy.deepcopy(PRESETS["gemma-3-4b"]["text_config"])
    del text["rope_scaling"], text["rope_local_base_freq"]
    linear = {"rope_type": "linear", "factor": 8.0}
    text["rope_parameters"] = {
        "full_attention": linear | {"rope_theta": 1000000.0},
        "sliding_attention": linear | {"rope_theta": theta},
    }
    return {"model_type": "gemma3", "text_config": text}


def test_the_presets_are_listed_and_each_resolves(client: TestClient) -> None:
    listed = client.get("/v1/models")
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert body["count"] == len(PRESETS) == len(body["data"])
    for preset in body["data"]:
        resolved = client.post("/v1/models/resolve", json={"preset": preset["name"]})
        assert resolved.status_code == 200, resolved.text
        layers = resolved.json()["layers"]
        assert len(layers) >= 1
        assert all(layer["method"] is None or layer["rotary_dim"] > 0 for layer in layers)
    one = client.get("/v1/models/gemma-3-4b")
    assert one.status_code == 200
    assert one.json()["config"] == PRESETS["gemma-3-4b"]


def test_a_buggy_config_resolves_with_its_warning(client: TestClient) -> None:
    response = client.post("/v1/models/resolve", json={"config": buggy_gemma(theta=1000000.0)})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["layers"][0]["method"] == "rope_linear"
    [warning] = [w for w in body["warnings"] if w["code"] == "sliding_layers_scaled"]
    assert warning["layers"][:5] == [0, 1, 2, 3, 4]
    assert warning["evidence"]["factor"] == 8.0


def test_a_flat_rope_dict_gemma_never_reads_resolves_to_plain_rope_with_its_warning(client: TestClient) -> None:
    """transformers' Gemma 3 config reads rope_parameters per layer type only: a flat dict is ignored there."""
    text = copy.deepcopy(PRESETS["gemma-3-4b"]["text_config"])
    del text["rope_scaling"], text["rope_local_base_freq"]
    text["rope_parameters"] = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}
    response = client.post("/v1/models/resolve", json={"config": {"model_type": "gemma3", "text_config": text}})
    assert response.status_code == 200, response.text
    body = response.json()
    assert [(layer["method"], layer["params"]["base"]) for layer in body["layers"][4:6]] == [
        ("rope", 10000.0),
        ("rope", 1000000.0),
    ]
    [warning] = [w for w in body["warnings"] if w["code"] == "flat_rope_parameters_ignored"]
    assert warning["evidence"]["ignored"]["factor"] == 8.0


@pytest.mark.parametrize(
    ("body", "status", "loc"),
    [
        ({"config": {"hidden_size": 64, "num_hidden_layers": 2}}, 422, ["body", "config", "num_attention_heads"]),
        (
            {"config": {"text_config": {"num_attention_heads": 2, "hidden_size": 8}}},
            422,
            ["body", "config", "text_config", "num_hidden_layers"],
        ),
        ({"config": {}, "preset": "qwen3-8b"}, 422, ["body"]),
        ({"preset": "gpt-5"}, 404, None),
    ],
)
def test_bad_resolve_requests(client: TestClient, body: dict[str, Any], status: int, loc: list[str] | None) -> None:
    response = client.post("/v1/models/resolve", json=body)
    assert response.status_code == status, response.text
    if loc is not None:
        assert loc in [error["loc"] for error in response.json()["errors"]], response.json()
    else:
        assert "gpt-5" in response.json()["detail"]


def test_rotary_with_a_config_rotates_the_layers_slice(
    client: TestClient, inline: Callable[[torch.Tensor], dict[str, Any]]
) -> None:
    q = torch.randn(1, 2, 5, 192, generator=torch.Generator().manual_seed(0))  # DeepSeek-V3: 128 + 64 features
    body = {"config": PRESETS["deepseek-v3"], "layer": 0, "q": inline(q), "k": inline(q)}
    response = client.post("/v1/rotary", json=body, headers=JSON)
    assert response.status_code == 200, response.text
    result = response.json()
    rotated = torch.tensor(result["tensors"]["q"]["data"]).reshape(1, 2, 5, 192)
    assert torch.equal(rotated[..., :128], q[..., :128])  # the no-rope part passes through
    assert not torch.allclose(rotated[:, :, 1:, 128:], q[:, :, 1:, 128:])  # the rope part turns (position 0: not)
    torch.testing.assert_close(rotated[:, :, 0], q[:, :, 0])
    assert result["meta"]["rotary_slice"] == [128, 192]
    assert result["meta"]["pairing"] == "interleaved"
    assert result["meta"]["method"] == "rope_yarn"


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        ({"layer": 3}, ["body", "layer"]),  # SmolLM3's layer 3 is NoPE
        ({"layer": None}, ["body"]),
        ({"method": "rope"}, ["body"]),
        ({"pairing": "interleaved"}, ["body"]),
        ({"q": {"random": {"shape": [1, 1, 2, 64]}}}, ["body", "q", "shape"]),
    ],
)
def test_rotary_with_a_config_refuses_with_the_field(
    client: TestClient, inline: Callable[[torch.Tensor], dict[str, Any]], change: dict[str, Any], loc: list[str]
) -> None:
    q = inline(torch.zeros(1, 1, 2, 128))
    body = {"config": PRESETS["smollm3-3b"], "layer": 0, "q": q, "k": q, **change}
    response = client.post("/v1/rotary", json={key: value for key, value in body.items() if value is not None})
    assert response.status_code == 422, response.text
    assert loc in [error["loc"] for error in response.json()["errors"]], response.json()


def test_position_ids_for_text_and_an_image(client: TestClient) -> None:
    body = {
        "segments": [
            {"kind": "text", "length": 2},
            {"kind": "image", "grid": [1, 4, 4]},
            {"kind": "text", "length": 1},
        ],
        "rule": "qwen2_5_vl",
    }
    response = client.post("/v1/rope/position_ids", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["ids"] == [[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]]
    assert result["next_position"] == 5
    bad = client.post("/v1/rope/position_ids", json={"segments": [{"kind": "video", "grid": [2, 3, 4]}]})
    assert bad.status_code == 422
    assert ["body", "segments", 0, "grid"] in [error["loc"] for error in bad.json()["errors"]]


def test_a_config_converts_between_dialects(client: TestClient) -> None:
    response = client.post("/v1/models/convert", json={"config": PRESETS["gemma-3-4b"], "to": "v5"})
    assert response.status_code == 200, response.text
    text = response.json()["config"]["text_config"]
    assert text["rope_parameters"]["sliding_attention"] == {"rope_type": "default", "rope_theta": 10000.0}
    again = client.post("/v1/models/resolve", json={"config": response.json()["config"]})
    original = client.post("/v1/models/resolve", json={"preset": "gemma-3-4b"})
    assert again.json()["layers"] == original.json()["layers"]


# ------------------------------------------------------------------------------------------- diagnostics


def test_compare_finds_where_gemmas_buggy_sliding_layer_parts_from_the_right_one(client: TestClient) -> None:
    from posenc.real_models.diagnostics import RotarySetup, compare

    body = {
        "setup_a": {"config": PRESETS["gemma-3-4b"], "layer": 0},
        "setup_b": {"config": buggy_gemma(), "layer": 0},
        "max_position": 4096,
        "tolerance_angle": 0.01,
        "tolerance_logit": 0.05,
    }
    response = client.post("/v1/rope/compare", json=body)
    assert response.status_code == 200, response.text
    report = response.json()
    expected = compare(
        RotarySetup("rope", {"base": 10000.0}, 256), RotarySetup("rope_linear", {"base": 10000.0, "factor": 8.0}, 256),
        4096, 0.01, 0.05,
    )  # fmt: skip
    assert report["first_angle_divergence"] == expected.first_angle_divergence is not None
    assert report["first_logit_divergence"] == expected.first_logit_divergence is not None
    # the first position where some pair's angle is off by more than 0.01 rad: θ^0 · p · (1 − 1/8) > 0.01
    assert report["first_angle_divergence"] == 1


def test_decode_is_exact_for_rope_and_drifts_for_dynamic_ntk_past_its_length(client: TestClient) -> None:
    plain = client.post(
        "/v1/rope/decode", json={"setup": {"method": "rope", "rotary_dim": 64}, "prefill": 8, "steps": 16}
    )
    assert plain.status_code == 200, plain.text
    assert plain.json()["max_logit_error"] == 0.0
    assert plain.json()["first_divergent_step"] is None
    setup = {
        "method": "rope_dynamic_ntk",
        "params": {"factor": 4.0, "original_max_position_embeddings": 16},
        "rotary_dim": 64,
    }
    dynamic = client.post("/v1/rope/decode", json={"setup": setup, "prefill": 8, "steps": 16})
    assert dynamic.status_code == 200, dynamic.text
    assert dynamic.json()["first_divergent_length"] == 17


def test_frequencies_precision_and_permutation(client: TestClient) -> None:
    freq = client.post("/v1/rope/frequencies", json={"setup": {"config": PRESETS["llama-3.1-8b"], "layer": 0},
                                                      "train_length": 8192})  # fmt: skip
    assert freq.status_code == 200, freq.text
    bands = {pair["band"] for pair in freq.json()["pairs"]}
    assert bands == {"high", "smooth", "low"}
    precise = client.post("/v1/rope/precision", json={"setup": {"method": "rope", "rotary_dim": 64},
                                                       "dtype": "float32", "positions_per_band": 8})  # fmt: skip
    assert precise.status_code == 200, precise.text
    assert len(precise.json()["bands"]) == 4
    order = client.post("/v1/rope/permutation", json={"head_dim": 8, "to": "half"})
    assert order.json()["order"] == [0, 2, 4, 6, 1, 3, 5, 7]


@pytest.mark.parametrize(
    ("path", "body", "loc"),
    [
        ("/v1/rope/frequencies", {"setup": {"method": "alibi"}, "train_length": 8}, ["body", "setup", "method"]),
        (
            "/v1/rope/decode",
            {"setup": {"config": PRESETS["smollm3-3b"], "layer": 3}, "prefill": 4, "steps": 4},
            ["body", "setup", "layer"],
        ),
        (
            "/v1/rope/compare",
            {"setup_a": {"method": "rope"}, "setup_b": {"method": "rope"}, "max_position": 1 << 30},
            ["body", "max_position"],
        ),
        ("/v1/rope/precision", {"setup": {"method": "rope"}, "dtype": "int8"}, ["body", "dtype"]),
    ],
)
def test_diagnostics_refuse_with_the_field(client: TestClient, path: str, body: dict[str, Any], loc: list[Any]) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    assert loc in [error["loc"] for error in response.json()["errors"]], response.json()


def test_llama4_query_temperature_by_position(client: TestClient) -> None:
    config = PRESETS["llama-4-scout-17b-16e"]
    nope = client.post("/v1/rope/temperature", json={"config": config, "layer": 3, "length": 3, "offset": 8190})
    assert nope.status_code == 200, nope.text
    body = nope.json()
    assert body["applies"] is True
    # floor((n + 1) / 8192) is 0 for n = 8190 and 1 for n = 8191, 8192: τ = 1, then 1 + 0.1 · ln 2
    assert body["temperature"] == pytest.approx([1.0, 1.0 + 0.1 * math.log(2), 1.0 + 0.1 * math.log(2)], rel=1e-12)
    rope_layer = client.post("/v1/rope/temperature", json={"config": config, "layer": 0, "length": 2})
    assert rope_layer.json() == {"applies": False, "temperature": [1.0, 1.0], "formula": None}


def test_resolve_answers_the_engine_notes_with_their_sources(client: TestClient) -> None:
    response = client.post("/v1/models/resolve", json={"preset": "deepseek-v3"})
    assert response.status_code == 200, response.text
    codes = {note["code"]: note for note in response.json()["engine_notes"]}
    assert {"mla_mscale_softmax", "derived_max_length"} <= set(codes)
    assert all(url.startswith("https://github.com/") for url in codes["mla_mscale_softmax"]["sources"])
    plain = client.post("/v1/models/resolve", json={"preset": "qwen3-8b"}).json()
    assert plain["engine_notes"] == []


def test_a_preset_name_works_wherever_a_config_does(client: TestClient) -> None:
    """ "config": "llama-3.1-8b" on /v1/rotary, the /v1/rope setups, the temperature and convert: the preset's
    config; a misspelt one is a 422 at the field naming the close presets."""
    q = {"random": {"shape": [1, 2, 4, 64], "seed": 0}}
    by_name = client.post("/v1/rotary", json={"config": "llama-3.2-1b", "layer": 0, "q": q, "k": q})
    assert by_name.status_code == 200, by_name.text
    config = PRESETS["llama-3.2-1b"]
    by_dict = client.post("/v1/rotary", json={"config": config, "layer": 0, "q": q, "k": q})
    assert by_name.json()["tensors"]["q"] == by_dict.json()["tensors"]["q"]
    setup = {"config": "gemma-3-4b", "layer": 5}
    assert client.post("/v1/rope/frequencies", json={"setup": setup, "train_length": 1024}).status_code == 200
    assert client.post(
        "/v1/rope/temperature", json={"config": "llama-4-scout-17b-16e", "layer": 3, "length": 4}
    ).json()["applies"]
    converted = client.post("/v1/models/convert", json={"config": "llama-3.1-8b", "to": "v5"})
    assert converted.json()["config"]["rope_parameters"]["rope_type"] == "llama3"
    typo = client.post("/v1/rotary", json={"config": "llama-3.1-8", "layer": 0, "q": q, "k": q})
    assert typo.status_code == 422
    assert typo.json()["errors"][0]["loc"] == ["body", "config"]
    assert "did you mean 'llama-3.1-8b'" in typo.json()["detail"]
