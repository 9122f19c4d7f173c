"""Engine notes: where other engines are known to compute a config differently, attached by the pattern of the
resolved layers (never by name), with Hugging Face's numbers (checked against transformers here) and the public
threads that show the difference."""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

import pytest
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from posenc.real_models.configs import resolve_config
from posenc.real_models.engine_notes import engine_notes
from posenc.real_models.presets import PRESETS

logging.getLogger("transformers").setLevel(logging.ERROR)


def notes(config: dict[str, Any]) -> dict[str, Any]:
    return {note.code: note for note in engine_notes(config, resolve_config(config))}


# (code, a preset with the pattern, the same model without it)
def _unscaled_gpt_oss() -> dict[str, Any]:
    config = copy.deepcopy(PRESETS["gpt-oss-20b"])
    config["rope_scaling"] = {"rope_type": "default"}  # (left out, the config class fills in its YaRN)
    return config


def _deepseek_without_mscale() -> dict[str, Any]:
    config = copy.deepcopy(PRESETS["deepseek-v3"])
    config["rope_scaling"] = None
    return config


def _gemma_one_rotation() -> dict[str, Any]:
    config = copy.deepcopy(PRESETS["gemma-3-4b"])
    text = config.get("text_config", config)
    text.pop("rope_scaling", None)
    text["rope_local_base_freq"] = text["rope_theta"]
    return config


CASES = [
    ("cos_sin_scale", PRESETS["gpt-oss-20b"], _unscaled_gpt_oss()),
    ("derived_max_length", PRESETS["deepseek-v3"], _deepseek_without_mscale()),
    ("mla_mscale_softmax", PRESETS["deepseek-v3"], _deepseek_without_mscale()),
    ("sliding_layers_own_rotation", PRESETS["gemma-3-4b"], _gemma_one_rotation()),
    ("nested_rope_fields", PRESETS["qwen2.5-vl-7b"], PRESETS["qwen2.5-7b"]),
]


@pytest.mark.parametrize(("code", "with_pattern", "without"), CASES, ids=[case[0] for case in CASES])
def test_a_note_comes_with_its_pattern_and_not_without_it(
    code: str, with_pattern: dict[str, Any], without: dict[str, Any]
) -> None:
    found = notes(with_pattern)
    assert code in found
    assert code not in notes(without)
    note = found[code]
    assert note.sources
    assert all(re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/(pull|issues)/\d+", url) for url in note.sources)
    assert note.huggingface
    assert note.elsewhere


def test_the_cos_sin_note_states_the_factor_transformers_computes() -> None:
    config = PRESETS["gpt-oss-20b"]
    text = CONFIG_MAPPING[config["model_type"]](**{k: v for k, v in config.items() if k != "model_type"})
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

    scaling = float(GptOssRotaryEmbedding(text).attention_scaling)
    note = notes(config)["cos_sin_scale"]
    assert f"{scaling:.9g}" in note.huggingface
    assert note.layers == list(range(config["num_hidden_layers"]))


def test_the_mscale_note_states_the_softmax_scale_transformers_computes() -> None:
    config = PRESETS["deepseek-v3"]
    text = CONFIG_MAPPING[config["model_type"]](**{k: v for k, v in config.items() if k != "model_type"})
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    scaling = float(DeepseekV3Attention(text, layer_idx=0).scaling)
    assert f"{scaling:.9g}" in notes(config)["mla_mscale_softmax"].huggingface


def test_plain_models_get_no_notes() -> None:
    for name in ("qwen3-8b", "mistral-7b-v0.3", "llama-3.1-8b"):
        assert notes(PRESETS[name]) == {}, name
