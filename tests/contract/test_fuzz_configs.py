"""Fuzzing every route that takes a model config with generated configs (hypothesis), at least 5,000 requests.

A config is any JSON object, so the generator starts from the presets (so that resolution goes deep) and mutates
them: known keys get values of every JSON type and magnitude (huge and negative integers, 1e308, NaN and
Infinity as Python's encoder writes them, lone surrogates, lists, nested objects), keys are dropped, unknown keys
are added, the text model is nested under ``text_config``, rope dicts are given per layer type. Whatever arrives,
the gateway answers with a response and never a 5xx: bad values are a 422 naming a field inside the config, sizes
past a budget a 413, and every error is problem+json.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc.real_models.config_fields import RopeFields, TextFields
from posenc.real_models.presets import PRESETS, get_preset
from posenc.settings import Settings
from service.main import create_app

REQUESTS = 5000
MiB = 1024 * 1024
TEXT_KEYS = sorted(TextFields.model_fields)
ROPE_KEYS = sorted(RopeFields.model_fields)
DIFFUSERS_KEYS = ["_class_name", "attention_head_dim", "num_layers", "num_single_layers", "axes_dims_rope"]
ROUTES = ["resolve", "convert", "frequencies", "precision", "compare", "decode", "temperature", "rotary"]

integers = st.one_of(
    st.integers(min_value=-4, max_value=4096),
    st.sampled_from([0, -1, 2**31, 2**63, 10**12, 10**400, -(10**400), 1 << 26, (1 << 26) + 1, 1025, 8193]),
)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-300, 1e308, 0.5, 1.0, 4.0, 1e6, 500000.0]),
)
texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "default",
            "linear",
            "dynamic",
            "yarn",
            "llama3",
            "longrope",
            "su",
            "mrope",
            "full_attention",
            "sliding_attention",
            "\ud800",
            "x" * 300,
        ]
    ),
)
scalars = st.one_of(st.none(), st.booleans(), integers, floats, texts)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.dictionaries(st.one_of(texts, st.sampled_from(ROPE_KEYS)), children, max_size=4),
    ),
    max_leaves=12,
)


@st.composite
def rope_dicts(draw: st.DrawFn) -> Any:
    """A rope dict: a preset's, or one made of rope keys, with some values replaced by anything."""
    base: dict[str, Any] = draw(
        st.sampled_from(
            [
                {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                 "original_max_position_embeddings": 8192},
                {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
                {"type": "linear", "factor": 2.0},
                {"rope_type": "default", "mrope_section": [16, 24, 24]},
                {"rope_type": "dynamic", "factor": 2.0},
                {},
            ]
        )
    )  # fmt: skip
    base = dict(base)
    for key in draw(st.lists(st.sampled_from(ROPE_KEYS), max_size=3)):
        base[key] = draw(values)
    return base if draw(st.integers(0, 9)) else draw(values)


@st.composite
def configs(draw: st.DrawFn) -> Any:
    """A config.json-shaped object: a preset mutated, or (now and then) anything at all."""
    if draw(st.integers(0, 19)) == 0:
        return draw(values)
    config = dict(get_preset(draw(st.sampled_from(sorted(PRESETS)))))
    nested = isinstance(config.get("text_config"), dict)
    text = dict(config["text_config"]) if nested else config
    keys = DIFFUSERS_KEYS if "_class_name" in config else TEXT_KEYS
    for key in draw(st.lists(st.sampled_from(keys), max_size=4)):
        if key in ("rope_scaling", "rope_parameters") and draw(st.booleans()):
            if draw(st.booleans()):
                text[key] = {"full_attention": draw(rope_dicts()), "sliding_attention": draw(rope_dicts())}
            else:
                text[key] = draw(rope_dicts())
        elif key in ("num_hidden_layers", "layer_types", "no_rope_layers") and draw(st.booleans()):
            layers = draw(st.sampled_from([1, 2, 4, 1024, 1025, 100_000]))
            text[key] = layers if key == "num_hidden_layers" else [draw(scalars)] * min(layers, 2048)
        else:
            text[key] = draw(values)
    for key in draw(st.lists(st.sampled_from(sorted(text)), max_size=2)):
        text.pop(key, None)
    if draw(st.integers(0, 9)) == 0:
        text[draw(texts)] = draw(values)
    if nested:
        config["text_config"] = text
    elif draw(st.integers(0, 9)) == 0:
        config = {"model_type": draw(texts), "text_config": text}
    return config


def body(route: str, config: Any, layer: int, length: int) -> tuple[str, dict[str, Any]]:
    setup = {"config": config, "layer": layer}
    q = {"random": {"shape": [1, 1, 4, 128], "seed": 0}}
    return {
        "resolve": ("/v1/models/resolve", {"config": config}),
        "convert": ("/v1/models/convert", {"config": config, "to": "v5" if layer % 2 else "v4"}),
        "frequencies": ("/v1/rope/frequencies", {"setup": setup, "train_length": length}),
        "precision": ("/v1/rope/precision", {"setup": setup, "positions_per_band": 16}),
        "compare": ("/v1/rope/compare", {"setup_a": setup, "setup_b": {"method": "rope"}, "max_position": length}),
        "decode": ("/v1/rope/decode", {"setup": setup, "prefill": 8, "steps": min(length, 64)}),
        "temperature": ("/v1/rope/temperature", {"config": config, "layer": layer, "length": length}),
        "rotary": ("/v1/rotary", {"config": config, "layer": layer, "q": q, "rotate": "query"}),
    }[route]


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = create_app(
        Settings(
            max_output_bytes=16 * MiB,
            max_request_work=50_000_000,  # small budgets: large generated sizes are refused early
            compute_wait_s=30.0,
            compile_kernels=False,
        )
    )
    return TestClient(app, raise_server_exceptions=False)


def test_generated_configs_never_get_a_5xx(client: TestClient) -> None:
    sent: list[int] = []

    @settings(
        max_examples=REQUESTS,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(
        route=st.sampled_from(ROUTES),
        config=configs(),
        layer=st.integers(0, 1023),
        length=st.sampled_from([1, 16, 4096, 1 << 20]),
    )
    def one_request(route: str, config: Any, layer: int, length: int) -> None:
        path, payload = body(route, config, layer, length)
        # Python's encoder, as a script would send it: NaN and Infinity as their non-standard tokens, lone
        # surrogates as \ud800 escapes
        response = client.post(path, content=json.dumps(payload), headers={"Content-Type": "application/json"})
        sent.append(response.status_code)
        assert response.status_code < 500, f"{path}: {response.status_code}\n{response.text[:2000]}"
        if response.status_code >= 400:
            assert response.headers["content-type"].startswith("application/problem+json"), response.text[:500]
            problem = response.json()
            assert problem["status"] == response.status_code
            if response.status_code == 422:
                assert problem["errors"], problem
                assert all(error["loc"][0] == "body" for error in problem["errors"]), problem

    one_request()
    counts = {status: sent.count(status) for status in sorted(set(sent))}
    print(f"\n{len(sent)} generated-config requests, by status: {counts}")
    assert len(sent) >= REQUESTS
    # the generator reaches both outcomes: configs that resolve, and configs refused
    assert counts.get(200, 0) > REQUESTS // 20, counts
    assert counts.get(422, 0) > REQUESTS // 20, counts
