"""GGUFs written by llama.cpp's own converter (convert_hf_to_gguf.py, unpacked into .venv/llama.cpp by
``make install``) from tiny random Hugging Face models of every architecture the mapping supports, read back with
the client's reader: each resolves to its source config's layers with no warning from ``compare_with_config``, and
deliberate edits of the converted files' rope keys each draw their warning. All conversions run in one subprocess
per test module (``tests.helpers.llama_cpp_convert.convert_all``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf.constants import GGUFValueType
from posenc_client._gguf import read_gguf

from posenc.real_models.configs import ConfigWarning, resolve_config, rope_frequencies
from posenc.real_models.gguf_files import compare_with_config, config_from_gguf
from tests.helpers.gguf_edit import rewrite
from tests.helpers.llama_cpp_convert import convert_all, converter_present
from tests.helpers.tiny_models import NAMES, save_tiny_model, saved_config

F32, U32, STR = GGUFValueType.FLOAT32, GGUFValueType.UINT32, GGUFValueType.STRING


def _kimi_betas(kwargs: dict[str, Any]) -> None:
    kwargs["rope_parameters"] |= {"beta_fast": 1.0, "beta_slow": 1.0}  # Kimi K2's config


def _other_llama3_band(kwargs: dict[str, Any]) -> None:
    # low 2, high 8 over 16384: the same wavelength bounds (8192 and 2048) as low 1, high 4 over 8192
    kwargs["rope_parameters"] |= {"low_freq_factor": 2.0, "high_freq_factor": 8.0,
                                  "original_max_position_embeddings": 16384}  # fmt: skip


def _ministral3_betas(kwargs: dict[str, Any]) -> None:
    kwargs["rope_parameters"] |= {"beta_fast": 4.0, "beta_slow": 2.0}


def _yarn_attention_factor(kwargs: dict[str, Any]) -> None:
    kwargs["rope_parameters"] |= {"attention_factor": 1.0}  # YaRN's default here is 1 + 0.1·ln 4


VARIANTS: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "kimi_betas": ("deepseek_v3", _kimi_betas),
    "ministral3_betas": ("ministral3", _ministral3_betas),
    "llama3_other_band": ("llama3", _other_llama3_band),
    "qwen3_yarn_attention": ("qwen3_yarn", _yarn_attention_factor),
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Mapping[str, Any]]]:
    """name -> (the GGUF llama.cpp's converter wrote, the config.json it was made from), every model at once."""
    assert converter_present(), "llama.cpp's converter is not in .venv/llama.cpp: run `make install`"
    root = tmp_path_factory.mktemp("llama_cpp")
    jobs: dict[str, tuple[Path, Path]] = {}
    for name in NAMES:
        jobs[name] = (save_tiny_model(name, root / name), root / f"{name}.gguf")
    for name, (base, edit) in VARIANTS.items():
        jobs[name] = (save_tiny_model(base, root / name, edit), root / f"{name}.gguf")
    errors = convert_all(jobs)
    assert errors == {}, errors
    return {name: (out, saved_config(model)) for name, (model, out) in jobs.items()}


def header(path: Path) -> tuple[dict[str, Any], dict[str, list[float]]]:
    read = read_gguf(path)
    return read["metadata"], read["tensors"]


def codes(warnings: Iterable[ConfigWarning]) -> list[str]:
    return [warning.code for warning in warnings]


def assert_same_rotation(config: Mapping[str, Any], other: Mapping[str, Any]) -> None:
    """Same layers: method where rotated, frequencies (to 1e-6), attention and softmax scales, rotary dims, NoPE
    layers, windows."""
    expected, got = resolve_config(config).layers, resolve_config(other).layers
    assert len(got) == len(expected)
    for a, b in zip(expected, got, strict=True):
        assert (b.method is None) == (a.method is None), a.layer
        for name in ("layer_type", "rotary_dim", "rotary_slice", "window", "head_dim"):
            assert getattr(b, name) == getattr(a, name), (a.layer, name)
        assert math.isclose(b.attention_scale, a.attention_scale, rel_tol=1e-6), a.layer
        assert math.isclose(b.softmax_scale, a.softmax_scale, rel_tol=1e-6), a.layer
        if a.method is not None and b.method is not None:
            for length in (1, 1 << 22):
                ours = rope_frequencies(a.method, a.params, a.rotary_dim, length).inv_freq.double().numpy()
                theirs = rope_frequencies(b.method, b.params, b.rotary_dim, length).inv_freq.double().numpy()
                np.testing.assert_allclose(theirs, ours, rtol=1e-6, err_msg=f"layer {a.layer} at {length}")


# ------------------------------------------------------------------------------------------ faithful files
FAITHFUL = [name for name in NAMES if name != "gpt_oss"]


@pytest.mark.parametrize("name", FAITHFUL)
def test_a_converted_model_resolves_to_its_configs_layers(converted: Mapping[str, Any], name: str) -> None:
    path, config = converted[name]
    metadata, tensors = header(path)
    mapped = config_from_gguf(metadata, tensors)
    assert mapped.notes == []
    assert_same_rotation(config, mapped.config)
    assert compare_with_config(metadata, tensors, config) == []


def test_phi3_longrope_without_a_scaling_type_runs_its_factors(converted: Mapping[str, Any]) -> None:
    """Phi-3's converter writes the two factor tensors, the attention factor and the original context but no
    rope.scaling.type: llama.cpp runs the factors (was: plain RoPE, attention 1, the factors called missing, and
    original_context_length called missing in the v5 dialect while the key is there)."""
    path, config = converted["phi3_longrope"]
    metadata, tensors = header(path)
    assert "phi3.rope.scaling.type" not in metadata
    assert set(tensors) == {"rope_factors_long.weight", "rope_factors_short.weight"}
    scaling = config_from_gguf(metadata, tensors).config["rope_scaling"]
    assert scaling["rope_type"] == "longrope"
    assert scaling["original_max_position_embeddings"] == config["original_max_position_embeddings"]
    assert scaling["attention_factor"] == pytest.approx(metadata["phi3.rope.scaling.attn_factor"])
    assert [layer.method for layer in resolve_config(config).layers] == ["rope_longrope"] * 2


def test_gpt_oss_differs_only_in_yarn_truncation(converted: Mapping[str, Any]) -> None:
    """gpt-oss's config says truncate = false; ggml's YaRN floors and ceils its correction range whatever the file
    says (ggml_rope_yarn_corr_dims): a true difference, and the only one (its sliding pattern is llama.cpp's
    default every-2nd-layer)."""
    path, config = converted["gpt_oss"]
    metadata, tensors = header(path)
    warnings = compare_with_config(metadata, tensors, config)
    fields = [w.evidence["field"] for w in warnings if w.code == "gguf_field_changed"]
    assert fields == ["rope_scaling.truncate"]
    [layers] = [w for w in warnings if w.code == "gguf_layers_differ"]
    assert layers.layers == [0, 1, 2, 3]
    assert set(layers.evidence["gguf"]) == {"params"}
    truncated = config | {"rope_parameters": config["rope_parameters"] | {"truncate": True}}
    assert compare_with_config(metadata, tensors, truncated) == []


def test_a_llama3_band_spelled_otherwise_is_the_same_rotation(converted: Mapping[str, Any]) -> None:
    """low 2, high 8 over 16384 gives Llama 3's wavelength bounds of low 1, high 4 over 8192: the converter
    writes the same factors, and the comparison looks at frequencies (was: three changed fields and a layer)."""
    path, config = converted["llama3_other_band"]
    metadata, tensors = header(path)
    _, reference = converted["llama3"]
    assert tensors["rope_freqs.weight"] == header(converted["llama3"][0])[1]["rope_freqs.weight"]
    assert compare_with_config(metadata, tensors, config) == []
    assert compare_with_config(metadata, tensors, reference) == []


def test_yarn_betas_deepseek2_does_not_read_are_a_warning(converted: Mapping[str, Any]) -> None:
    """Kimi K2's betas are 1 and 1; llama.cpp reads yarn_beta_* for mistral3 and grok only and runs 32 and 1
    for deepseek2: the file's beta_fast is ignored, the frequencies differ."""
    path, config = converted["kimi_betas"]
    metadata, tensors = header(path)
    assert metadata["deepseek2.rope.scaling.yarn_beta_fast"] == 1.0
    warnings = compare_with_config(metadata, tensors, config)
    [ignored] = [w for w in warnings if w.code == "gguf_field_ignored"]
    assert ignored.evidence["field"] == "rope_scaling.beta_fast"
    assert (ignored.evidence["config"], ignored.evidence["gguf"], ignored.evidence["gguf_value"]) == (1.0, 32.0, 1.0)
    assert "does not read" in ignored.message
    [layers] = [w for w in warnings if w.code == "gguf_layers_differ"]
    assert layers.layers == [0, 1]


def test_yarn_betas_mistral3_reads_are_run(converted: Mapping[str, Any]) -> None:
    """models/mistral3.cpp reads yarn_beta_fast / yarn_beta_slow: other betas there are the config's."""
    path, config = converted["ministral3_betas"]
    metadata, tensors = header(path)
    assert (metadata["mistral3.rope.scaling.yarn_beta_fast"], metadata["mistral3.rope.scaling.yarn_beta_slow"]) == (
        4.0,
        2.0,
    )
    mapped = config_from_gguf(metadata, tensors)
    assert mapped.ignored == {}
    assert (mapped.config["rope_scaling"]["beta_fast"], mapped.config["rope_scaling"]["beta_slow"]) == (4.0, 2.0)
    assert compare_with_config(metadata, tensors, config) == []


def test_a_yarn_attention_factor_llama_cpp_does_not_read_is_a_warning(converted: Mapping[str, Any]) -> None:
    """The converter writes the config's attention_factor as rope.scaling.yarn_attn_factor, which no loader runs
    for YaRN (llama_context derives the factor from the scale): llama.cpp scales cos and sin by 1 + 0.1·ln 4."""
    path, config = converted["qwen3_yarn_attention"]
    metadata, tensors = header(path)
    assert metadata["qwen3.rope.scaling.yarn_attn_factor"] == 1.0
    warnings = compare_with_config(metadata, tensors, config)
    [ignored] = [w for w in warnings if w.code == "gguf_field_ignored"]
    assert ignored.evidence["field"] == "rope_scaling.attention_factor"
    assert ignored.evidence["gguf"] == pytest.approx(1 + 0.1 * math.log(4.0))
    [layers] = [w for w in warnings if w.code == "gguf_layers_differ"]
    assert layers.evidence["gguf"]["attention_scale"] == pytest.approx(1 + 0.1 * math.log(4.0))


# ------------------------------------------------------------------------------------------ edited files
def edited(converted: Mapping[str, Any], name: str, tmp_path: Path, **edits: Any) -> tuple[dict[str, Any], ...]:
    path, config = converted[name]
    metadata, tensors = header(rewrite(path, tmp_path / f"{name}-edited.gguf", **edits))
    return metadata, tensors, dict(config)


def fields(warnings: Iterable[ConfigWarning], code: str) -> list[str]:
    return [w.evidence["field"] for w in warnings if w.code == code]


@pytest.mark.parametrize(
    ("name", "edits", "code", "field"),
    [
        ("qwen3_yarn", {"set_keys": {"qwen3.rope.freq_base": (F32, 10000.0)}}, "gguf_field_changed", "rope_theta"),
        ("qwen3_yarn", {"set_keys": {"qwen3.rope.scaling.factor": (F32, 8.0)}}, "gguf_field_changed",
         "rope_scaling.factor"),
        ("qwen3_yarn", {"set_keys": {"qwen3.rope.scaling.original_context_length": (U32, 2048)}},
         "gguf_field_changed", "rope_scaling.original_max_position_embeddings"),
        ("qwen3_yarn", {"set_keys": {"qwen3.rope.scaling.type": (STR, "linear")}}, "gguf_field_changed",
         "rope_scaling.rope_type"),
        ("qwen3_yarn", {"drop_keys": ["qwen3.rope.scaling.factor"]}, "gguf_field_dropped", "rope_scaling.factor"),
        ("gemma3", {"set_keys": {"gemma3.rope.freq_base_swa": (F32, 20000.0)}}, "gguf_field_changed",
         "rope_local_base_freq"),
        ("llama3", {"drop_tensors": ["rope_freqs.weight"]}, "gguf_field_dropped", "rope_scaling.factor"),
    ],
)  # fmt: skip
def test_an_edited_rope_key_draws_its_warning(
    converted: Mapping[str, Any], tmp_path: Path, name: str, edits: dict[str, Any], code: str, field: str
) -> None:
    metadata, tensors, config = edited(converted, name, tmp_path, **edits)
    warnings = compare_with_config(metadata, tensors, config)
    assert field in fields(warnings, code), [w.message for w in warnings]
    assert "gguf_layers_differ" in codes(warnings)


def test_an_edited_rotary_dimension_changes_the_rotated_features(converted: Mapping[str, Any], tmp_path: Path) -> None:
    """Phi-3 rotates rope.dimension_count features (its factor tensors dropped too: they hold one per pair)."""
    metadata, tensors, config = edited(
        converted, "phi3_longrope", tmp_path, set_keys={"phi3.rope.dimension_count": (U32, 16)},
        drop_tensors=["rope_factors_long.weight", "rope_factors_short.weight"],
    )  # fmt: skip
    [layers] = [w for w in compare_with_config(metadata, tensors, config) if w.code == "gguf_layers_differ"]
    assert layers.evidence["gguf"]["rotary_dim"] == 16


def test_an_edited_longrope_attention_factor_changes_the_scale(converted: Mapping[str, Any], tmp_path: Path) -> None:
    """rope.scaling.attn_factor is LongRoPE's factor on cos and sin in llama.cpp (rope_attn_factor); the config
    derives its own, so the difference shows in the layers' attention scale."""
    metadata, tensors, config = edited(
        converted, "phi3_longrope", tmp_path, set_keys={"phi3.rope.scaling.attn_factor": (F32, 1.0)}
    )
    [layers] = [w for w in compare_with_config(metadata, tensors, config) if w.code == "gguf_layers_differ"]
    assert layers.evidence["gguf"] == {"attention_scale": 1.0}
    written = header(converted["phi3_longrope"][0])[0]["phi3.rope.scaling.attn_factor"]  # sqrt(1 + ln 32 / ln 4096)
    assert layers.evidence["config"]["attention_scale"] == pytest.approx(written, rel=1e-6)


def test_a_missing_scaling_type_is_linear_with_the_factor(converted: Mapping[str, Any], tmp_path: Path) -> None:
    """load_hparams reads a missing rope.scaling.type as linear and still applies the factor (was: unscaled)."""
    metadata, tensors, config = edited(converted, "qwen3_yarn", tmp_path, drop_keys=["qwen3.rope.scaling.type"])
    mapped = config_from_gguf(metadata, tensors)
    assert codes(mapped.notes) == ["gguf_scaling_type_missing"]
    assert mapped.config["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}
    layer = resolve_config(mapped.config).layers[0]
    plain = rope_frequencies("rope", {"base": 1e6}, layer.rotary_dim).inv_freq
    np.testing.assert_allclose(rope_frequencies(layer.method or "", layer.params, layer.rotary_dim).inv_freq,
                               plain / 4, rtol=1e-6)  # fmt: skip
    assert "gguf_layers_differ" in codes(compare_with_config(metadata, tensors, config))


def test_the_old_scale_linear_key_is_read_when_the_factor_is_missing(
    converted: Mapping[str, Any], tmp_path: Path
) -> None:
    """Gemma 3's global layers with the factor as rope.scale_linear: llama.cpp falls back on it (was: unscaled)."""
    metadata, tensors, config = edited(
        converted, "gemma3", tmp_path, drop_keys=["gemma3.rope.scaling.factor"],
        set_keys={"gemma3.rope.scale_linear": (F32, 8.0)},
    )  # fmt: skip
    assert compare_with_config(metadata, tensors, config) == []
    # and with neither, the global layers are unscaled: their frequencies differ
    metadata, tensors, config = edited(converted, "gemma3", tmp_path, drop_keys=["gemma3.rope.scaling.factor"])
    [layers] = [w for w in compare_with_config(metadata, tensors, config) if w.code == "gguf_layers_differ"]
    assert layers.layers == [5]


def test_llama_4_with_a_zero_window_rotates_every_layer_but_the_last(
    converted: Mapping[str, Any], tmp_path: Path
) -> None:
    metadata, tensors, config = edited(
        converted, "llama4", tmp_path, set_keys={"llama4.attention.sliding_window": (U32, 0)}
    )
    layers = resolve_config(config_from_gguf(metadata, tensors).config).layers
    assert [layer.method is None for layer in layers] == [False] * 7 + [True]
    assert "gguf_layers_differ" in codes(compare_with_config(metadata, tensors, config))


def test_rope_freqs_no_llama3_setting_gives_is_named_as_present(converted: Mapping[str, Any], tmp_path: Path) -> None:
    """The tensor is in the file but fits no llama3 band: the warning says so (was: "no rope_freqs.weight")."""
    path, _ = converted["llama3"]
    factors = np.array(header(path)[1]["rope_freqs.weight"], dtype=np.float32)
    factors[1] = 2.5  # a high-frequency pair scaled
    metadata, tensors, config = edited(converted, "llama3", tmp_path, set_tensors={"rope_freqs.weight": factors})
    warnings = compare_with_config(metadata, tensors, config)
    [factor] = [w for w in warnings if w.code == "gguf_field_dropped" and w.evidence["field"] == "rope_scaling.factor"]
    assert "rope_freqs.weight is in the GGUF but does not give it" in factor.message
    assert "no rope_freqs.weight" not in factor.message
