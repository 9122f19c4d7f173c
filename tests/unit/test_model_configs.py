"""Model configs resolved into per-layer rotary setups, checked against Hugging Face transformers' own code (a
pinned test-only dependency): for every preset and for configs written in each dialect, the same inverse
frequencies (to float32 rounding), attention scales, softmax scales, NoPE layers and rotated q/k; and each
warning raised by a config with the bug and absent from the fixed one."""

from __future__ import annotations

import copy
import importlib
import logging
import random
from typing import Any

import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers.integrations.heterogeneity.configuration_utils import AmbiguousGlobalPerLayerAttributeError
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from posenc.compute import prepare
from posenc.errors import FieldErrors, InvalidInput
from posenc.real_models.configs import (
    MODEL_TYPE_DEFAULTS,
    WHOLE_HEAD_MODEL_TYPES,
    LayerRope,
    convert_config,
    resolve_config,
    text_config,
)
from posenc.real_models.model_types import RECORDS, model_type_record
from posenc.real_models.presets import PRESETS
from posenc.schemas.compute import RotaryRequest

FLOAT32_POW = 2e-6  # relative: float32 rounding of transformers' θ^(2k/d), see the first test
HF_PRESETS = sorted(name for name, config in PRESETS.items() if "model_type" in config)  # transformers configs
DIFFUSERS_PRESETS = sorted(name for name, config in PRESETS.items() if "_class_name" in config)
logging.getLogger("transformers").setLevel(logging.ERROR)  # Llama 4's equal band factors log a warning


def hf_text_config(config: dict[str, Any]) -> Any:
    """The config object transformers builds from a config.json (its text part for multimodal models)."""
    fields = {key: value for key, value in copy.deepcopy(config).items() if key != "model_type"}
    rope = fields.get("rope_scaling") or {}
    if rope.get("type") == "su" and "original_max_position_embeddings" not in rope:
        # transformers 5.23 refuses the published Phi-3 128k files (KeyError: its longrope validation wants
        # original_max_position_embeddings inside the rope dict, where those files keep it at the top level)
        rope["original_max_position_embeddings"] = fields["original_max_position_embeddings"]
    if config["model_type"] == "kimi_k2":  # no transformers config of its own: Kimi K2.5's reads it as deepseek_v3
        return CONFIG_MAPPING["kimi_k25"](text_config=copy.deepcopy(config)).get_text_config()
    return CONFIG_MAPPING[config["model_type"]](**fields).get_text_config()


def hf_module(text: Any) -> Any:
    return importlib.import_module(type(text).__module__.replace("configuration_", "modeling_"))


def hf_rotary_names(text: Any) -> list[str]:
    """The text model's rotary classes: one, or none where the model's attention rotates nothing (Kimi Linear)."""
    return [name for name in dir(hf_module(text)) if name.endswith("RotaryEmbedding") and "Vision" not in name]


def hf_rotary(text: Any) -> Any:
    [name] = hf_rotary_names(text)
    return getattr(hf_module(text), name)(text)


def hf_rope_label(text: Any, layer: int) -> str:
    """DeepSeek-V4's rotary buffers are per regime: the one a layer's attention picks ("" elsewhere: the buffers
    are per layer type, or one set)."""
    module = hf_module(text)
    if not hasattr(module, "DeepseekV4Attention"):
        return ""
    with torch.device("meta"):
        return str(module.DeepseekV4Attention(text, layer_idx=layer).rope_layer_type)


def hf_frequencies(rotary: Any, layer_type: str) -> tuple[torch.Tensor, float]:
    """(inv_freq, attention scaling) of a layer type (or rope regime): per-type buffers (Gemma 3) or the one set."""
    inv_freq = getattr(rotary, f"{layer_type}_inv_freq", None)
    if inv_freq is None:
        return rotary.inv_freq, float(rotary.attention_scaling)
    return inv_freq, float(getattr(rotary, f"{layer_type}_attention_scaling"))


def inline(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "data": t.flatten().tolist()}


def our_inv_freq(layer: LayerRope) -> torch.Tensor:
    from posenc.real_models.configs import layer_frequencies

    return layer_frequencies(layer).inv_freq


# --------------------------------------------------------------------------------------------- presets
@pytest.mark.parametrize("name", HF_PRESETS)
def test_every_preset_has_the_frequencies_and_scales_transformers_computes(name: str) -> None:
    config = PRESETS[name]
    resolved = resolve_config(config)
    text = hf_text_config(config)
    assert len(resolved.layers) == text.num_hidden_layers
    if not hf_rotary_names(text):  # no rotary embedding in the model's code: no layer may rotate
        assert all(layer.method is None for layer in resolved.layers)
        return
    rotary = hf_rotary(text)
    for layer in resolved.layers:
        if layer.method is None:
            continue
        expected, scaling = hf_frequencies(rotary, hf_rope_label(text, layer.layer) or layer.layer_type)
        ours = our_inv_freq(layer)
        assert ours.shape == expected.shape, (name, layer.layer)
        # ours are float64 from the formula, transformers' float32: θ^(2k/d) with the exponent rounded to float32
        # is off by up to ln θ · 2^-24 relative (8e-7 at θ = 5e5)
        torch.testing.assert_close(ours.to(torch.float32), expected.to(torch.float32), rtol=FLOAT32_POW, atol=0)
        assert layer.attention_scale == pytest.approx(scaling, rel=1e-6), (name, layer.layer)


@pytest.mark.parametrize("name", HF_PRESETS)
def test_every_preset_has_the_layer_types_nope_layers_and_softmax_scale_of_transformers(name: str) -> None:
    config = PRESETS[name]
    resolved = resolve_config(config)
    text = hf_text_config(config)
    declared = getattr(text, "layer_types", None)
    if declared is not None:
        assert [layer.layer_type for layer in resolved.layers] == list(declared)
    rope_layers = getattr(text, "no_rope_layers", None) or [1] * text.num_hidden_layers  # 1: the layer rotates
    # linear-attention layers (Qwen3-Next's Gated DeltaNet) have no attention scores to rotate for
    kinds = declared or [""] * text.num_hidden_layers
    rope_layers = [flag and kind != "linear_attention" for flag, kind in zip(rope_layers, kinds, strict=True)]
    if not hf_rotary_names(text):  # Kimi Linear: its attention code has no rotary embedding at all
        rope_layers = [False] * text.num_hidden_layers
    assert [layer.method is not None for layer in resolved.layers] == [bool(flag) for flag in rope_layers]
    module = hf_module(text)
    [attention_name] = [
        n
        for n in dir(module)
        if n.endswith("Attention") and not any(other in n for other in ("Vision", "Audio", "Delta"))
    ]  # (Kimi Linear's KimiDeltaAttention is its linear attention: no scores, no scale)
    with torch.device("meta"):  # the projections of a 671B model's layer are not allocated
        attention = getattr(module, attention_name)(text, layer_idx=0)
    assert resolved.layers[0].softmax_scale == pytest.approx(attention.scaling, rel=1e-9)


def test_some_presets_resolve_to_what_their_model_cards_say() -> None:
    llama4 = resolve_config(PRESETS["llama-4-scout-17b-16e"])
    assert [layer.method is None for layer in llama4.layers[:8]] == [False, False, False, True] * 2
    assert llama4.layers[3].query_temperature is not None
    assert llama4.layers[0].query_temperature is None
    assert {layer.chunk for layer in llama4.layers if layer.method} == {8192}
    assert llama4.layers[0].pairing == "interleaved"
    gemma = resolve_config(PRESETS["gemma-3-4b"])
    assert [layer.layer_type for layer in gemma.layers[:6]] == ["sliding_attention"] * 5 + ["full_attention"]
    assert gemma.layers[0].method == "rope"
    assert gemma.layers[0].params == {"base": 10000.0}
    assert gemma.layers[5].method == "rope_linear"
    assert gemma.layers[5].params["factor"] == 8.0
    assert gemma.layers[0].window == 1024
    assert gemma.layers[5].window is None
    deepseek = resolve_config(PRESETS["deepseek-v3"]).layers[0]
    assert (deepseek.head_dim, deepseek.rotary_slice, deepseek.shared_key_rope) == (192, (128, 192), True)
    qwen_vl = resolve_config(PRESETS["qwen2.5-vl-7b"]).layers[0]
    assert qwen_vl.mrope_section == [16, 24, 24]
    assert (qwen_vl.method, qwen_vl.params["layout"]) == ("mrope", "chunked")
    qwen3_vl = resolve_config(PRESETS["qwen3-vl-8b"]).layers[0]
    assert (qwen3_vl.method, qwen3_vl.params["layout"]) == ("mrope", "interleaved")
    assert not resolve_config(PRESETS["llama-3.1-8b"]).warnings


# --------------------------------------------------------------------------------------------- rotated q/k
def hf_rotate(name: str, layer: LayerRope, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> Any:
    """q and k rotated by transformers' own rotary class and apply function for the preset's model."""
    text = hf_text_config(PRESETS[name])
    module, rotary = hf_module(text), hf_rotary(text)
    ids = positions[None]  # (1, N)
    if name.startswith("llama-4"):
        freqs_cis = rotary(q, ids)  # (1, N, d/2) complex
        q_out, k_out = module.apply_rotary_emb(q.transpose(1, 2), k.transpose(1, 2), freqs_cis)  # (B, N, H, d)
        return q_out.transpose(1, 2), k_out.transpose(1, 2)
    kwargs = {"layer_type": layer.layer_type} if hasattr(rotary, f"{layer.layer_type}_inv_freq") else {}
    cos, sin = rotary(q, ids, **kwargs)  # (1, N, d) each
    start, stop = layer.rotary_slice
    if name.startswith("deepseek"):
        q_rot, k_rot = module.apply_rotary_pos_emb_interleave(q[..., start:stop], k[..., start:stop], cos, sin)
        # transformers returns the rotated pairs de-interleaved (evens, then odds): the same permutation of q and
        # k, so scores are unchanged; posenc rotates the pairs in place. Interleave back to compare.
        q_rot, k_rot = (torch.stack(t.chunk(2, dim=-1), dim=-1).flatten(-2) for t in (q_rot, k_rot))
    else:
        q_rot, k_rot = module.apply_rotary_pos_emb(q[..., start:stop], k[..., start:stop], cos, sin)
    return torch.cat((q[..., :start], q_rot, q[..., stop:]), -1), torch.cat((k[..., :start], k_rot, k[..., stop:]), -1)


@pytest.mark.parametrize(
    ("name", "layer_index"),
    [
        ("llama-3.1-8b", 0),
        ("gemma-3-4b", 0),  # a sliding layer: its own θ, unscaled
        ("gemma-3-4b", 5),  # a global layer: linear factor 8
        ("gpt-oss-20b", 1),
        ("deepseek-v3", 0),  # the last 64 of 192 features, interleaved pairs
        ("llama-4-scout-17b-16e", 0),  # complex (interleaved) rotation
        ("qwen3-8b", 3),
    ],
)
def test_rotary_with_a_config_and_a_layer_rotates_as_transformers_does(name: str, layer_index: int) -> None:
    layer = resolve_config(PRESETS[name]).layers[layer_index]
    generator = torch.Generator().manual_seed(layer_index)
    q = torch.randn(1, 2, 6, layer.head_dim, generator=generator)  # (B, H, N, D)
    k = torch.randn(1, 2, 6, layer.head_dim, generator=generator)
    positions = torch.tensor([0, 1, 7, 300, 2048, 4095])
    request = RotaryRequest.model_validate(
        {
            "config": PRESETS[name],
            "layer": layer_index,
            "q": inline(q),
            "k": inline(k),
            "positions": positions.tolist(),
        }
    )
    result = prepare("rotary", request).run()
    expected_q, expected_k = hf_rotate(name, layer, q, k, positions)
    # transformers forms the angles in float32 (n·ω rounded: ~n·2^-24 rad), posenc in float64
    torch.testing.assert_close(result.tensors["q"], expected_q, rtol=0, atol=5e-4)
    torch.testing.assert_close(result.tensors["k"], expected_k, rtol=0, atol=5e-4)
    assert result.meta["config_layer"]["layer"] == layer_index
    assert result.meta["rotary_slice"] == list(layer.rotary_slice)


def test_rotary_refuses_a_nope_layer_and_a_layer_past_the_end() -> None:
    q = inline(torch.zeros(1, 1, 2, 128))
    for layer, message in [(3, "NoPE"), (36, "at most 35")]:
        request = RotaryRequest.model_validate({"config": PRESETS["smollm3-3b"], "layer": layer, "q": q, "k": q})
        with pytest.raises(InvalidInput, match=message) as raised:
            prepare("rotary", request)
        assert raised.value.loc == ("body", "layer")


# --------------------------------------------------------------------------------------------- dialects
def v5(config: dict[str, Any]) -> dict[str, Any]:
    """The same config in Hugging Face v5's spelling: rope_parameters holding rope_theta."""
    converted = copy.deepcopy(config)
    rope = converted.pop("rope_scaling", None) or {"rope_type": "default"}
    rope = {("rope_type" if key == "type" else key): value for key, value in rope.items()}
    rope["rope_theta"] = converted.pop("rope_theta", 10000.0)
    converted["rope_parameters"] = rope
    return converted


@pytest.mark.parametrize("name", ["llama-3.1-8b", "deepseek-v3", "gpt-oss-20b", "qwen2.5-7b"])
def test_v4_and_v5_spellings_resolve_alike_and_as_transformers_reads_them(name: str) -> None:
    v4_layers = resolve_config(PRESETS[name]).layers
    converted = v5(PRESETS[name])
    v5_layers = resolve_config(converted).layers
    assert [layer.to_json() for layer in v5_layers] == [layer.to_json() for layer in v4_layers]
    rotary = hf_rotary(hf_text_config(converted))
    expected, scaling = hf_frequencies(rotary, v5_layers[0].layer_type)
    torch.testing.assert_close(our_inv_freq(v5_layers[0]).float(), expected.float(), rtol=FLOAT32_POW, atol=0)
    assert v5_layers[0].attention_scale == pytest.approx(scaling, rel=1e-6)


def test_gemma3_per_layer_type_rope_parameters_resolve_like_its_v4_config() -> None:
    text = copy.deepcopy(PRESETS["gemma-3-4b"]["text_config"])
    del text["rope_scaling"], text["rope_local_base_freq"], text["sliding_window_pattern"]
    text["layer_types"] = [layer.layer_type for layer in resolve_config(PRESETS["gemma-3-4b"]).layers]
    text["rope_parameters"] = {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    }
    nested = resolve_config({"model_type": "gemma3", "text_config": text})
    original = resolve_config(PRESETS["gemma-3-4b"])
    assert [layer.to_json() for layer in nested.layers] == [layer.to_json() for layer in original.layers]
    assert not nested.warnings


@pytest.mark.parametrize(
    ("spelling", "method"), [("su", "rope_longrope"), ("deepseek_yarn", "rope_yarn"), ("mrope", "mrope")]
)
def test_vllm_spellings_of_the_rope_type(spelling: str, method: str) -> None:
    rope: dict[str, Any] = {"type": spelling}
    if spelling == "su":
        rope |= {"short_factor": [1.0] * 32, "long_factor": [2.0] * 32}
    if spelling == "deepseek_yarn":
        rope |= {"factor": 4.0, "original_max_position_embeddings": 4096}
    if spelling == "mrope":
        rope |= {"mrope_section": [16, 8, 8]}
    config = {
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_hidden_layers": 2,
        "max_position_embeddings": 16384,
        "original_max_position_embeddings": 4096,
        "rope_scaling": rope,
    }
    assert resolve_config(config).layers[0].method == method


def test_partial_rotation_keys() -> None:
    base = {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 1}
    assert resolve_config({**base, "partial_rotary_factor": 0.5}).layers[0].rotary_dim == 32
    assert resolve_config({**base, "rotary_pct": 0.25}).layers[0].rotary_dim == 16
    assert resolve_config({**base, "rotary_dim": 24}).layers[0].rotary_dim == 24


# --------------------------------------------------------------------------------------------- warnings
BASE = {"hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 4, "max_position_embeddings": 32768}
GEMMA_TYPES = ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]
YARN_DICT = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}
V4 = {"model_type": "deepseek_v4", "num_hidden_layers": 4, "num_attention_heads": 8, "head_dim": 512,
      "qk_rope_head_dim": 64, "compress_ratios": [0, 0, 4, 128]}  # fmt: skip
WARNING_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "rope_theta_outside_rope_parameters": (
        {**BASE, "rope_theta": 500000.0, "rope_parameters": {"rope_type": "default"}},
        {**BASE, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
    ),
    "rope_theta_conflict": (
        {**BASE, "rope_theta": 500000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
        {**BASE, "rope_theta": 500000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
    ),
    # a flat v5 rope_parameters, which Gemma 3's config class never reads (the fix: one dict per layer type)
    "flat_rope_parameters_ignored": (
        {
            **BASE,
            "model_type": "gemma3_text",
            "head_dim": 128,  # (Gemma3TextConfig's default is 256, whatever the hidden size)
            "layer_types": GEMMA_TYPES,
            "sliding_window": 512,
            "rope_parameters": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
        },
        {
            **BASE,
            "model_type": "gemma3_text",
            "layer_types": GEMMA_TYPES,
            "sliding_window": 512,
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        },
    ),
    "partial_rotary_conflict": (
        {
            **BASE,
            "partial_rotary_factor": 0.5,
            "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25},
        },
        {
            **BASE,
            "partial_rotary_factor": 0.5,
            "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5},
        },
    ),
    "static_yarn": (
        {**BASE, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}},
        {**BASE, "rope_scaling": None},
    ),
    "dynamic_scaling_stale_cache": (
        {**BASE, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
        {**BASE, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    ),
    "default_theta_with_scaling": (
        {
            **BASE,
            "max_position_embeddings": 131072,
            "rope_parameters": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
        {
            **BASE,
            "max_position_embeddings": 131072,
            "rope_parameters": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "rope_theta": 5e5,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
    ),
}
# Gemma 3 in v5's per-layer-type form: the sliding layers' dict carrying the global factor (the bug), or default
# with the local θ (published)
WARNING_CASES["sliding_layers_scaled"] = (
    {
        **BASE,
        "model_type": "gemma3_text",
        "layer_types": GEMMA_TYPES,
        "sliding_window": 512,
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 10000.0},
        },
    },
    WARNING_CASES["flat_rope_parameters_ignored"][1],
)
# both dicts: transformers reads rope_scaling (the fix: one of them)
WARNING_CASES["rope_dicts_both"] = (
    {**BASE, "model_type": "llama", "rope_theta": 5e5, "rope_scaling": {"rope_type": "linear", "factor": 4.0},
     "rope_parameters": {**YARN_DICT, "rope_theta": 1e6}},
    {**BASE, "model_type": "llama", "rope_theta": 5e5, "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
)  # fmt: skip
# Gemma 3 (v4) naming its scaling with the older key "type": merged under rope_type "default" (the fix: rope_type)
WARNING_CASES["rope_type_key_ignored"] = (
    {**WARNING_CASES["flat_rope_parameters_ignored"][0], "rope_parameters": None, "rope_theta": 1e6,
     "rope_local_base_freq": 1e4, "rope_scaling": {"type": "linear", "factor": 8.0}},
    {**WARNING_CASES["flat_rope_parameters_ignored"][0], "rope_parameters": None, "rope_theta": 1e6,
     "rope_local_base_freq": 1e4, "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
)  # fmt: skip
# Olmo 3 (v4) at another θ: its config class gives the sliding layers its default 500000 (the fix: a θ per type)
OLMO_TYPES = GEMMA_TYPES
WARNING_CASES["sliding_theta_default"] = (
    {**BASE, "model_type": "olmo3", "layer_types": OLMO_TYPES, "sliding_window": 512, "rope_theta": 2e6,
     "rope_scaling": YARN_DICT},
    {**BASE, "model_type": "olmo3", "layer_types": OLMO_TYPES, "sliding_window": 512,
     "rope_parameters": {"full_attention": {**YARN_DICT, "rope_theta": 2e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 2e6}}},
)  # fmt: skip


@pytest.mark.parametrize("code", sorted(WARNING_CASES))
def test_each_warning_comes_from_the_config_with_the_bug_and_not_from_the_fixed_one(code: str) -> None:
    buggy, fixed = WARNING_CASES[code]
    raised = [warning for warning in resolve_config(buggy).warnings if warning.code == code]
    assert len(raised) == 1, resolve_config(buggy).warnings
    assert raised[0].message
    assert raised[0].evidence
    assert code not in {warning.code for warning in resolve_config(fixed).warnings}


@pytest.mark.parametrize(
    "config",
    [
        WARNING_CASES["flat_rope_parameters_ignored"][0],
        {**WARNING_CASES["flat_rope_parameters_ignored"][0], "rope_local_base_freq": 20000.0},
        {**BASE, "model_type": "olmo3", "layer_types": OLMO_TYPES, "sliding_window": 512,
         "rope_parameters": {**YARN_DICT, "rope_theta": 1e6}},
        {**BASE, "model_type": "olmo3", "layer_types": OLMO_TYPES, "sliding_window": 512, "rope_theta": 2e6,
         "rope_parameters": {**YARN_DICT, "rope_theta": 1e6}},
        WARNING_CASES["sliding_theta_default"][0],
        WARNING_CASES["sliding_theta_default"][1],
        *WARNING_CASES["rope_dicts_both"],
        *WARNING_CASES["rope_type_key_ignored"],
    ],
    ids=["gemma3-flat", "gemma3-flat-local", "olmo3-flat", "olmo3-flat-top-theta", "olmo3-v4", "olmo3-nested",
         "both-dicts", "scaling-only", "gemma3-type-key", "gemma3-rope-type-key"],
)  # fmt: skip
def test_configs_transformers_reads_its_own_way_resolve_as_it_runs_them(config: dict[str, Any]) -> None:
    """Gemma 3's and Olmo 3's config classes key the rope dicts by layer type: a flat v5 dict is not read (plain
    RoPE at the class's θ), Olmo 3's sliding layers take its default θ, not rope_theta, and a v4 dict naming its
    type with the older key merges under rope_type "default"; any config with both dicts is read from
    rope_scaling. Resolved so: each layer's frequencies and attention scale are the ones transformers' rotary
    embedding holds for its type."""
    resolved = resolve_config(config)
    rotary = hf_rotary(hf_text_config(config))
    for layer in resolved.layers:
        expected, scaling = hf_frequencies(rotary, layer.layer_type)
        ours = our_inv_freq(layer).to(torch.float32)
        torch.testing.assert_close(ours, expected.to(torch.float32), rtol=FLOAT32_POW, atol=0)
        assert layer.attention_scale == pytest.approx(scaling, rel=1e-6), layer.layer


def test_the_sliding_warning_names_the_sliding_layers_and_their_evidence() -> None:
    buggy, _ = WARNING_CASES["sliding_layers_scaled"]
    [warning] = [w for w in resolve_config(buggy).warnings if w.code == "sliding_layers_scaled"]
    assert warning.layers == [0, 1, 2]
    assert warning.evidence["factor"] == 8.0


@pytest.mark.parametrize(
    ("model_type", "key"), [(t, k) for t, defaults in MODEL_TYPE_DEFAULTS.items() for k in defaults]
)
def test_every_model_type_default_is_the_one_its_transformers_config_class_fills_in(model_type: str, key: str) -> None:
    text = CONFIG_MAPPING[model_type]().get_text_config()
    if key == "full_attention_interval":  # consumed into layer_types: every n-th layer is full attention
        interval = MODEL_TYPE_DEFAULTS[model_type][key]
        expected = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(12)]
        assert list(text.layer_types[:12]) == expected
        return
    rope = getattr(text, "rope_parameters", None) or {}
    if key == "rope_scaling":  # the class's whole rope dict (gpt-oss: its YaRN), θ checked apart
        assert {k: v for k, v in rope.items() if k != "rope_theta"} == MODEL_TYPE_DEFAULTS[model_type][key]
        return
    if key == "rope_parameters" and "rope_type" in MODEL_TYPE_DEFAULTS[model_type][key]:
        # a flat class dict (Ministral 3, Mistral 4): every key filled here is the class's; the class's others are
        # derived from the config (max_position_embeddings; Mistral 4's partial rotation: its MLA rope part) or
        # the older spelling of rope_type
        filled = MODEL_TYPE_DEFAULTS[model_type][key]
        assert {k: rope[k] for k in filled} == filled
        assert set(rope) - set(filled) <= {"type", "max_position_embeddings", "partial_rotary_factor"}
        return
    if key == "global_head_dim":  # Gemma 4: the full-attention layers' head size, in their per-layer configs
        full = text.layer_types.index("full_attention")
        assert text.per_layer_config[full].head_dim == MODEL_TYPE_DEFAULTS[model_type][key]
        return
    try:
        value = getattr(text, key, None)
    except AmbiguousGlobalPerLayerAttributeError:  # Gemma 4's head_dim: the sliding layers'
        value = getattr(text.per_layer_config[text.layer_types.index("sliding_attention")], key)
    if value is None:  # transformers 5 keeps rope_theta and partial_rotary_factor in the rope dict
        value = rope.get(key, (rope.get("full_attention") or {}).get(key))
    assert value == MODEL_TYPE_DEFAULTS[model_type][key]


def test_every_presets_model_type_has_its_config_class_default_theta() -> None:
    """A config.json without rope_theta runs at its config class's default_theta in transformers: every preset's
    model type whose default is not the generic 10000 has it in MODEL_TYPE_DEFAULTS."""
    types = {
        (config.get("text_config") or config)["model_type"]
        for name, config in PRESETS.items()
        if name in HF_PRESETS and (config.get("text_config") or config)["model_type"] in CONFIG_MAPPING
    }
    for model_type in sorted(types):
        text_class = type(CONFIG_MAPPING[model_type]().get_text_config())  # (Qwen2.5-VL: its text config's)
        default = getattr(text_class, "default_theta", 10000.0)
        if isinstance(default, dict):  # Gemma 3: {"global": ..., "local": ...}
            default = default["global"]
        if default != 10000.0:
            assert MODEL_TYPE_DEFAULTS.get(model_type, {}).get("rope_theta") == default, model_type


# a preset of each model type whose rotary code ignores partial rotation (for the default rope type or for every
# rope type); one without a preset of its own borrows a sibling's config under its own model_type, or is a small
# config of its own
WHOLE_HEAD_PRESETS = {
    model_type_record((config.get("text_config") or config)["model_type"]).model_type: name
    for name, config in PRESETS.items()
    if name in HF_PRESETS and (config.get("text_config") or config)["model_type"] in WHOLE_HEAD_MODEL_TYPES
}
WHOLE_HEAD_SIBLINGS = {"qwen2_vl": "qwen2.5-vl-7b", "deepseek_v2": "deepseek-v3"}
WHOLE_HEAD_RECORDS = sorted(record.model_type for record in RECORDS if record.partial_rotary_ignored is not None)


def _whole_head_preset(model_type: str) -> dict[str, Any]:
    if model_type in WHOLE_HEAD_PRESETS:
        return copy.deepcopy(PRESETS[WHOLE_HEAD_PRESETS[model_type]])
    if model_type not in WHOLE_HEAD_SIBLINGS:  # a small config of the model type, its class filling the rest
        return {"model_type": model_type, "hidden_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2,
                "head_dim": 128, "max_position_embeddings": 8192}  # fmt: skip
    config = copy.deepcopy(PRESETS[WHOLE_HEAD_SIBLINGS[model_type]])
    config["model_type"] = model_type
    return config


def _with_partial_rotary(model_type: str, rope: dict[str, Any]) -> dict[str, Any]:
    """The model type's config with ``rope`` (θ 1e4) and partial_rotary_factor 0.5 at the top level; a model type
    whose rotary reads only rope dicts per layer type (Gemma 4) gets ``rope`` for its full-attention layers."""
    config = _whole_head_preset(model_type)
    text = config.get("text_config", config)
    for key in ("rope_scaling", "rope_parameters"):
        text.pop(key, None)
    text["rope_theta"] = 10000.0
    record = model_type_record(model_type)
    if record.rope_per_layer_type and record.layer_type_rope is None:
        text["rope_parameters"] = {
            "full_attention": {**rope, "rope_theta": 10000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        }
    else:
        text["rope_scaling"] = rope
    text["partial_rotary_factor"] = 0.5
    return config


@pytest.mark.parametrize("model_type", WHOLE_HEAD_RECORDS)
def test_a_partial_rotary_on_default_rope_is_ignored_where_transformers_ignores_it(model_type: str) -> None:
    """Each model type whose record says its rotary code ignores partial rotation rotates the whole head (an MLA
    head: its whole rope part) in transformers when its config asks for default RoPE on half of it: resolved so,
    with partial_rotary_ignored; with a scaled rope type transformers reads the fraction (its frequencies narrow)
    and the warning says it does not fit, unless (Qwen2-VL, Qwen2.5-VL) it ignores it for every rope type."""
    config = _with_partial_rotary(model_type, {"rope_type": "default"})
    resolved = resolve_config(config)
    rotary = hf_rotary(hf_text_config(config))
    for layer in resolved.layers:
        if layer.method is not None:
            expected, _ = hf_frequencies(rotary, layer.layer_type)
            whole = layer.head_dim - layer.rotary_slice[0]  # (MLA: the rope part after qk_nope_head_dim)
            assert our_inv_freq(layer).shape == expected.shape == (whole // 2,)
    assert "partial_rotary_ignored" in {warning.code for warning in resolved.warnings}
    scaled = _with_partial_rotary(model_type, {"rope_type": "linear", "factor": 2.0})
    every_type = WHOLE_HEAD_MODEL_TYPES[model_type]  # the whole head whatever the rope type (Qwen2.5-VL)
    resolved = resolve_config(scaled)
    code = "partial_rotary_ignored" if every_type else "partial_rotary_does_not_fit"
    assert code in {warning.code for warning in resolved.warnings}
    try:
        rotary = hf_rotary(hf_text_config(scaled))
    except StrictDataclassClassValidationError:  # Phi-MoE's class takes LongRoPE's scaling only: warned above
        return
    full = next(
        layer for layer in resolved.layers if layer.method is not None and layer.layer_type != "sliding_attention"
    )
    expected, _ = hf_frequencies(rotary, full.layer_type)
    whole = full.head_dim - full.rotary_slice[0]
    assert our_inv_freq(full).shape == expected.shape == (whole // (2 if every_type else 4),)


def test_a_gemma_config_without_head_dim_rotates_transformers_default_256() -> None:
    """Gemma 3's config class fills head_dim = 256 whatever the hidden size (here 2304 / 8 = 288)."""
    config = {**WARNING_CASES["sliding_layers_scaled"][1], "hidden_size": 2304}
    config.pop("head_dim", None)
    resolved = resolve_config(config)
    assert {layer.head_dim for layer in resolved.layers} == {256}
    assert "model_type_default" in {warning.code for warning in resolved.warnings}
    rotary = hf_rotary(hf_text_config(config))
    for layer in resolved.layers:
        expected, _ = hf_frequencies(rotary, layer.layer_type)
        assert our_inv_freq(layer).shape == expected.shape == (128,)


def test_a_scaling_with_no_rope_theta_anywhere_resolves_to_the_default_base_as_transformers_does() -> None:
    buggy, _ = WARNING_CASES["default_theta_with_scaling"]
    resolved = resolve_config(buggy)
    rotary = hf_rotary(CONFIG_MAPPING["llama"](**copy.deepcopy(buggy)))
    torch.testing.assert_close(our_inv_freq(resolved.layers[0]).float(), rotary.inv_freq, rtol=FLOAT32_POW, atol=0)
    [warning] = [w for w in resolved.warnings if w.code == "default_theta_with_scaling"]
    assert warning.evidence["base"] == resolved.layers[0].params["base"] == 10000.0
    assert (warning.evidence["factor"], warning.evidence["max_position_embeddings"]) == (8.0, 131072)
    # an unscaled dict (factor 1) or plain RoPE at the default base is not the pattern
    for rope in ({"rope_type": "linear", "factor": 1.0}, {"rope_type": "default"}):
        quiet = resolve_config({**BASE, "rope_parameters": rope})
        assert "default_theta_with_scaling" not in {w.code for w in quiet.warnings}
    # LongRoPE (no factor key: its factor lists scale) is scaled
    longrope = {"rope_type": "longrope", "short_factor": [1.0] * 64, "long_factor": [2.0] * 64,
                "original_max_position_embeddings": 4096}  # fmt: skip
    assert "default_theta_with_scaling" in {w.code for w in resolve_config({**BASE, "rope_scaling": longrope}).warnings}


@pytest.mark.parametrize("nesting", [(), ("text_config",)])
@pytest.mark.parametrize("dialect", ["rope_scaling", "rope_parameters"])
def test_mrope_sections_that_do_not_cover_the_rotated_pairs_are_refused_at_the_key(
    nesting: tuple[str, ...], dialect: str
) -> None:
    """2·sum(mrope_section) must be the rotary dim (Qwen2-VL splits cos/sin by the doubled sections): anything else
    is a 422 at the mrope_section the config gave, naming both numbers; once it was a warning and 1D RoPE."""
    text = {**BASE, dialect: {"rope_type": "default", "mrope_section": [16, 24, 16]}}  # 112 of 128 features
    config = {"text_config": text} if nesting else text
    with pytest.raises(InvalidInput) as raised:
        resolve_config(config)
    assert raised.value.loc == (*nesting, dialect, "mrope_section")
    assert "112" in raised.value.msg
    assert "128" in raised.value.msg
    text[dialect]["mrope_section"] = [16, 24, 24]
    assert resolve_config(config).layers[0].mrope_section == [16, 24, 24]


# --------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("config", "loc"),
    [
        ({"hidden_size": 64, "num_hidden_layers": 2}, ("num_attention_heads",)),
        ({**BASE, "rope_scaling": {"rope_type": "quantum"}}, ("rope_scaling", "rope_type")),
        ({"text_config": {"hidden_size": 64, "num_attention_heads": 2}}, ("text_config", "num_hidden_layers")),
        ({**BASE, "layer_types": ["full_attention"]}, ("layer_types",)),
        ({**BASE, "no_rope_layers": [1, 1]}, ("no_rope_layers",)),
        # YaRN params refused together: at the key that breaks the order, or at the rope dict the user sent
        ({**BASE, "rope_scaling": {**YARN_DICT, "beta_fast": 1.0, "beta_slow": 2.0}}, ("rope_scaling", "beta_slow")),
        # a param the method needs that no key gives (no max_position_embeddings to take it from): named in the dict
        (
            {key: value for key, value in BASE.items() if key != "max_position_embeddings"}
            | {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
            ("rope_scaling", "original_max_position_embeddings"),
        ),
        (
            {"text_config": {**BASE, "rope_parameters": {**YARN_DICT, "beta_slow": 64.0}}},
            ("text_config", "rope_parameters", "beta_slow"),
        ),
        (
            {
                **BASE,
                "layer_types": GEMMA_TYPES,
                "rope_parameters": {
                    "sliding_attention": {"rope_type": "default"},
                    "full_attention": {**YARN_DICT, "beta_fast": 0.5},
                },
            },
            ("rope_parameters", "full_attention"),
        ),  # β_slow 1
        # DeepSeek-V4: its layer schedule and compress ratios, as transformers reads them
        ({**V4, "compress_ratios": [0, 0, 4, 8]}, ("compress_ratios", 3)),
        ({**V4, "compress_ratios": [0, 4]}, ("compress_ratios",)),
        ({key: value for key, value in V4.items() if key != "compress_ratios"}, ("compress_ratios",)),
        ({**V4, "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}, ("layer_types", 3)),
        ({**V4, "rope_scaling": {**YARN_DICT, "beta_fast": 0.5, "beta_slow": 2}}, ("rope_scaling", "beta_slow")),
        (
            {**V4, "rope_parameters": {"main": {"rope_type": "default"}, "compress": {"rope_theta": 1e5}}},
            ("rope_parameters", "main", "rope_theta"),
        ),
        ({**V4, "index_head_dim": 32}, ("index_head_dim",)),
    ],
)
def test_configs_that_cannot_be_resolved_name_the_key(config: dict[str, Any], loc: tuple[str, ...]) -> None:
    with pytest.raises((InvalidInput, FieldErrors)) as raised:
        resolve_config(config)
    assert isinstance(raised.value, InvalidInput)
    assert raised.value.loc == loc


# --------------------------------------------------------------------------------------------- conversion
@pytest.mark.parametrize("name", HF_PRESETS)
def test_converting_a_preset_between_dialects_keeps_every_layer(name: str) -> None:
    original = [layer.to_json() for layer in resolve_config(PRESETS[name]).layers]
    as_v5 = convert_config(PRESETS[name], "v5")
    assert "rope_scaling" not in text_config(as_v5)
    assert [layer.to_json() for layer in resolve_config(as_v5).layers] == original
    record = model_type_record(text_config(PRESETS[name]).get("model_type"))
    if record.rope_per_layer_type and record.layer_type_rope is None:  # Gemma 4: no v4 spelling transformers reads
        with pytest.raises(InvalidInput) as refused:
            convert_config(as_v5, "v4")
        assert refused.value.loc == ("to",)
    else:
        back = convert_config(as_v5, "v4")
        assert "rope_parameters" not in text_config(back)
        assert [layer.to_json() for layer in resolve_config(back).layers] == original
    # transformers reads the v5 spelling to the same frequencies (where a layer rotates at all: not Kimi Linear)
    layer = next((layer for layer in resolve_config(as_v5).layers if layer.method is not None), None)
    if layer is None:
        assert not hf_rotary_names(hf_text_config(as_v5))
        return
    text = hf_text_config(as_v5)
    expected, _ = hf_frequencies(hf_rotary(text), hf_rope_label(text, layer.layer) or layer.layer_type)
    torch.testing.assert_close(our_inv_freq(layer).float(), expected.float(), rtol=FLOAT32_POW, atol=0)


def test_converting_a_per_layer_config_v4_cannot_hold_is_refused() -> None:
    config = {**BASE, "layer_types": GEMMA_TYPES, "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
    }}  # fmt: skip
    with pytest.raises(InvalidInput) as raised:
        convert_config(config, "v4")
    assert raised.value.loc == ("rope_parameters", "sliding_attention")


def test_converting_an_olmo3_config_keeps_what_transformers_runs_or_is_refused() -> None:
    """Olmo 3 in v4 at θ = 2e6: transformers gives its sliding layers 500000, so v5 writes 500000 there (and back);
    a v5 sliding θ other than 500000 has no v4 spelling; Gemma 3's flat v5 dict, which transformers never reads,
    converts to neither dialect."""
    v4_config = WARNING_CASES["sliding_theta_default"][0]
    v5_config = convert_config(v4_config, "v5")
    assert v5_config["rope_parameters"]["sliding_attention"] == {"rope_type": "default", "rope_theta": 500000.0}
    for converted in (v5_config, convert_config(v5_config, "v4")):
        assert resolve_config(converted).layers == resolve_config(v4_config).layers
    with pytest.raises(InvalidInput) as raised:
        convert_config(WARNING_CASES["sliding_theta_default"][1], "v4")
    assert raised.value.loc == ("rope_parameters", "sliding_attention", "rope_theta")
    for to in ("v4", "v5"):
        with pytest.raises(InvalidInput) as raised:
            convert_config(WARNING_CASES["flat_rope_parameters_ignored"][0], to)
        assert raised.value.loc == ("rope_parameters",)


def test_converting_a_config_with_both_rope_dicts_keeps_the_one_transformers_reads() -> None:
    both = WARNING_CASES["rope_dicts_both"][0]
    for to in ("v4", "v5"):
        converted = convert_config(both, to)
        assert ("rope_scaling" in converted, "rope_parameters" in converted) == (to == "v4", to == "v5")
        assert resolve_config(converted).layers == resolve_config(both).layers
        assert resolve_config(converted).layers[0].method == "rope_linear"


# --------------------------------------------------------------------------------------------- diffusers
def test_the_diffusers_presets_rotate_as_diffusers_does() -> None:
    from diffusers.models.embeddings import apply_rotary_emb
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    flux = resolve_config(PRESETS["flux.1-dev"])
    assert len(flux.layers) == 19 + 38
    wan = resolve_config(PRESETS["wan2.1-t2v-1.3b"])
    assert len(wan.layers) == 30
    wan_rope = WanRotaryPosEmbed(attention_head_dim=128, patch_size=(1, 2, 2), max_seq_len=1024)
    assert wan.layers[0].params["axes_dims"] == [wan_rope.t_dim, wan_rope.h_dim, wan_rope.w_dim]
    ids = torch.tensor([[0, 0, 0], [0, 3, 5], [1, 2, 7], [0, 40, 60]])  # (N, 3): (index, row, col)
    q = torch.randn(1, 2, 4, 128, generator=torch.Generator().manual_seed(0))  # (B, H, N, D)
    request = RotaryRequest.model_validate(
        {"config": PRESETS["flux.1-dev"], "layer": 0, "q": inline(q), "rotate": "query", "positions": ids.tolist()}
    )
    ours = prepare("rotary", request).run().tensors["q"]
    cos, sin = FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])(ids)  # (N, 128) each
    expected = apply_rotary_emb(q, (cos, sin), use_real=True, use_real_unbind_dim=-1)  # type: ignore[arg-type]
    torch.testing.assert_close(ours, expected, rtol=0, atol=2e-5)  # diffusers forms angles in float32


# --------------------------------------------------------------------------------------------- Llama 4
def test_llama4_query_temperature_is_what_its_attention_does_to_q(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' Llama4TextAttention on a NoPE layer, its projections the identity: the q reaching the
    attention function is x · τ(n)."""
    from transformers.models.llama4 import modeling_llama4

    from posenc.real_models.configs import query_temperature

    text = dict(PRESETS["llama-4-scout-17b-16e"]["text_config"])
    tiny = {**text, "hidden_size": 16, "head_dim": 8, "num_attention_heads": 2, "num_key_value_heads": 2,
            "num_hidden_layers": 4, "floor_scale": 3, "attn_scale": 0.25, "intermediate_size": 8,
            "intermediate_size_mlp": 8, "num_local_experts": 1}  # fmt: skip
    resolved = resolve_config(tiny)
    nope = next(layer for layer in resolved.layers if layer.method is None)
    assert nope.query_temperature is not None
    config = CONFIG_MAPPING["llama4_text"](**{key: value for key, value in tiny.items() if key != "model_type"})
    config._attn_implementation = "eager"
    attention = modeling_llama4.Llama4TextAttention(config, layer_idx=nope.layer).double()
    with torch.no_grad():
        for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
            projection.weight.copy_(torch.eye(16))
    captured: dict[str, torch.Tensor] = {}

    def capture(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *a: Any, **k: Any) -> Any:
        captured["q"] = query  # (B, H, N, d)
        return value.transpose(1, 2), None

    monkeypatch.setattr(modeling_llama4, "eager_attention_forward", capture)
    x = torch.randn(1, 10, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    attention(x, position_embeddings=None, attention_mask=None)
    expected = query_temperature(torch.arange(10), 3, 0.25)  # (N,)
    queries = x.view(1, 10, 2, 8).transpose(1, 2)  # (B, H, N, d)
    # transformers forms τ in float32 (positions.float()): equal to float32 rounding
    torch.testing.assert_close(captured["q"], queries * expected[None, None, :, None], rtol=1.2e-7, atol=0)


@pytest.mark.parametrize("rope_dim", [63, 1025, 1])
def test_an_mla_rotated_part_that_cannot_be_turned_in_pairs_is_refused_naming_its_key(rope_dim: int) -> None:
    """Found by the config fuzzer: an odd qk_rope_head_dim reached YaRN's ramp (d/2 pairs against ceil(d/2)
    frequencies) and the gateway answered 500."""
    config = {**PRESETS["deepseek-v3"], "qk_rope_head_dim": rope_dim}
    with pytest.raises(InvalidInput) as raised:
        resolve_config(config)
    assert raised.value.loc == ("qk_rope_head_dim",)
    nested = {"model_type": "", "text_config": config}
    with pytest.raises(InvalidInput) as raised:
        resolve_config(nested)
    assert raised.value.loc == ("text_config", "qk_rope_head_dim")


def test_one_function_turns_a_config_and_a_layer_into_that_layer_s_setup() -> None:
    from posenc.real_models.configs import config_layer

    gemma = PRESETS["gemma-3-4b"]
    assert config_layer(gemma, 5) == resolve_config(gemma).layers[5]
    with pytest.raises(InvalidInput) as raised:
        config_layer(gemma, 34)
    assert raised.value.loc == ("layer",)
    assert "at most 33" in raised.value.msg
    with pytest.raises(InvalidInput) as raised:
        config_layer({**PRESETS["deepseek-v3"], "qk_rope_head_dim": 3}, 0)
    assert raised.value.loc == ("config", "qk_rope_head_dim")


@pytest.mark.parametrize("to", ["v4", "v5"])
@pytest.mark.parametrize("sliding", [[1, 2], "x", 3])
def test_converting_a_rope_dict_the_resolver_never_read_refuses_a_malformed_one_naming_it(
    to: str, sliding: object
) -> None:
    """Found by the config fuzzer: a per-layer-type dict for a layer type the model does not have resolves (the
    resolver never reads it) but converting walked it as a dict and the gateway answered 500."""
    llama = {key: value for key, value in PRESETS["llama-3.1-8b"].items() if key not in ("rope_scaling", "rope_theta")}
    config = {**llama, "rope_parameters": {"full_attention": {"rope_type": "default"}, "sliding_attention": sliding}}
    assert len(resolve_config(config).layers) == 32
    with pytest.raises(InvalidInput) as raised:
        convert_config(config, to)
    assert raised.value.loc == ("rope_parameters", "sliding_attention")
    with pytest.raises(InvalidInput) as raised:
        convert_config({"text_config": config}, to)
    assert raised.value.loc == ("text_config", "rope_parameters", "sliding_attention")


@pytest.mark.parametrize("to", ["v4", "v5"])
def test_converting_a_rope_dict_whose_unread_rope_type_is_no_string_names_it(to: str) -> None:
    """Found by the config fuzzer: a rope type that is a list, in a dict the resolver never reads, was looked up
    in the spellings table while converting (unhashable: a 500)."""
    llama = {key: value for key, value in PRESETS["llama-3.1-8b"].items() if key not in ("rope_scaling", "rope_theta")}
    unread = {"rope_type": [], "factor": 8.0}
    config = {**llama, "rope_parameters": {"full_attention": {"rope_type": "default"}, "sliding_attention": unread}}
    assert len(resolve_config(config).layers) == 32
    with pytest.raises(InvalidInput) as raised:
        convert_config(config, to)
    assert raised.value.loc == ("rope_parameters", "sliding_attention", "rope_type")


def test_a_hunyuan_config_s_dynamic_rope_with_alpha_is_static_ntk_alpha_as_transformers_computes_it() -> None:
    """HunYuan's checkpoints say rope_type "dynamic" with an alpha: transformers gives it its own static type
    (ntk_alpha, base·α^(d/(d−2))), so a KV cache holds no stale keys; without the alpha it is dynamic NTK."""
    config = {
        "model_type": "hunyuan_v1_dense", "hidden_size": 1024, "num_attention_heads": 8, "head_dim": 128,
        "num_hidden_layers": 2, "max_position_embeddings": 32768,
        "rope_parameters": {"rope_type": "dynamic", "alpha": 1000.0, "rope_theta": 10000.0, "factor": 1.0},
    }  # fmt: skip
    resolved = resolve_config(config)
    layer = resolved.layers[0]
    assert (layer.method, layer.params) == ("rope_ntk_alpha", {"base": 10000.0, "alpha": 1000.0})
    assert "dynamic_scaling_stale_cache" not in [warning.code for warning in resolved.warnings]
    inv_freq, scaling = hf_frequencies(hf_rotary(hf_text_config(config)), "full_attention")
    torch.testing.assert_close(our_inv_freq(layer), inv_freq.to(torch.float64), rtol=FLOAT32_POW, atol=0)
    assert layer.attention_scale == scaling == 1.0
    without_alpha = copy.deepcopy(config)
    del without_alpha["rope_parameters"]["alpha"]
    dynamic = resolve_config(without_alpha)
    assert dynamic.layers[0].method == "rope_dynamic_ntk"
    assert "dynamic_scaling_stale_cache" in [warning.code for warning in dynamic.warnings]


# --------------------------------------------------------------------------------------------- differential
# Presets whose configs are mutated below; left out: DeepSeek-V4 (rope per regime, not per layer type), the MLA
# models (a partial rotation there breaks transformers' own attention), Gemma 4 (per-layer head sizes), Phi-3
# (LongRoPE's factor lists).
MUTATED = ["llama-3.1-8b", "llama-4-scout-17b-16e", "mistral-7b-v0.3", "ministral-3-8b", "qwen2.5-7b", "qwen3-8b",
           "qwen3-next-80b-a3b", "qwen2.5-vl-7b", "qwen3-vl-8b", "gemma-3-4b", "olmo-3-7b", "smollm3-3b",
           "glm-4.5", "gpt-oss-20b"]  # fmt: skip
MUTATIONS = ["drop_theta", "theta", "drop_scaling", "factor", "v5", "drop_head_dim", "drop_partial", "partial",
             "drop_local", "yarn", "linear", "dynamic", "type_key"]  # fmt: skip


def mutated(seed: int) -> tuple[str, list[str], dict[str, Any]]:
    """A preset with one to three seeded edits of its rope keys (the ways configs are hand-edited and converted)."""
    rng = random.Random(seed)
    name = rng.choice(MUTATED)
    config = copy.deepcopy(PRESETS[name])
    text = config.get("text_config", config)
    ops = [rng.choice(MUTATIONS) for _ in range(rng.randint(1, 3))]
    for op in ops:
        scaling = text.get("rope_scaling")
        if op == "drop_theta":
            text.pop("rope_theta", None)
        elif op == "theta":
            text["rope_theta"] = rng.choice([1e4, 5e5, 1e6, 2e6])
        elif op == "drop_scaling":
            text.pop("rope_scaling", None)
        elif op == "factor" and isinstance(scaling, dict) and "factor" in scaling:
            scaling["factor"] = rng.choice([2.0, 4.0, 16.0])
        elif op == "drop_head_dim":
            text.pop("head_dim", None)
        elif op == "drop_partial":
            text.pop("partial_rotary_factor", None)
        elif op == "partial":
            text["partial_rotary_factor"] = rng.choice([0.25, 0.5, 1.0])
        elif op == "drop_local":
            text.pop("rope_local_base_freq", None)
        elif op in ("yarn", "linear", "dynamic"):
            text["rope_scaling"] = {"rope_type": op, "factor": 4.0} | (
                {"original_max_position_embeddings": 4096} if op == "yarn" else {}
            )
        elif op == "type_key" and isinstance(scaling, dict) and "rope_type" in scaling:
            scaling["type"] = scaling.pop("rope_type")
        elif op == "v5" and "rope_parameters" not in text:
            rope = dict(text.pop("rope_scaling", None) or {"rope_type": "default"})
            if "type" in rope:
                rope["rope_type"] = rope.pop("type")
            if "rope_theta" in text:
                rope["rope_theta"] = text.pop("rope_theta")
            text["rope_parameters"] = rope
    return name, ops, config


@pytest.mark.parametrize("seed", range(150))
def test_mutated_presets_resolve_to_what_transformers_computes(seed: int) -> None:
    """Seeded edits of the presets' rope keys: wherever transformers builds the model's rotary embedding, every
    rotating layer has its inverse frequencies and attention scale; where transformers refuses the config, so
    may we, and where we refuse it, transformers does too."""
    name, ops, config = mutated(seed)
    try:
        ours = resolve_config(config)
    except (InvalidInput, FieldErrors) as refused:
        ours = refused
    rotary, hf_refused = None, None
    try:
        rotary = hf_rotary(hf_text_config(config))
    except (KeyError, ValueError, TypeError) as error:  # transformers' config validation
        hf_refused = error
    if rotary is None:  # a config transformers cannot load is refused, or answered with a warning, here
        assert isinstance(ours, Exception) or ours.warnings, (name, ops, hf_refused)
        return
    assert not isinstance(ours, Exception), (name, ops, ours)
    for layer in ours.layers:
        if layer.method is None:
            continue
        expected, scaling = hf_frequencies(rotary, layer.layer_type)
        got = our_inv_freq(layer).to(torch.float32)
        assert got.shape == expected.shape, (name, ops, layer.layer)
        torch.testing.assert_close(got, expected.to(torch.float32), rtol=FLOAT32_POW, atol=0, msg=str((name, ops)))
        assert layer.attention_scale == pytest.approx(scaling, rel=1e-6), (name, ops, layer.layer)
