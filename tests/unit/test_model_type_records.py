"""The model-type records (``posenc.real_models.model_types``) checked against transformers' own config classes and
rotary embeddings (a pinned test-only dependency) and llama.cpp's architecture names (gguf-py), and the resolver
fixes that follow from them: each config below is resolved and compared with what transformers builds from it."""

from __future__ import annotations

import copy
import importlib
import logging
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import pytest
import torch
from starlette.testclient import TestClient
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from posenc.errors import InvalidInput
from posenc.real_models.configs import layer_frequencies, resolve_config
from posenc.real_models.model_types import (
    GENERIC,
    MODEL_TYPE_DEFAULTS,
    RECORDS,
    known_model_types,
    model_type_record,
)
from posenc.real_models.presets import PRESETS
from posenc.settings import Settings
from service.main import create_app

logging.getLogger("transformers").setLevel(logging.ERROR)
ROOT = Path(__file__).resolve().parents[2]
FLOAT32_POW = 2e-6  # relative: float32 rounding of transformers' θ^(2k/d) (as in test_model_configs)
SMALL = {"hidden_size": 512, "num_attention_heads": 4, "num_hidden_layers": 4, "max_position_embeddings": 8192}


def hf_text(config: dict[str, Any]) -> Any:
    fields = {key: value for key, value in copy.deepcopy(config).items() if key != "model_type"}
    return CONFIG_MAPPING[config["model_type"]](**fields).get_text_config()


def hf_rotary(text: Any) -> Any:
    module = importlib.import_module(type(text).__module__.replace("configuration_", "modeling_"))
    [name] = [n for n in dir(module) if n.endswith("RotaryEmbedding") and "Vision" not in n]
    return getattr(module, name)(text)


def hf_inv_freq(rotary: Any, layer_type: str) -> torch.Tensor:
    per_type = getattr(rotary, f"{layer_type}_inv_freq", None)
    return rotary.inv_freq if per_type is None else per_type


def codes(config: dict[str, Any]) -> set[str]:
    return {warning.code for warning in resolve_config(config).warnings}


# --------------------------------------------------------------------------------------------- the records
def test_every_model_type_spelling_has_one_record_and_an_unknown_one_the_generic_record() -> None:
    names = [name for record in RECORDS for name in (record.model_type, *record.aliases)]
    assert len(names) == len(set(names)) == len(known_model_types())
    assert model_type_record("gemma3") is model_type_record("gemma3_text")
    assert model_type_record("kimi_k2") is model_type_record("deepseek_v3")
    unknown = model_type_record("not_a_model")
    assert (unknown.model_type, unknown.known, unknown.defaults) == ("not_a_model", False, {})
    assert model_type_record(None) == GENERIC
    assert unknown.reads_no_rope_layers  # (what a generic reader assumes)
    assert unknown.reads_mrope_section


@pytest.mark.parametrize(
    "name", sorted({n for record in RECORDS for n in (record.model_type, *record.aliases)} & set(CONFIG_MAPPING))
)
def test_each_record_names_the_config_class_transformers_builds_for_its_model_type(name: str) -> None:
    """(kimi_k2 has no config class: Kimi K2.5's reads a kimi_k2 text config as DeepSeek-V3's.)"""
    record = model_type_record(name)
    assert type(CONFIG_MAPPING[name]().get_text_config()).__name__ == record.config_class


@pytest.mark.parametrize("record", [r for r in RECORDS if r.gguf_arch is not None], ids=lambda r: r.model_type)
def test_each_gguf_architecture_is_one_llama_cpp_names(record: Any) -> None:
    assert record.gguf_arch in set(gguf.MODEL_ARCH_NAMES.values())


def test_the_gguf_architectures_the_brief_names() -> None:
    archs = {name: model_type_record(name).gguf_arch for name in
             ("llama4_text", "deepseek_v3", "gemma3_text", "gpt_oss", "qwen2", "phi3", "smollm3", "llama")}  # fmt: skip
    assert archs == {"llama4_text": "llama4", "deepseek_v3": "deepseek2", "gemma3_text": "gemma3",
                     "gpt_oss": "gpt-oss", "qwen2": "qwen2", "phi3": "phi3", "smollm3": "smollm3",
                     "llama": "llama"}  # fmt: skip


def _default_rope_widths(model_type: str) -> tuple[int, int]:
    """(inverse frequencies transformers builds for default RoPE with partial_rotary_factor 0.5 on the full
    layers, pairs of the whole head or MLA rope part there as resolved here)."""
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    config = {"model_type": model_type, **SMALL, "num_hidden_layers": 6, "partial_rotary_factor": 0.5}
    record = model_type_record(model_type)
    if record.rope_per_layer_type:
        config["rope_parameters"] = {"full_attention": rope, "sliding_attention": rope}
    else:
        config["rope_parameters"] = rope
    layer = next(layer for layer in resolve_config(config).layers if layer.layer_type != "sliding_attention")
    built = hf_inv_freq(hf_rotary(hf_text(config)), "full_attention")
    return int(built.shape[0]), (layer.head_dim - layer.rotary_slice[0]) // 2


@pytest.mark.parametrize(
    "record",
    [r for r in RECORDS if r.known and not r.regimes and not r.nope_mla and r.model_type != "mistral4"],
    ids=lambda r: r.model_type,
)
def test_the_record_says_whether_default_rope_ignores_a_partial_rotation_as_the_rotary_class_does(record: Any) -> None:
    """Each record's rotary code, handed default RoPE and partial_rotary_factor 0.5: the whole head (or MLA rope
    part) where the record says the default rope type ignores partial rotation, half of it where it reads it."""
    built, whole = _default_rope_widths(record.model_type)
    ignores = record.partial_rotary_ignored is not None
    assert built == (whole if ignores else whole // 2), record.model_type


@pytest.mark.parametrize("record", [r for r in RECORDS if r.mrope_section is not None], ids=lambda r: r.model_type)
def test_the_m_rope_records_hold_their_rotary_class_default_sections(record: Any) -> None:
    text = hf_text({"model_type": record.model_type, **SMALL, "head_dim": 128})
    assert tuple(hf_rotary(text).mrope_section) == record.mrope_section


def test_the_records_with_a_no_rope_default_are_the_classes_that_fill_one() -> None:
    for record in RECORDS:
        if not record.known or record.regimes:
            continue
        text = CONFIG_MAPPING[record.model_type](num_hidden_layers=8).get_text_config()
        filled = getattr(text, "no_rope_layers", None)
        if record.reads_no_rope_layers:
            assert list(filled) == [int((i + 1) % record.defaults["no_rope_layer_interval"] != 0) for i in range(8)]
        else:
            assert not filled, record.model_type


def test_no_model_type_is_tested_by_name_outside_the_records() -> None:
    """Every model-type fact comes from a record: no ``model_type in`` / ``==`` stands anywhere in the product
    (the resolver, the GGUF mapping, the presets, the diagnostics, the gateway) but the records module, which holds
    the lookup."""
    pattern = re.compile(r"model_type\)?\s*(?:not\s+in|in|==|!=)\s")
    files = [path for folder in ("posenc", "service", "workers") for path in sorted((ROOT / folder).rglob("*.py"))
             if path != ROOT / "posenc/real_models/model_types.py"]  # fmt: skip
    assert len(files) > 100
    offending = [f"{path.name}:{n}" for path in files for n, line in enumerate(path.read_text().splitlines(), 1)
                 if pattern.search(line) and not line.lstrip().startswith("#")]  # fmt: skip
    assert offending == []
    assert pattern.search("if model_type in REGIME_MODEL_TYPES:")  # (the pattern sees the old spelling)


# --------------------------------------------------------------------------------------------- the fixes
def test_dynamic_ntk_scales_from_max_position_embeddings_as_transformers_updates_it() -> None:
    """transformers' dynamic NTK divides by max_position_embeddings (at init and when a longer input grows the
    frequencies), never by the rope dict's original_max_position_embeddings."""
    rope = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 2048}
    config = {"model_type": "llama", **SMALL, "head_dim": 128, "rope_theta": 10000.0, "rope_scaling": rope}
    layer = resolve_config(config).layers[0]
    assert layer.params["original_max_position_embeddings"] == 8192
    rotary = hf_rotary(hf_text(config))
    length = 40_000
    x = torch.zeros(1, length, 8)
    cos, _ = rotary(x, torch.arange(length)[None])  # (the dynamic update grows inv_freq to this length)
    ours = layer_frequencies(layer, seq_len=length).inv_freq
    torch.testing.assert_close(ours.float(), rotary.inv_freq.float(), rtol=FLOAT32_POW, atol=0)
    ours_cos = torch.cos((length - 1) * ours)
    torch.testing.assert_close(ours_cos.float(), cos[0, -1, : ours.shape[0]].float(), rtol=0, atol=1e-2)


def test_a_qwen2_vl_config_without_rope_theta_rotates_at_its_class_default_1e6() -> None:
    config = {"model_type": "qwen2_vl", **SMALL}
    layer = resolve_config(config).layers[0]
    assert layer.params["base"] == 1_000_000.0
    expected = hf_inv_freq(hf_rotary(hf_text(config)), "full_attention")
    torch.testing.assert_close(layer_frequencies(layer).inv_freq.float(), expected.float(), rtol=FLOAT32_POW, atol=0)
    assert "model_type_default" in codes(config)


def test_a_gemma4_config_without_rope_parameters_gets_its_class_rope_per_layer_type() -> None:
    """Gemma4TextConfig fills proportional RoPE (a quarter of the pairs, θ 1e6) for the full layers, default RoPE
    at 1e4 for the sliding ones, and every 6th layer full: what transformers rotates, layer by layer."""
    config = {"model_type": "gemma4_text", **SMALL, "num_hidden_layers": 6, "head_dim": 128, "global_head_dim": 256}
    layers = resolve_config(config).layers
    assert [layer.layer_type for layer in layers] == ["sliding_attention"] * 5 + ["full_attention"]
    assert (layers[5].method, layers[5].params["rotated_fraction"], layers[5].params["base"]) == (
        "rope_proportional",
        0.25,
        1_000_000.0,
    )
    rotary = hf_rotary(hf_text(config))
    for layer in (layers[0], layers[5]):
        expected = hf_inv_freq(rotary, layer.layer_type)
        torch.testing.assert_close(
            layer_frequencies(layer).inv_freq.float(), expected.float(), rtol=FLOAT32_POW, atol=0
        )


@pytest.mark.parametrize("key", ["factor", "low_freq_factor", "high_freq_factor"])
def test_a_llama3_rope_dict_missing_a_key_is_refused_naming_it_as_transformers_refuses_it(key: str) -> None:
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}  # fmt: skip
    del rope[key]
    config = {"model_type": "llama", **SMALL, "rope_theta": 500000.0, "rope_scaling": rope}
    with pytest.raises(InvalidInput) as refused:
        resolve_config(config)
    assert refused.value.loc == ("rope_scaling", key)
    with pytest.raises(KeyError, match=key):
        hf_text(config)


def test_qwen2_vl_head_dim_and_partial_rotation_are_ignored_as_transformers_ignores_them() -> None:
    config = {"model_type": "qwen2_vl", **SMALL, "head_dim": 64, "partial_rotary_factor": 0.5}
    resolved = resolve_config(config)
    layer = resolved.layers[0]
    assert (layer.head_dim, layer.rotary_dim) == (128, 128)  # hidden_size / num_attention_heads, all of it
    assert {"config_key_ignored", "partial_rotary_ignored"} <= {w.code for w in resolved.warnings}
    expected = hf_inv_freq(hf_rotary(hf_text(config)), "full_attention")
    torch.testing.assert_close(layer_frequencies(layer).inv_freq.float(), expected.float(), rtol=FLOAT32_POW, atol=0)


@pytest.mark.parametrize(
    ("model_type", "rope", "layout"),
    [
        ("qwen2_vl", {"rope_type": "default"}, "chunked"),
        ("qwen2_5_vl", {"type": "mrope"}, "chunked"),
        ("qwen3_vl_text", {"rope_type": "default"}, "interleaved"),
    ],
)
def test_qwen_vl_without_mrope_section_runs_its_class_default_sections(
    model_type: str, rope: dict[str, Any], layout: str
) -> None:
    config = {"model_type": model_type, **SMALL, "head_dim": 128, "rope_theta": 1e6, "rope_scaling": rope}
    layer = resolve_config(config).layers[0]
    rotary = hf_rotary(hf_text(config))
    assert (layer.method, layer.mrope_section) == ("mrope", list(rotary.mrope_section))
    assert layer.params["layout"] == layout


def test_qwen2_5_vl_runs_its_sections_on_a_scaled_rope_type_too() -> None:
    config = {
        "model_type": "qwen2_5_vl",
        **SMALL,
        "rope_theta": 1e6,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    }
    layer = resolve_config(config).layers[0]
    assert (layer.method, layer.mrope_section) == ("mrope", [16, 24, 24])  # M-RoPE over the linear table
    assert layer.params["scaling"] == {"method": "rope_linear", "params": {"factor": 2.0}}
    axis = layer_frequencies(layer).pair_axis
    assert axis is not None
    assert torch.bincount(axis, minlength=3).tolist() == [16, 24, 24]


def test_a_deepseek_v3_partial_rotation_is_said_where_transformers_narrows_and_ignored_where_it_does_not() -> None:
    config = copy.deepcopy(PRESETS["deepseek-v3"])
    config["partial_rotary_factor"] = 0.5
    resolved = resolve_config(config)  # YaRN: transformers narrows the frequencies, its attention then fails
    assert "partial_rotary_does_not_fit" in {w.code for w in resolved.warnings}
    layer = next(layer for layer in resolved.layers if layer.method is not None)
    assert layer.rotary_dim == 32
    expected = hf_inv_freq(hf_rotary(hf_text(config)), "full_attention")
    assert layer_frequencies(layer).inv_freq.shape == expected.shape
    plain = {**config, "rope_scaling": None}
    resolved = resolve_config(plain)
    assert "partial_rotary_ignored" in {w.code for w in resolved.warnings}
    assert resolved.layers[0].rotary_dim == 64 == 2 * hf_inv_freq(hf_rotary(hf_text(plain)), "").shape[0]


@pytest.mark.parametrize("extra", [{"mscale": 0.707}, {"mscale_all_dim": 1.0}, {"mscale": 1.0, "mscale_all_dim": 0.0}])
def test_yarn_s_mscale_alone_is_ignored_as_transformers_ignores_it(extra: dict[str, float]) -> None:
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, **extra}
    config = {"model_type": "llama", **SMALL, "rope_theta": 10000.0, "rope_scaling": rope}
    layer = resolve_config(config).layers[0]
    rotary = hf_rotary(hf_text(config))
    assert layer.attention_scale == pytest.approx(float(rotary.attention_scaling), rel=1e-9)
    torch.testing.assert_close(
        layer_frequencies(layer).inv_freq.float(), rotary.inv_freq.float(), rtol=FLOAT32_POW, atol=0
    )


def test_a_longrope_factor_sets_the_attention_factor_as_transformers_reads_it() -> None:
    pairs = 64
    rope = {"rope_type": "longrope", "factor": 4.0, "short_factor": [1.0] * pairs, "long_factor": [2.0] * pairs}
    config = {"model_type": "llama", **SMALL, "rope_theta": 10000.0, "rope_scaling": rope}
    layer = resolve_config(config).layers[0]
    rotary = hf_rotary(hf_text(config))
    assert layer.attention_scale == pytest.approx(float(rotary.attention_scaling), rel=1e-9)
    assert layer.attention_scale > 1.0


def test_phi3_refuses_the_rope_types_its_config_class_refuses() -> None:
    config = {"model_type": "phi3", **SMALL, "rope_scaling": {"type": "linear", "factor": 2.0}}
    with pytest.raises(InvalidInput) as refused:
        resolve_config(config)
    assert refused.value.loc == ("rope_scaling", "type")
    with pytest.raises(Exception, match="longrope"):
        hf_text(config)


def test_a_rope_local_base_freq_is_ignored_where_only_gemma_3_reads_it() -> None:
    config = copy.deepcopy(PRESETS["gpt-oss-20b"])
    config["rope_local_base_freq"] = 500000.0
    resolved = resolve_config(config)
    assert {layer.params["base"] for layer in resolved.layers} == {config["rope_theta"]}
    assert "config_key_ignored" in {w.code for w in resolved.warnings}


def test_a_class_max_position_embeddings_is_the_length_a_scaled_rope_reads_without_one() -> None:
    config = {
        "model_type": "gemma3_text",
        **SMALL,
        "num_hidden_layers": 6,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
    }
    del config["max_position_embeddings"]
    resolved = resolve_config(config)
    full = resolved.layers[5]
    assert full.params["original_max_position_embeddings"] == 131072
    expected = hf_inv_freq(hf_rotary(hf_text(config)), "full_attention")
    torch.testing.assert_close(layer_frequencies(full).inv_freq.float(), expected.float(), rtol=FLOAT32_POW, atol=0)


def _llama4_without_nope_layers() -> dict[str, Any]:
    config = copy.deepcopy(PRESETS["llama-4-scout-17b-16e"])
    for key in ("no_rope_layers", "no_rope_layer_interval"):
        config["text_config"].pop(key, None)
    return config


def test_llama4_without_no_rope_layers_is_nope_every_4th_layer_as_its_class_fills_it() -> None:
    config = _llama4_without_nope_layers()
    resolved = resolve_config(config)
    text = CONFIG_MAPPING["llama4"](**{k: v for k, v in config.items() if k != "model_type"}).get_text_config()
    assert [int(layer.method is not None) for layer in resolved.layers] == list(text.no_rope_layers)
    assert "model_type_default" in {w.code for w in resolved.warnings}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    settings = Settings(
        redis_url=None, api_keys=[], rate_limit_per_minute=None, cors_origins=[], data_dir=None, data_dirs=[]
    )
    with TestClient(create_app(settings=settings), raise_server_exceptions=False) as test_client:
        yield test_client


def test_the_resolve_route_fills_llama4_s_nope_layers(client: TestClient) -> None:
    response = client.post("/v1/models/resolve", json={"config": _llama4_without_nope_layers()})
    assert response.status_code == 200, response.text
    rotating = [layer["method"] is not None for layer in response.json()["layers"]]
    assert rotating == [(index + 1) % 4 != 0 for index in range(len(rotating))]


def test_no_rope_layers_are_ignored_where_the_attention_never_reads_them() -> None:
    config = {"model_type": "qwen2", **SMALL, "no_rope_layers": [1, 0, 1]}
    resolved = resolve_config(config)
    assert all(layer.method is not None for layer in resolved.layers)
    assert "config_key_ignored" in {w.code for w in resolved.warnings}
    assert not hasattr(hf_rotary(hf_text(config)), "no_rope_layers")


def test_every_default_a_record_fills_is_a_key_the_resolver_reads() -> None:
    from posenc.real_models.config_fields import TextFields

    for model_type, defaults in MODEL_TYPE_DEFAULTS.items():
        assert set(defaults) <= set(TextFields.model_fields), model_type


def test_an_mrope_section_is_ignored_where_the_rotary_class_is_not_m_rope() -> None:
    config = {"model_type": "llama", **SMALL, "rope_scaling": {"rope_type": "default", "mrope_section": [16, 24, 22]}}
    resolved = resolve_config(config)
    assert (resolved.layers[0].method, resolved.layers[0].mrope_section) == ("rope", None)
    assert "config_key_ignored" in {w.code for w in resolved.warnings}
    expected = hf_inv_freq(hf_rotary(hf_text(config)), "full_attention")
    assert layer_frequencies(resolved.layers[0]).inv_freq.shape == expected.shape


PER_TYPE = {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}  # fmt: skip


def test_a_rope_dict_keyed_by_declared_layer_types_is_refused_where_the_rotary_reads_one_flat_dict() -> None:
    config = {"model_type": "qwen2", **SMALL, "rope_parameters": PER_TYPE}
    with pytest.raises(InvalidInput) as refused:
        resolve_config(config)
    assert refused.value.loc == ("rope_parameters",)
    with pytest.raises(KeyError):
        hf_rotary(hf_text(config))


def test_a_rope_dict_keyed_by_undeclared_layer_types_is_read_flat_as_transformers_reads_it() -> None:
    config = {"model_type": "mistral", **SMALL, "rope_parameters": PER_TYPE}
    resolved = resolve_config(config)
    assert {layer.params["base"] for layer in resolved.layers} == {10000.0}
    assert "per_layer_type_rope_ignored" in {w.code for w in resolved.warnings}
    expected = hf_inv_freq(hf_rotary(hf_text(config)), "full_attention")
    torch.testing.assert_close(
        layer_frequencies(resolved.layers[0]).inv_freq.float(), expected.float(), rtol=FLOAT32_POW, atol=0
    )


def test_a_gemma4_flat_rope_dict_is_refused_as_its_rotary_refuses_it() -> None:
    for key in ("rope_parameters", "rope_scaling"):
        config = {
            "model_type": "gemma4_text",
            **SMALL,
            "head_dim": 128,
            key: {"rope_type": "default", "rope_theta": 1e6},
        }
        with pytest.raises(InvalidInput) as refused:
            resolve_config(config)
        assert refused.value.loc == (key,)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # (rope_scaling's deprecation)
            with pytest.raises(KeyError):
                hf_rotary(hf_text(config))


def test_gemma4_without_layer_types_forces_its_last_layer_to_full_attention() -> None:
    config = {"model_type": "gemma4_text", **SMALL, "head_dim": 128, "global_head_dim": 256}
    resolved = resolve_config(config)
    expected = list(hf_text(config).layer_types)
    assert [layer.layer_type for layer in resolved.layers] == expected == ["sliding_attention"] * 3 + ["full_attention"]


def test_a_window_of_zero_is_no_window() -> None:
    config = {"model_type": "qwen2_moe", **SMALL, "sliding_window": 0}
    resolved = resolve_config(config)
    assert {layer.window for layer in resolved.layers} == {None}
    assert hf_text(config).sliding_window == 0  # (the class's own "no window")


def test_mistral4_default_rope_over_the_whole_head_is_said_not_to_run() -> None:
    config = {"model_type": "mistral4", **SMALL, "qk_nope_head_dim": 64, "qk_rope_head_dim": 64,
              "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}  # fmt: skip
    resolved = resolve_config(config)
    assert "mla_default_rope_does_not_fit" in {w.code for w in resolved.warnings}
    built = hf_inv_freq(hf_rotary(hf_text(config)), "full_attention")
    assert 2 * built.shape[0] == 128 != resolved.layers[0].rotary_dim  # (transformers' cos/sin span the head)


def test_a_longrope_list_of_one_factor_divides_every_pair_as_transformers_broadcasts_it() -> None:
    rope = {
        "rope_type": "longrope",
        "short_factor": [2.0],
        "long_factor": [4.0],
        "original_max_position_embeddings": 2048,
    }
    config = {"model_type": "qwen3", **SMALL, "head_dim": 128, "rope_theta": 1e6, "rope_scaling": rope}
    resolved = resolve_config(config)
    assert "factor_list_broadcast" in {w.code for w in resolved.warnings}
    rotary = hf_rotary(hf_text(config))
    torch.testing.assert_close(
        layer_frequencies(resolved.layers[0]).inv_freq.float(), rotary.inv_freq.float(), rtol=FLOAT32_POW, atol=0
    )
    phi3 = {"model_type": "phi3", **SMALL, "original_max_position_embeddings": 2048, "rope_scaling": rope}
    with pytest.raises(InvalidInput):  # (Phi3Config refuses the length too)
        resolve_config(phi3)


def test_a_gemma4_layer_type_rope_dict_without_its_theta_is_refused_as_transformers_refuses_it() -> None:
    rope = {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}  # fmt: skip
    config = {"model_type": "gemma4_text", **SMALL, "head_dim": 128, "rope_theta": 1e6, "rope_parameters": rope}
    with pytest.raises(InvalidInput) as refused:
        resolve_config(config)
    assert refused.value.loc == ("rope_parameters", "full_attention", "rope_theta")
    with pytest.raises(KeyError, match="rope_theta"):
        hf_text(config)


def test_an_mrope_section_in_a_gemma4_layer_type_dict_is_ignored_as_its_rotary_ignores_it() -> None:
    rope = {"full_attention": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [8, 12, 12]},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}  # fmt: skip
    config = {"model_type": "gemma4_text", **SMALL, "head_dim": 128, "global_head_dim": 256, "rope_parameters": rope}
    resolved = resolve_config(config)
    assert {layer.mrope_section for layer in resolved.layers} == {None}
    assert "config_key_ignored" in {w.code for w in resolved.warnings}
    rotary = hf_rotary(hf_text(config))
    full = resolved.layers[-1]
    torch.testing.assert_close(
        layer_frequencies(full).inv_freq.float(), hf_inv_freq(rotary, full.layer_type).float(), rtol=FLOAT32_POW, atol=0
    )


def test_a_top_level_original_length_does_not_override_a_layer_type_s_own() -> None:
    """standardize_rope_params lets a top-level original_max_position_embeddings (Phi-3's) win over a flat rope
    dict only; a dict per layer type keeps its own."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "rope_theta": 1e6}
    rope = {"full_attention": yarn, "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
    config = {"model_type": "gemma3_text", **SMALL, "num_hidden_layers": 6, "original_max_position_embeddings": 2048,
              "rope_parameters": rope}  # fmt: skip
    full = resolve_config(config).layers[5]
    assert full.params["original_max_position_embeddings"] == 4096
    expected = hf_inv_freq(hf_rotary(hf_text(config)), "full_attention")
    torch.testing.assert_close(layer_frequencies(full).inv_freq.float(), expected.float(), rtol=FLOAT32_POW, atol=0)


def test_a_llama4_rope_dict_keyed_by_its_class_layer_types_is_refused_as_transformers_refuses_it() -> None:
    config = copy.deepcopy(PRESETS["llama-4-scout-17b-16e"])
    config["text_config"]["rope_scaling"] = None
    config["text_config"]["rope_parameters"] = PER_TYPE
    with pytest.raises(InvalidInput) as refused:
        resolve_config(config)
    assert refused.value.loc == ("text_config", "rope_parameters")
    with pytest.raises(KeyError):
        hf_rotary(CONFIG_MAPPING["llama4"](**{k: v for k, v in config.items() if k != "model_type"}).get_text_config())


def test_gemma4_default_rope_on_its_global_layers_ignores_the_fraction_as_its_rotary_does() -> None:
    config = copy.deepcopy(PRESETS["gemma-4-26b-a4b"])
    config["text_config"]["rope_parameters"]["full_attention"]["rope_type"] = "default"
    resolved = resolve_config(config)
    assert (resolved.layers[5].method, resolved.layers[5].rotary_dim) == ("rope", 512)
    assert "partial_rotary_ignored" in {w.code for w in resolved.warnings}
    text = CONFIG_MAPPING["gemma4"](**{k: v for k, v in config.items() if k != "model_type"}).get_text_config()
    expected = hf_inv_freq(hf_rotary(text), "full_attention")
    torch.testing.assert_close(
        layer_frequencies(resolved.layers[5]).inv_freq.float(), expected.float(), rtol=FLOAT32_POW, atol=0
    )


@pytest.mark.parametrize("top", [None, 2048])
def test_deepseek_v4_compress_regime_keeps_its_own_original_length_whatever_the_top_level_says(top: int | None) -> None:
    """DeepseekV4Config nests the published flat rope dict by regime, so a top-level
    original_max_position_embeddings does not override the compress dict's own (unlike a flat dict's, Phi-3)."""
    config = copy.deepcopy(PRESETS["deepseek-v4-flash"])
    if top is not None:
        config["original_max_position_embeddings"] = top
    fields = {key: value for key, value in config.items() if key != "model_type"}
    expected = CONFIG_MAPPING[config["model_type"]](**fields).rope_parameters["compress"]
    compressed = [layer for layer in resolve_config(config).layers if layer.method == "rope_yarn"]
    assert compressed
    for layer in compressed:
        assert layer.params["original_max_position_embeddings"] == expected["original_max_position_embeddings"]


@pytest.mark.parametrize(
    ("model_type", "spelled", "warned"),
    [("mistral", "su", True), ("llama", "deepseek_yarn", True), ("phi3", "su", False), ("llama", "yarn", False)],
)
def test_a_vllm_rope_type_spelling_is_resolved_and_said_where_transformers_cannot_load_it(
    model_type: str, spelled: str, warned: bool
) -> None:
    """vLLM's spellings (``su``, ``deepseek_yarn``) resolve as vLLM runs them; where the model type's config class
    does not rename the spelling, transformers refuses the config, and the warning says so."""
    from tests.helpers.transformers_rope import hf_rope

    rope: dict[str, Any] = {"rope_type": spelled, "factor": 4.0, "original_max_position_embeddings": 2048}
    if spelled == "su":
        rope = {"rope_type": spelled, "short_factor": [1.0] * 64, "long_factor": [2.0] * 64,
                "original_max_position_embeddings": 2048}  # fmt: skip
    config = {"model_type": model_type, **SMALL, "head_dim": 128, "max_position_embeddings": 8192,
              "rope_theta": 10000.0, "rope_scaling": rope}  # fmt: skip
    resolved = resolve_config(config)
    assert resolved.layers[0].method is not None
    codes = {warning.code for warning in resolved.warnings}
    assert ("rope_type_not_in_transformers" in codes) is warned
    if warned:
        with pytest.raises(KeyError, match=spelled):  # ROPE_INIT_FUNCTIONS has no such type
            hf_rope(config)
    else:
        hf_rope(config)  # transformers loads it
