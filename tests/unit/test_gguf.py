"""GGUF files as model configs: GGUFs written by the gguf package's own writer the way llama.cpp's converter writes
them, read header-only, mapped back to a config, resolved per layer and compared with the config they came from."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from posenc_client._gguf import GgufReadError, read_gguf

from posenc.errors import InvalidInput
from posenc.pe.registry import get_method
from posenc.real_models.configs import resolve_config, rope_frequencies
from posenc.real_models.gguf_files import check_metadata, compare_with_config, config_from_gguf
from posenc.real_models.presets import PRESETS
from tests.helpers.gguf_writer import convert

LAYER_FIELDS = ("layer_type", "method", "params", "head_dim", "rotary_dim", "rotary_slice", "pairing",
                "attention_scale", "softmax_scale", "window", "mrope_section")  # fmt: skip


@dataclass(frozen=True)
class Header:
    metadata: dict[str, Any]
    tensors: dict[str, list[float]]


def read_metadata(path: Path) -> Header:
    """The header as the SDK reads it (what the CLI sends to POST /v1/models/gguf)."""
    header = read_gguf(path)
    return Header(header["metadata"], header["tensors"])


def assert_same_layers(config: Mapping[str, Any], other: Mapping[str, Any]) -> None:
    """The same layers, params compared as the method runs them (a param left at its default is that value)."""
    expected, got = resolve_config(config).layers, resolve_config(other).layers
    assert len(got) == len(expected)
    for a, b in zip(expected, got, strict=True):
        for name in LAYER_FIELDS:
            ours, theirs = getattr(a, name), getattr(b, name)
            if name == "params" and a.method is not None and a.method == b.method:
                method = get_method(a.method)
                ours, theirs = method.parse_params(ours).model_dump(), method.parse_params(theirs).model_dump()
            assert theirs == ours, (a.layer, name)


def codes(warnings: Iterable[Any]) -> list[str]:
    return [warning.code for warning in warnings]


# ------------------------------------------------------------------------------------------------ mapping
def test_llama_3_1_converted_resolves_to_the_configs_layers(tmp_path: Path) -> None:
    config = PRESETS["llama-3.1-8b"]
    header = read_metadata(convert(config, tmp_path / "llama.gguf"))
    assert set(header.tensors) == {"rope_freqs.weight"}  # the rope tensor, not the weights
    converted = config_from_gguf(header.metadata, header.tensors)
    assert converted.notes == []
    assert converted.config["rope_scaling"] == config["rope_scaling"]  # llama3 params fitted back from the factors
    assert_same_layers(config, converted.config)
    assert resolve_config(converted.config).layers[0].method == "rope_llama3"
    assert compare_with_config(header.metadata, header.tensors, config) == []


@pytest.mark.parametrize("preset", ["llama-3.2-1b", "qwen3-8b", "mistral-7b-v0.3"])
def test_other_presets_round_trip(tmp_path: Path, preset: str) -> None:
    config = PRESETS[preset]
    header = read_metadata(convert(config, tmp_path / f"{preset}.gguf"))
    converted = config_from_gguf(header.metadata, header.tensors)
    assert_same_layers(config, converted.config)
    assert compare_with_config(header.metadata, header.tensors, config) == []


def test_a_llama3_gguf_with_other_bands_fits_them(tmp_path: Path) -> None:
    config = copy.deepcopy(PRESETS["llama-3.1-8b"])
    config["rope_scaling"] |= {"factor": 16.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0}
    header = read_metadata(convert(config, tmp_path / "llama.gguf"))
    scaling = config_from_gguf(header.metadata, header.tensors).config["rope_scaling"]
    assert (scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]) == (16.0, 2.0, 8.0)
    changed = compare_with_config(header.metadata, header.tensors, PRESETS["llama-3.1-8b"])
    evidence = {w.evidence["field"]: (w.evidence["config"], w.evidence["gguf"]) for w in changed if w.layers == []}
    assert evidence["rope_scaling.factor"] == (8.0, 16.0)
    assert evidence["rope_scaling.low_freq_factor"] == (1.0, 2.0)


def test_factors_no_llama3_setting_gives_are_a_note(tmp_path: Path) -> None:
    header = read_metadata(convert(PRESETS["llama-3.1-8b"], tmp_path / "llama.gguf"))
    factors = list(header.tensors["rope_freqs.weight"])
    factors[3] = 2.5  # a high-frequency pair scaled: no llama3 band layout does that
    converted = config_from_gguf(header.metadata, {"rope_freqs.weight": factors})
    assert codes(converted.notes) == ["gguf_rope_freqs_not_llama3"]
    assert converted.config["rope_scaling"] == {"rope_type": "default"}  # no scaling a config could spell


def test_a_gguf_without_freq_base_or_key_length_takes_llama_cpp_s_values(tmp_path: Path) -> None:
    """Without rope.freq_base llama.cpp rotates at 10000 and without key_length its head is n_embd / n_head, where
    SmolLM3's and Gemma's config classes would fill in 2e6 and 256: the GGUF resolves to llama.cpp's, and the
    missing base is reported against the config."""
    config = PRESETS["smollm3-3b"]
    header = read_metadata(convert(config, tmp_path / "s.gguf", arch="smollm3", drop=["rope.freq_base"]))
    converted = config_from_gguf(header.metadata).config
    layers = resolve_config(converted).layers
    assert {layer.params.get("base") for layer in layers if layer.method is not None} == {10000.0}
    [dropped] = [w for w in compare_with_config(header.metadata, {}, config) if w.code == "gguf_field_dropped"]
    assert (dropped.evidence["field"], dropped.evidence["config"]) == ("rope_theta", 5000000.0)
    gemma = {"general.architecture": "gemma", "gemma.block_count": 2, "gemma.embedding_length": 3072,
             "gemma.attention.head_count": 16, "gemma.rope.freq_base": 10000.0}  # fmt: skip
    assert {layer.head_dim for layer in resolve_config(config_from_gguf(gemma).config).layers} == {3072 // 16}


def test_a_partial_rotation_a_llama_config_cannot_say_is_a_note() -> None:
    """llama.cpp rotates rope.dimension_count features; transformers' Llama rotates the whole head whatever its
    config says: the GGUF's layers are the config's in transformers, and a note says llama.cpp's differ."""
    metadata = {
        "general.architecture": "llama", "llama.block_count": 2, "llama.embedding_length": 512,
        "llama.attention.head_count": 4, "llama.rope.freq_base": 1e4, "llama.rope.dimension_count": 64,
    }  # fmt: skip
    converted = config_from_gguf(metadata)
    [note] = [n for n in converted.notes if n.code == "gguf_partial_rotary_unspellable"]
    assert note.evidence == {"rotary_dim": 64, "gguf_key": "llama.rope.dimension_count"}
    assert {layer.rotary_dim for layer in resolve_config(converted.config).layers} == {128}
    phi3 = {key.replace("llama", "phi3"): value for key, value in metadata.items()}  # Phi-3 reads the fraction
    phi3["general.architecture"] = "phi3"
    assert not [n for n in config_from_gguf(phi3).notes if n.code == "gguf_partial_rotary_unspellable"]


def test_a_gguf_without_scaling_keys_is_unscaled_whatever_a_config_class_would_fill_in() -> None:
    """llama.cpp scales nothing without rope.scaling.* keys; gpt-oss's config class would fill in its YaRN. The
    GGUF's config says outright that it is unscaled, so the comparison with gpt-oss's config sees the drop."""
    metadata = {
        "general.architecture": "gpt-oss", "gpt-oss.block_count": 4, "gpt-oss.embedding_length": 2880,
        "gpt-oss.attention.head_count": 64, "gpt-oss.attention.key_length": 64, "gpt-oss.rope.freq_base": 150000.0,
        "gpt-oss.context_length": 131072,
    }  # fmt: skip
    converted = config_from_gguf(metadata)
    assert {layer.method for layer in resolve_config(converted.config).layers} == {"rope"}
    reference = PRESETS["gpt-oss-20b"] | {
        "num_hidden_layers": 4,
        "layer_types": PRESETS["gpt-oss-20b"]["layer_types"][:4],
    }
    warnings = compare_with_config(metadata, {}, reference)
    assert "rope_scaling.factor" in {w.evidence.get("field") for w in warnings if w.code == "gguf_field_dropped"}
    assert "gguf_layers_differ" in codes(warnings)


# ------------------------------------------------------------------------------------------------ comparing
def test_a_dropped_rope_freqs_tensor_draws_the_warning_with_both_values(tmp_path: Path) -> None:
    config = PRESETS["llama-3.1-8b"]
    header = read_metadata(convert(config, tmp_path / "llama.gguf", rope_freqs=False))
    warnings = compare_with_config(header.metadata, header.tensors, config)
    dropped = {w.evidence["field"]: w for w in warnings if w.code == "gguf_field_dropped"}
    assert set(dropped) == {f"rope_scaling.{name}" for name in
                            ("rope_type", "factor", "low_freq_factor", "high_freq_factor",
                             "original_max_position_embeddings")}  # fmt: skip
    factor = dropped["rope_scaling.factor"]
    assert (factor.evidence["config"], factor.evidence["gguf"], factor.evidence["gguf_key"]) == (
        8.0,
        None,
        "rope_freqs.weight",
    )
    assert "8.0" in factor.message
    [layers] = [w for w in warnings if w.code == "gguf_layers_differ"]
    assert layers.layers == list(range(32))
    assert layers.evidence["config"]["method"] == "rope_llama3"
    assert layers.evidence["gguf"]["method"] == "rope"


YARN_QWEN3 = PRESETS["qwen3-8b"] | {
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    "max_position_embeddings": 131072,
}


# DeepSeek-V3's config.json: the preset's rope fields with its MLA ranks
DEEPSEEK_V3 = PRESETS["deepseek-v3"] | {"kv_lora_rank": 512, "q_lora_rank": 1536}


@pytest.mark.parametrize("absorbed", [True, False], ids=["key_length_mla", "key_length"])
def test_deepseek_v3_converted_resolves_to_the_configs_layers(tmp_path: Path, absorbed: bool) -> None:
    """MLA's head from its GGUF keys (rope.dimension_count rotated after the rest of key_length_mla, or of
    key_length in GGUFs written before llama.cpp absorbed MLA), and YaRN's mscale_all_dim from yarn_log_mul,
    which deepseek2's converter writes as 0.1 · mscale_all_dim. Was a 422: the GGUF's config had mscale_all_dim
    without mscale, and a head of key_length = 576 features."""
    path = convert(DEEPSEEK_V3, tmp_path / "ds.gguf", arch="deepseek2", mla_absorbed=absorbed)
    header = read_metadata(path)
    converted = config_from_gguf(header.metadata, header.tensors).config
    assert (converted["qk_rope_head_dim"], converted["qk_nope_head_dim"], converted["v_head_dim"]) == (64, 128, 128)
    assert converted["rope_scaling"]["mscale_all_dim"] == converted["rope_scaling"]["mscale"] == 1.0
    assert_same_layers(DEEPSEEK_V3, converted)
    assert compare_with_config(header.metadata, header.tensors, DEEPSEEK_V3) == []
    # without beta_fast / beta_slow: no warning, the frequencies are the same (deepseek2's loader runs 32 and 1,
    # the config's values)
    betas = ["rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow"]
    header = read_metadata(convert(DEEPSEEK_V3, tmp_path / "b.gguf", arch="deepseek2", drop=betas))
    assert compare_with_config(header.metadata, header.tensors, DEEPSEEK_V3) == []


def test_an_mscale_llama_cpp_cannot_hold_is_a_change_and_a_layer_difference(tmp_path: Path) -> None:
    """llama.cpp has no key for mscale: for deepseek2 it takes mscale = mscale_all_dim. A config whose mscale
    differs is run differently there: the warning gives both values, and the layers' attention scales differ."""
    config = copy.deepcopy(DEEPSEEK_V3)
    config["rope_scaling"] |= {"mscale": 1.0, "mscale_all_dim": 0.707}
    header = read_metadata(convert(config, tmp_path / "ds.gguf", arch="deepseek2"))
    warnings = compare_with_config(header.metadata, header.tensors, config)
    [changed] = [w for w in warnings if w.code == "gguf_field_changed"]
    assert changed.evidence["field"] == "rope_scaling.mscale"
    assert changed.evidence["config"] == 1.0
    assert changed.evidence["gguf"] == pytest.approx(0.707, rel=1e-6)
    assert changed.evidence["gguf_key"] == "deepseek2.rope.scaling.yarn_log_multiplier"
    assert "gguf_layers_differ" in codes(warnings)


def test_gemma_3_without_swa_keys_resolves_as_llama_cpp_runs_it(tmp_path: Path) -> None:
    """Gemma 3's converter writes neither rope.freq_base_swa nor the sliding pattern: llama.cpp's gemma3 loader
    takes every 6th layer global and the sliding layers at base 10000, unscaled. Mapped so, the GGUF resolves to
    the config's layers (was: a dropped rope_local_base_freq and 29 layers read as global); a config whose local
    base is not 10000 draws the change, naming the default."""
    text = PRESETS["gemma-3-4b"]["text_config"]
    header = read_metadata(convert(text, tmp_path / "gemma.gguf", arch="gemma3"))
    assert "gemma3.rope.freq_base_swa" not in header.metadata
    assert "gemma3.attention.sliding_window_pattern" not in header.metadata
    converted = config_from_gguf(header.metadata).config
    assert_same_layers(PRESETS["gemma-3-4b"], converted)
    assert compare_with_config(header.metadata, header.tensors, PRESETS["gemma-3-4b"]) == []
    other = {"model_type": "gemma3", "text_config": text | {"rope_local_base_freq": 20000.0}}
    header = read_metadata(convert(other["text_config"], tmp_path / "other.gguf", arch="gemma3"))
    warnings = compare_with_config(header.metadata, header.tensors, other)
    [changed] = [w for w in warnings if w.code == "gguf_field_changed"]
    assert (changed.evidence["config"], changed.evidence["gguf"]) == (20000.0, 10000.0)
    assert "llama.cpp's gemma3 default" in changed.message
    [differ] = [w for w in warnings if w.code == "gguf_layers_differ"]
    assert len(differ.layers) == 29  # the sliding layers: 34 less every 6th


@pytest.mark.parametrize(
    ("preset", "arch", "nope"),
    [("smollm3-3b", "smollm3", 9), ("llama-4-scout-17b-16e", "llama4", 12)],
)
def test_nope_layers_no_key_sets_resolve_as_llama_cpp_runs_them(
    tmp_path: Path, preset: str, arch: str, nope: int
) -> None:
    """llama.cpp's smollm3 and llama4 graphs skip RoPE on every 4th layer (n_no_rope_layer_step = 4, no GGUF
    key), and Llama 4's also chunks attention by 8192 and scales queries by its temperature: mapped so, the GGUF
    resolves to the config's layers (was: every layer rotated, 9 and 12 layers differing)."""
    config = PRESETS[preset]
    text = config.get("text_config", config)
    header = read_metadata(convert(text, tmp_path / f"{arch}.gguf", arch=arch))
    converted = config_from_gguf(header.metadata, header.tensors).config
    assert converted["no_rope_layer_interval"] == 4
    assert sum(layer.method is None for layer in resolve_config(converted).layers) == nope
    assert_same_layers(config, converted)
    assert compare_with_config(header.metadata, header.tensors, config) == []


def test_llama_4_with_a_zero_window_has_one_nope_layer_the_last() -> None:
    """llama.cpp's llama4 loader: attention.sliding_window = 0 means no chunks and n_no_rope_layer_step =
    n_layer, so that the last layer alone skips RoPE ((il + 1) % step == 0)."""
    metadata = {
        "general.architecture": "llama4", "llama4.block_count": 8, "llama4.embedding_length": 512,
        "llama4.attention.head_count": 4, "llama4.rope.freq_base": 5e5, "llama4.attention.sliding_window": 0,
    }  # fmt: skip
    converted = config_from_gguf(metadata).config
    assert converted["no_rope_layer_interval"] == 8
    assert "attention_chunk_size" not in converted
    assert [layer.method for layer in resolve_config(converted).layers] == ["rope"] * 7 + [None]


def test_yarn_log_mul_is_mscale_all_dim_itself_outside_deepseek2() -> None:
    """Only deepseek2's converter writes a tenth of mscale_all_dim; llama.cpp reads the key as mscale_all_dim
    elsewhere (Mistral's converter writes 1.0 or 0.0), with mscale 1."""
    metadata = {
        "general.architecture": "mistral3", "mistral3.block_count": 2, "mistral3.embedding_length": 256,
        "mistral3.attention.head_count": 4, "mistral3.rope.freq_base": 1e6, "mistral3.rope.scaling.type": "yarn",
        "mistral3.rope.scaling.factor": 16.0, "mistral3.rope.scaling.original_context_length": 16384,
        "mistral3.rope.scaling.yarn_log_multiplier": 1.0,
    }  # fmt: skip
    scaling = config_from_gguf(metadata).config["rope_scaling"]
    assert (scaling["mscale_all_dim"], scaling["mscale"]) == (1.0, 1.0)


def test_a_dropped_yarn_factor_draws_the_warning(tmp_path: Path) -> None:
    header = read_metadata(convert(YARN_QWEN3, tmp_path / "qwen.gguf", drop=["rope.scaling.factor"], arch="qwen3"))
    converted = config_from_gguf(header.metadata, header.tensors)
    assert codes(converted.notes) == ["gguf_scaling_without_factor"]
    warnings = compare_with_config(header.metadata, header.tensors, YARN_QWEN3)
    [dropped] = [w for w in warnings if w.code == "gguf_field_dropped"]
    assert dropped.evidence == {
        "field": "rope_scaling.factor",
        "config": 4.0,
        "gguf": None,
        "gguf_key": "qwen3.rope.scaling.factor",
    }
    [layers] = [w for w in warnings if w.code == "gguf_layers_differ"]
    assert layers.evidence["config"]["params"]["factor"] == 4.0
    assert layers.evidence["gguf"]["params"]["factor"] == 1.0
    # with the factor, the YaRN GGUF matches its config
    whole = read_metadata(convert(YARN_QWEN3, tmp_path / "whole.gguf", arch="qwen3"))
    assert compare_with_config(whole.metadata, whole.tensors, YARN_QWEN3) == []


def test_a_changed_freq_base_is_a_warning_with_both_values(tmp_path: Path) -> None:
    config = PRESETS["qwen3-8b"]
    path = convert(config, tmp_path / "q.gguf", drop=["rope.freq_base"], extra={"qwen3.rope.freq_base": 10000.0},
                   arch="qwen3")  # fmt: skip
    header = read_metadata(path)
    warnings = compare_with_config(header.metadata, header.tensors, config)
    [changed] = [w for w in warnings if w.code == "gguf_field_changed"]
    assert changed.evidence == {
        "field": "rope_theta",
        "config": 1000000,
        "gguf": 10000.0,
        "gguf_key": "qwen3.rope.freq_base",
    }
    assert "gguf_layers_differ" in codes(warnings)


def test_a_renamed_freq_base_is_a_warning_naming_both_keys(tmp_path: Path) -> None:
    config = PRESETS["qwen3-8b"]
    path = convert(config, tmp_path / "q.gguf", drop=["rope.freq_base"], extra={"qwen2.rope.freq_base": 1000000.0},
                   arch="qwen3")  # fmt: skip
    header = read_metadata(path)
    warnings = compare_with_config(header.metadata, header.tensors, config)
    [renamed] = [w for w in warnings if w.code == "gguf_field_renamed"]
    assert renamed.evidence["gguf_key"] == "qwen3.rope.freq_base"
    assert renamed.evidence["gguf_key_found"] == "qwen2.rope.freq_base"
    assert (renamed.evidence["config"], renamed.evidence["gguf"]) == (1000000, 1000000.0)
    # llama.cpp reads only qwen3.rope.freq_base: without it the GGUF's layers use the default base
    [layers] = [w for w in warnings if w.code == "gguf_layers_differ"]
    assert layers.evidence["gguf"]["params"]["base"] == 10000.0


def test_the_legacy_linear_scale_key_is_llama_cpp_s_fallback(tmp_path: Path) -> None:
    """load_hparams reads rope.scale_linear when rope.scaling.factor is absent: the GGUF scales by it (was: read
    as a rename, the layers unscaled, 4x off)."""
    config = PRESETS["qwen3-8b"] | {"rope_scaling": {"rope_type": "linear", "factor": 4.0}}
    path = convert(config, tmp_path / "q.gguf", drop=["rope.scaling.factor"], extra={"qwen3.rope.scale_linear": 4.0},
                   arch="qwen3")  # fmt: skip
    header = read_metadata(path)
    converted = config_from_gguf(header.metadata, header.tensors)
    assert converted.config["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}
    assert converted.origins["rope_scaling.factor"] == "qwen3.rope.scale_linear"
    assert compare_with_config(header.metadata, header.tensors, config) == []


def test_sliding_window_patterns_map_to_layer_types() -> None:
    base = {"general.architecture": "gemma3", "gemma3.block_count": 12, "gemma3.embedding_length": 2560,
            "gemma3.attention.head_count": 8, "gemma3.attention.key_length": 256, "gemma3.context_length": 131072,
            "gemma3.rope.freq_base": 1e6, "gemma3.attention.sliding_window": 1024}  # fmt: skip
    by_period = config_from_gguf(base | {"gemma3.attention.sliding_window_pattern": 6}).config
    flags = [(index + 1) % 6 != 0 for index in range(12)]
    by_flags = config_from_gguf(base | {"gemma3.attention.sliding_window_pattern": flags}).config
    types = [layer.layer_type for layer in resolve_config(by_period).layers]
    assert types == [layer.layer_type for layer in resolve_config(by_flags).layers]
    assert types[:6] == ["sliding_attention"] * 5 + ["full_attention"]
    assert resolve_config(by_flags).layers[0].window == 1024


# ------------------------------------------------------------------------------------------------ reading
def test_the_reader_agrees_with_the_packages_own_reader(tmp_path: Path) -> None:
    path = convert(PRESETS["llama-3.1-8b"], tmp_path / "llama.gguf", vocabulary=300)
    header = read_metadata(path)
    reference = gguf.GGUFReader(path)
    for key, field in reference.fields.items():
        if key.startswith("GGUF."):
            continue
        if key.startswith("tokenizer."):
            assert key in header.metadata  # 300 tokens: short enough to keep
            continue
        value = field.contents()
        expected = pytest.approx(value) if isinstance(value, float) else value
        assert header.metadata[key] == expected, key
    [tensor] = [t for t in reference.tensors if t.name == "rope_freqs.weight"]
    assert header.tensors["rope_freqs.weight"] == [float(v) for v in tensor.data]


def sparse_gguf(path: Path, huge_bytes: int) -> Path:
    """A GGUF whose first tensor declares ``huge_bytes`` of data (the file is sparse there) and whose rope_freqs
    tensor lies after it, with a long vocabulary in the header."""
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(2)
    writer.add_token_list([f"t{i}" for i in range(50_000)])
    writer.add_tensor_info("token_embd.weight", [huge_bytes // 4], np.dtype(np.float32), huge_bytes)
    writer.add_tensor_info("rope_freqs.weight", [4], np.dtype(np.float32), 16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    start = -(-path.stat().st_size // 32) * 32
    with path.open("r+b") as file:
        file.truncate(start + huge_bytes + 16)
        file.seek(start + huge_bytes)  # the rope tensor's offset: after the huge one (aligned: huge_bytes % 32 == 0)
        file.write(np.array([1, 2, 3, 4], dtype=np.float32).tobytes())
    return path


def bytes_read() -> int:
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"])


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts bytes read through /proc/self/io")
def test_a_huge_file_is_read_fast_and_little(tmp_path: Path) -> None:
    path = sparse_gguf(tmp_path / "huge.gguf", 8 << 30)  # 8 GiB of declared weights
    assert path.stat().st_size > 8 << 30
    before = bytes_read()
    result = read_gguf(path)
    read_bytes = bytes_read() - before
    assert result["tensors"] == {"rope_freqs.weight": [1.0, 2.0, 3.0, 4.0]}
    assert read_bytes < 4 << 20, read_bytes  # the header (a 50k-token vocabulary skipped) and 16 bytes


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: b"GGML" + data[4:], "not a GGUF file"),
        (lambda data: data[:4] + (1).to_bytes(4, "little") + data[8:], "version 1"),
        (lambda data: data[:200], "truncated|past the end of the file"),
        (lambda data: data[:16] + (1 << 40).to_bytes(8, "little") + data[24:], "not a model's"),
    ],
)
def test_a_damaged_file_is_a_read_error(tmp_path: Path, damage: Callable[[bytes], bytes], message: str) -> None:
    path = convert(PRESETS["llama-3.1-8b"], tmp_path / "llama.gguf")
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(GgufReadError, match=message):
        read_gguf(path)


def test_a_string_count_past_the_end_of_the_file_is_refused(tmp_path: Path) -> None:
    path = convert(PRESETS["llama-3.1-8b"], tmp_path / "llama.gguf")
    data = bytearray(path.read_bytes())
    first_key_length = 24  # after magic, version and the two counts
    data[first_key_length : first_key_length + 8] = (1 << 50).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(GgufReadError, match="past the end of the file"):
        read_gguf(path)


# ------------------------------------------------------------------------------------------------ bounds
@pytest.mark.parametrize(
    ("metadata", "tensors", "loc"),
    [
        ({"llama.x": list(range(9000))}, {}, ("metadata", "llama.x")),
        ({"k": "x" * 5000}, {}, ("metadata", "k")),
        ({"k": {"nested": 1}}, {}, ("metadata", "k")),
        ({f"k{i}": list(range(8000)) for i in range(9)}, {}, ("metadata",)),
        ({}, {"token_embd.weight": [1.0]}, ("tensors", "token_embd.weight")),
        ({}, {"rope_freqs.weight": [1.0] * 5000}, ("tensors", "rope_freqs.weight")),
    ],
)
def test_metadata_over_the_bounds_is_refused_at_its_key(
    metadata: dict[str, Any], tensors: dict[str, list[float]], loc: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidInput) as error:
        check_metadata(metadata, tensors)
    assert error.value.loc == loc


def test_metadata_without_an_architecture_or_with_a_bad_value_is_refused_at_its_key() -> None:
    with pytest.raises(InvalidInput) as error:
        config_from_gguf({"llama.block_count": 2})
    assert error.value.loc == ("metadata", "general.architecture")
    with pytest.raises(InvalidInput) as error:
        config_from_gguf({"general.architecture": "llama", "llama.rope.freq_base": "high"})
    assert error.value.loc == ("metadata", "llama.rope.freq_base")
    with pytest.raises(InvalidInput) as error:
        config_from_gguf({"general.architecture": "llama", "llama.rope.scaling.type": "ntk"})
    assert error.value.loc == ("metadata", "llama.rope.scaling.type")


def test_kimi_k2_s_betas_deepseek2_does_not_read_are_a_warning(tmp_path: Path) -> None:
    """Kimi K2's YaRN has beta_fast = 1; its GGUF (deepseek2) holds the key, but only the mistral3 and grok loaders
    read it: llama.cpp runs 32, and the pairs between the correction bounds turn at other frequencies."""
    config = PRESETS["kimi-k2"]
    header = read_metadata(convert(config, tmp_path / "kimi.gguf", arch="deepseek2"))
    assert header.metadata["deepseek2.rope.scaling.yarn_beta_fast"] == 1.0
    converted = config_from_gguf(header.metadata, header.tensors)
    assert converted.ignored == {"beta_fast": ("deepseek2.rope.scaling.yarn_beta_fast", 1.0, 32.0)}
    warnings = compare_with_config(header.metadata, header.tensors, config)
    assert codes(warnings) == ["gguf_field_ignored", "gguf_layers_differ"]
    ours = resolve_config(config).layers[0]
    theirs = resolve_config(converted.config).layers[0]
    assert (ours.params["beta_fast"], theirs.params["beta_fast"]) == (1.0, 32.0)
    ratio = (
        rope_frequencies(theirs.method or "", theirs.params, theirs.rotary_dim).inv_freq
        / rope_frequencies(ours.method or "", ours.params, ours.rotary_dim).inv_freq
    )
    changed = (ratio - 1).abs() > 1e-6  # the pairs between the correction bounds that beta_fast = 32 moves
    assert bool(changed.any())
    assert bool((ratio[changed] < 1).all())  # turned slower: interpolated where Kimi's own run extrapolates
