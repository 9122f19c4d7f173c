"""Qwen2.5-VL and Qwen3-VL configs whose rope type scales RoPE (linear, dynamic, YaRN, LongRoPE), and Qwen3-VL
sections that do not match the rotated pairs, resolved and rotated against transformers 5.23's own rotary
embeddings (Qwen2_5_VLRotaryEmbedding, Qwen3VLTextRotaryEmbedding): the (3, B, N) positions times the scaled
inv_freq, attention scaling on cos and sin, recomposed by the sections."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import rotary_tables
from posenc.pe.appliers import grid_positions
from posenc.real_models.configs import layer_frequencies, resolve_config
from tests.helpers.transformers_rope import hf_rope

BASE: dict[str, Any] = {"hidden_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2}
LENGTH = 256  # max_position_embeddings: the test positions run far past it
QWEN2_5_VL = {"model_type": "qwen2_5_vl", **BASE, "max_position_embeddings": LENGTH}  # head 128
QWEN3_VL = {"model_type": "qwen3_vl_text", **BASE, "head_dim": 128, "max_position_embeddings": LENGTH}
QWEN2_5_SECTIONS = {"mrope_section": [16, 24, 24]}
QWEN3_SECTIONS = {"mrope_section": [24, 20, 20], "mrope_interleaved": True}
LONG_FACTORS = {"short_factor": [1.0] * 64, "long_factor": [1.0 + k / 16 for k in range(64)]}
SCALINGS: dict[str, dict[str, Any]] = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": LENGTH},
    "yarn_mscale": {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.5},
    "longrope": {"rope_type": "longrope", **LONG_FACTORS, "original_max_position_embeddings": 64},
}
TABLE_METHODS = {  # the registered method each rope type names, whose table M-RoPE turns
    "linear": "rope_linear",
    "dynamic": "rope_dynamic_ntk",
    "yarn": "rope_yarn",
    "yarn_mscale": "rope_yarn",
    "longrope": "rope_longrope",
}
MODELS: dict[str, tuple[dict[str, Any], float, dict[str, Any]]] = {
    "qwen2_5_vl": (QWEN2_5_VL, 1e6, QWEN2_5_SECTIONS),
    "qwen3_vl_text": (QWEN3_VL, 5e6, QWEN3_SECTIONS),
}


def positions() -> torch.Tensor:
    """(N, 3) (t, h, w) ids as get_rope_index builds them: text, a 3-frame video grid, text far on."""
    text = torch.arange(5)[:, None].expand(-1, 3)  # (5, 3): t = h = w
    video = grid_positions((3, 4, 5)) * torch.tensor([50, 1, 1]) + 5  # (60, 3)
    tail = torch.arange(2000, 2006)[:, None].expand(-1, 3)  # (6, 3)
    return torch.cat((text, video, tail))  # (71, 3)


def compare(config: dict[str, Any]) -> list[str]:
    """Every rotating layer's cos and sin, ours (float64) against the model's rotary embedding at the same (t, h, w)
    ids; returns the warning codes of our resolution."""
    resolved = resolve_config(config)
    found = hf_rope(config)
    assert found.rotary is not None
    ids = positions()  # (N, 3)
    seq_len = int(ids.max()) + 1
    x = torch.zeros(1, dtype=torch.float32)
    hf_cos, hf_sin = found.rotary(x, ids.T[:, None, :])  # ids (3, 1, N) -> (1, N, D) each
    for layer in resolved.layers:
        assert layer.method == "mrope"
        freqs = layer_frequencies(layer, seq_len)
        assert freqs.pair_axis is not None
        torch.testing.assert_close(freqs.pair_axis, found.pair_axis(layer.layer), rtol=0, atol=0)
        cos, sin = rotary_tables(freqs, ids, torch.float64)  # (N, D/2), attention scale included
        pairs = cos.shape[-1]
        # HF forms ω and p·ω in float32: at p ≈ 2000 the angle is off by up to ~2e-4 rad; a wrong axis, table or
        # attention factor is off by O(0.1) at these positions
        torch.testing.assert_close(cos, hf_cos[0, :, :pairs].double(), rtol=0, atol=1e-3)
        torch.testing.assert_close(sin, hf_sin[0, :, :pairs].double(), rtol=0, atol=1e-3)
    return [warning.code for warning in resolved.warnings]


@pytest.mark.parametrize("scaling", sorted(SCALINGS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_scaled_mrope_rotates_as_transformers(model: str, scaling: str) -> None:
    fields, theta, sections = MODELS[model]
    config = {**fields, "rope_parameters": {**SCALINGS[scaling], "rope_theta": theta, **sections}}
    codes = compare(config)
    layer = resolve_config(config).layers[0]
    assert layer.params["scaling"]["method"] == TABLE_METHODS[scaling]
    assert layer.mrope_section == sections["mrope_section"]
    assert ("dynamic_scaling_stale_cache" in codes) == (scaling in ("dynamic", "longrope"))


@pytest.mark.parametrize("model", sorted(MODELS))
def test_scaled_mrope_without_sections_in_the_dict_takes_the_class_sections(model: str) -> None:
    """The rotary class splits any rope type's frequencies by its default sections (and Qwen3-VL interleaves)."""
    fields, theta, sections = MODELS[model]
    config = {**fields, "rope_parameters": {**SCALINGS["yarn"], "rope_theta": theta}}
    compare(config)
    layer = resolve_config(config).layers[0]
    assert layer.params["layout"] == ("interleaved" if "mrope_interleaved" in sections else "chunked")


def test_v4_rope_scaling_spelling_with_a_type_key() -> None:
    config = {**QWEN2_5_VL, "rope_theta": 1e6, "rope_scaling": {"type": "linear", "factor": 2.0, **QWEN2_5_SECTIONS}}
    compare(config)


@pytest.mark.parametrize(
    ("head_dim", "section", "placed"),
    [(64, [16, 24, 24], [11, 11, 10]), (64, [24, 20, 20], [11, 11, 10]), (256, [24, 20, 20], [88, 20, 20])],
)
@pytest.mark.parametrize("scaling", ["default", "yarn"])
def test_qwen3_vl_sections_that_do_not_match_the_pairs_run_as_transformers(
    head_dim: int, section: list[int], placed: list[int], scaling: str
) -> None:
    rope = {"rope_type": "default"} if scaling == "default" else SCALINGS["yarn"]
    config = {
        **QWEN3_VL,
        "head_dim": head_dim,
        "rope_parameters": {**rope, "rope_theta": 5e6, "mrope_section": section, "mrope_interleaved": True},
    }
    codes = compare(config)
    assert "mrope_sections_truncated" in codes
    warning = next(w for w in resolve_config(config).warnings if w.code == "mrope_sections_truncated")
    assert warning.evidence["placed"] == placed
    assert str(placed) in warning.message


def test_qwen2_5_vl_sections_that_do_not_sum_to_the_pairs_are_refused() -> None:
    """Chunked sections that do not cover the rotated pairs fail Qwen2.5-VL's split of cos and sin."""
    config = {**QWEN2_5_VL, "rope_parameters": {**SCALINGS["linear"], "rope_theta": 1e6, "mrope_section": [16, 24, 20]}}
    with pytest.raises(InvalidInput, match="must sum to rotary_dim / 2 = 64") as refused:
        resolve_config(config)
    assert refused.value.loc == ("rope_parameters", "mrope_section")
    with pytest.raises(RuntimeError):
        hf_rope(config)
