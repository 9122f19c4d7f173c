"""The 2025-26 model families as presets: rotated q and k, in float64, at the probe positions 0, 1, L0 - 1, L0,
2·L0 and the longest (L0 the original context), against each model's own transformers code (its rotary embedding
class and its apply function, its query scale), to float32 rounding; and for each family a wrong variant (a port
bug) that the doctor warns about or the compare probe or the reference comparison catches."""

from __future__ import annotations

import copy
import importlib
import logging
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from posenc.compute import prepare
from posenc.real_models.configs import LayerRope, layer_frequencies, query_temperature, resolve_config
from posenc.real_models.diagnostics import RotarySetup, compare
from posenc.real_models.presets import PRESETS
from posenc.schemas.compute import RotaryRequest

logging.getLogger("transformers").setLevel(logging.ERROR)
FLOAT32_POW = 2e-6  # transformers' ω = θ^(-2k/d) in float32: relative error up to ln θ · 2^-24 (test_model_configs)
FLOAT32_EPS = 2.0**-24


def hf_text(config: dict[str, Any]) -> Any:
    if config.get("model_type") == "kimi_k2":  # Kimi K2's own file: Kimi K2.5's config reads it as deepseek_v3
        return CONFIG_MAPPING["kimi_k25"](text_config=copy.deepcopy(config)).get_text_config()
    fields = {key: value for key, value in copy.deepcopy(config).items() if key != "model_type"}
    return CONFIG_MAPPING[config["model_type"]](**fields).get_text_config()


def hf_module(text: Any) -> Any:
    return importlib.import_module(type(text).__module__.replace("configuration_", "modeling_"))


def hf_rotary(text: Any) -> Any:
    module = hf_module(text)
    [name] = [n for n in dir(module) if n.endswith("RotaryEmbedding") and "Vision" not in n]
    return getattr(module, name)(text)


def probe_positions(layer: LayerRope, config: dict[str, Any]) -> torch.Tensor:
    text = config.get("text_config", config)
    longest = int(text["max_position_embeddings"]) - 1
    original = int(layer.params.get("original_max_position_embeddings") or text.get("sliding_window") or 4096)
    return torch.tensor(sorted({0, 1, original - 1, original, 2 * original, longest}))


def posenc_rotate(request: dict[str, Any], q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> Any:
    """q and k rotated by posenc's /v1/rotary computation (float64 in, float64 out)."""
    body = {**request, "q": inline(q), "k": inline(k), "positions": positions.tolist()}
    result = prepare("rotary", RotaryRequest.model_validate(body)).run()
    return result.tensors["q"], result.tensors["k"]


def inline(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "data": t.flatten().tolist(), "dtype": "float64"}


def tolerance(layer: LayerRope, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Per feature (B, H, N, D): what transformers' float32 angles n·ω_k can be off by (ω rounded to FLOAT32_POW,
    the product to 2^-24), times the feature pair's norm, plus float32 rounding of the result."""
    omega = layer_frequencies(layer).inv_freq.to(torch.float64)  # (d/2,)
    angle_error = positions[:, None].to(torch.float64) * omega * (FLOAT32_POW + 2 * FLOAT32_EPS) + 4 * FLOAT32_EPS
    half = layer.rotary_dim // 2
    start = layer.rotary_slice[0]
    pair = x[..., start : start + layer.rotary_dim]
    if layer.pairing == "half":
        norms = torch.sqrt(pair[..., :half] ** 2 + pair[..., half:] ** 2)  # (B, H, N, d/2)
        per_feature = torch.cat((norms * angle_error, norms * angle_error), -1)
    else:
        norms = torch.sqrt(pair[..., 0::2] ** 2 + pair[..., 1::2] ** 2)
        per_feature = (norms * angle_error).repeat_interleave(2, dim=-1)
    tol = torch.full_like(x, 1e-6)
    tol[..., start : start + layer.rotary_dim] += 2 * per_feature * max(layer.attention_scale, 1.0) + 1e-6
    return tol


def assert_within(ours: torch.Tensor, expected: torch.Tensor, tol: torch.Tensor) -> None:
    excess = (ours - expected.to(torch.float64)).abs() - tol
    assert float(excess.max()) <= 0, f"off by {float(excess.max())} beyond float32 rounding"


def interleave_back(t: torch.Tensor) -> torch.Tensor:
    """transformers' apply_rotary_pos_emb_interleave returns the pairs de-interleaved (evens, then odds)."""
    return torch.stack(t.chunk(2, dim=-1), dim=-1).flatten(-2)


def draw(layer: LayerRope, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, count, layer.head_dim, generator=generator, dtype=torch.float64)  # (B, H, N, D)
    k = torch.randn(1, 1, count, layer.head_dim, generator=generator, dtype=torch.float64)
    return q, k


HfRotate = Callable[[Any, LayerRope, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def hf_half(text: Any, layer: LayerRope, q: torch.Tensor, k: torch.Tensor, ids: torch.Tensor) -> Any:
    """rotate_half models (Ministral 3, Qwen3-Next, GLM-4.5): the rotary class and apply_rotary_pos_emb on the
    rotated slice."""
    module, rotary = hf_module(text), hf_rotary(text)
    cos, sin = rotary(q.float(), ids[None])
    start, stop = layer.rotary_slice
    q_rot, k_rot = module.apply_rotary_pos_emb(q[..., start:stop].float(), k[..., start:stop].float(), cos, sin)
    return torch.cat((q[..., :start], q_rot, q[..., stop:]), -1), torch.cat((k[..., :start], k_rot, k[..., stop:]), -1)


def hf_gemma4(text: Any, layer: LayerRope, q: torch.Tensor, k: torch.Tensor, ids: torch.Tensor) -> Any:
    """Gemma 4: the per-layer-type rotary buffers, one tensor per apply call (over the whole head)."""
    module, rotary = hf_module(text), hf_rotary(text)
    cos, sin = rotary(q.float(), ids[None], layer.layer_type)  # (1, N, D)
    return module.apply_rotary_pos_emb(q.float(), cos, sin), module.apply_rotary_pos_emb(k.float(), cos, sin)


def hf_per_type(text: Any, layer: LayerRope, q: torch.Tensor, k: torch.Tensor, ids: torch.Tensor) -> Any:
    """Olmo 3: one rotary buffer set per layer type (the sliding layers unscaled), apply_rotary_pos_emb."""
    module, rotary = hf_module(text), hf_rotary(text)
    cos, sin = rotary(q.float(), ids[None], layer.layer_type)
    return module.apply_rotary_pos_emb(q.float(), k.float(), cos, sin)


def hf_mla(text: Any, layer: LayerRope, q: torch.Tensor, k: torch.Tensor, ids: torch.Tensor) -> Any:
    """DeepSeek-style MLA: the rope part after the no-rope part, interleaved pairs."""
    module, rotary = hf_module(text), hf_rotary(text)
    cos, sin = rotary(q.float(), ids[None])
    start, _stop = layer.rotary_slice
    q_rot, k_rot = module.apply_rotary_pos_emb_interleave(q[..., start:].float(), k[..., start:].float(), cos, sin)
    return torch.cat((q[..., :start], interleave_back(q_rot)), -1), torch.cat(
        (k[..., :start], interleave_back(k_rot)), -1
    )


def hf_v4_regime(text: Any, layer: int) -> str:
    """The rope regime DeepSeek-V4's attention of that layer picks (transformers: main or compress)."""
    with torch.device("meta"):
        return str(hf_module(text).DeepseekV4Attention(text, layer_idx=layer).rope_layer_type)


def hf_v4(text: Any, layer: LayerRope, q: torch.Tensor, k: torch.Tensor, ids: torch.Tensor) -> Any:
    """DeepSeek-V4: its rotary's buffers of the layer's regime, its apply (the trailing features, interleaved)."""
    module, rotary = hf_module(text), hf_rotary(text)
    cos, sin = rotary(q.float(), ids[None], layer_type=hf_v4_regime(text, layer.layer))  # (1, N, d/2)
    return module.apply_rotary_pos_emb(q.float(), cos, sin), module.apply_rotary_pos_emb(k.float(), cos, sin)


CASES: list[tuple[str, int, HfRotate]] = [
    ("gemma-4-26b-a4b", 0, hf_gemma4),  # sliding: default RoPE over 256 features, θ 1e4
    ("gemma-4-26b-a4b", 5, hf_gemma4),  # global: 512-wide heads, proportional RoPE, 64 of 256 pairs rotate
    ("ministral-3-8b", 0, hf_half),
    ("mistral-4", 0, hf_mla),
    ("deepseek-v3.2", 0, hf_mla),
    ("glm-5", 0, hf_mla),
    ("qwen3-next-80b-a3b", 3, hf_half),  # the first full-attention layer: 64 of 256 features
    ("glm-4.5", 0, hf_half),
    ("olmo-3-7b", 0, hf_per_type),  # sliding: plain RoPE at θ 5e5, no YaRN
    ("olmo-3-7b", 3, hf_per_type),  # full: YaRN 8 over 8192, the config's attention_factor on cos and sin
    ("gpt-oss-20b", 0, hf_half),  # sliding (gpt-oss's _apply_rotary_emb: halves), YaRN without truncation
    ("gpt-oss-20b", 1, hf_half),  # full
    ("kimi-k2", 0, hf_mla),  # DeepSeek-V3's MLA, θ 5e4, YaRN 64 over 4096 with beta_fast = beta_slow = 1
    ("deepseek-v4-flash", 0, hf_v4),  # sliding: the main regime, plain RoPE at θ 1e4 on the last 64 of 512
    ("deepseek-v4-flash", 2, hf_v4),  # compressed sparse: the compress regime, θ 1.6e5 + YaRN 16, factor 1
    ("deepseek-v4-flash", 3, hf_v4),  # heavily compressed: the compress regime too
]


@pytest.mark.parametrize(("name", "index", "reference"), CASES)
def test_each_family_rotates_q_and_k_as_its_transformers_code(name: str, index: int, reference: HfRotate) -> None:
    config = PRESETS[name]
    layer = resolve_config(config).layers[index]
    positions = probe_positions(layer, config)
    q, k = draw(layer, len(positions), index)
    ours_q, ours_k = posenc_rotate({"config": config, "layer": index}, q, k, positions)
    expected_q, expected_k = reference(hf_text(config), layer, q, k, positions)
    assert_within(ours_q, expected_q, tolerance(layer, q, positions))
    assert_within(ours_k, expected_k, tolerance(layer, k, positions))


def test_gemma4_global_layers_pad_the_unrotated_pairs_and_divide_by_the_whole_head() -> None:
    layers = resolve_config(PRESETS["gemma-4-26b-a4b"]).layers
    assert [layer.layer for layer in layers if layer.layer_type == "full_attention"] == [5, 11, 17, 23, 29]
    assert (layers[5].head_dim, layers[5].rotary_dim, layers[0].head_dim) == (512, 512, 256)
    omega = layer_frequencies(layers[5]).inv_freq
    assert int((omega > 0).sum()) == 64  # p·d/2 = 0.25 · 256 pairs; the other 192 are the identity
    assert layers[5].softmax_scale == layers[0].softmax_scale == 1.0  # transformers: scaling = 1.0 (q/k norms)


def test_gemma4_as_a_generic_partial_rotary_is_what_the_doctor_and_the_reference_flag() -> None:
    """A port that reads the global layers' partial_rotary_factor as an ordinary partial rotary (the rotated slice
    narrowed to 128 features, ω over 128 instead of 512, as a scaled rope type narrows it): the doctor warns."""
    config = copy.deepcopy(PRESETS["gemma-4-26b-a4b"])
    config["text_config"]["rope_parameters"]["full_attention"] |= {"rope_type": "linear", "factor": 1.0}
    resolved = resolve_config(config)
    [warning] = [w for w in resolved.warnings if w.code == "partial_rotary_not_proportional"]
    assert warning.layers == [5, 11, 17, 23, 29]
    assert warning.evidence["rotary_dim"] == 128
    assert warning.evidence["head_dim"] == 512
    assert not list(resolve_config(PRESETS["gemma-4-26b-a4b"]).warnings)
    wrong = resolved.layers[5]
    positions = torch.tensor([0, 1, 7])
    q, k = draw(wrong, 3, 0)
    ours_q, _ = posenc_rotate({"config": config, "layer": 5}, q, k, positions)
    expected_q, _ = hf_gemma4(
        hf_text(PRESETS["gemma-4-26b-a4b"]), resolve_config(PRESETS["gemma-4-26b-a4b"]).layers[5], q, k, positions
    )
    assert float((ours_q - expected_q.double()).abs().max()) > 0.01


def test_the_mistral_query_scale_is_what_its_attention_multiplies_q_by() -> None:
    """Ministral 3 and Mistral 4 read llama_4_scaling_beta from the rope dict: q times 1 + β·ln(1 + ⌊n / L0⌋)
    after the rotation, on every layer; compared with transformers' own get_llama_4_attn_scale."""
    for name in ("ministral-3-8b", "mistral-4"):
        config = PRESETS[name]
        text = hf_text(config)
        module = hf_module(text)
        layer = resolve_config(config).layers[0]
        scale = layer.query_temperature
        assert scale is not None
        assert scale["position_offset"] == 0
        positions = probe_positions(layer, config)
        ours = query_temperature(positions, scale["floor_scale"], scale["attn_scale"], scale["position_offset"])
        rope = text.rope_parameters
        expected = module.get_llama_4_attn_scale(
            positions[None].float(), rope["llama_4_scaling_beta"], rope["original_max_position_embeddings"]
        )  # (1, 1, N, 1)
        torch.testing.assert_close(ours, expected.flatten().double(), rtol=2e-7, atol=0)
        assert ours[3] == 1 + 0.1 * torch.log(torch.tensor(2.0, dtype=torch.float64))  # n = L0: ⌊n/L0⌋ = 1
        assert ours[2] == 1.0  # n = L0 - 1


@pytest.mark.parametrize("name", ["ministral-3-8b", "mistral-4"])
def test_mistral_yarn_without_its_mscale_fields_is_found_by_the_compare_probe(name: str) -> None:
    """Published with mscale = mscale_all_dim = 1 (attention factor 1): a port that drops them applies YaRN's
    default 0.1·ln s + 1 on cos and sin; the compare probe sees the logits part at position 0."""
    config = copy.deepcopy(PRESETS[name])
    text = config.get("text_config", config)
    right = resolve_config(config).layers[0]
    assert right.attention_scale == 1.0
    del text["rope_parameters"]["mscale"], text["rope_parameters"]["mscale_all_dim"]
    wrong = resolve_config(config).layers[0]
    assert wrong.attention_scale > 1.2
    report = compare(RotarySetup.from_layer(right), RotarySetup.from_layer(wrong), max_position=64)
    assert report.first_angle_divergence is None
    assert report.first_logit_divergence == 0


@pytest.mark.parametrize(("name", "pairing"), [("deepseek-v3.2", "half"), ("glm-5", "interleaved")])
def test_the_sparse_attention_indexer_rotates_in_its_own_pairing(name: str, pairing: str) -> None:
    """The indexer of every MLA layer rotates the first qk_rope_head_dim of its index_head_dim features with the
    MLA's frequencies: DeepSeek-V3.2 in halves (rotate_half), GLM-5 interleaved, while both MLAs interleave."""
    config = PRESETS[name]
    layer = resolve_config(config).layers[0]
    assert layer.pairing == "interleaved"
    indexer = layer.indexer
    assert indexer is not None
    assert (indexer.pairing, indexer.head_dim, indexer.rotary_slice) == (pairing, 128, (0, 64))
    text = hf_text(config)
    module, rotary = hf_module(text), hf_rotary(text)
    positions = probe_positions(indexer, config)
    q, k = draw(indexer, len(positions), 1)
    request = {"method": indexer.method, "params": indexer.params, "rotary_dim": 64, "pairing": pairing}
    ours_q, ours_k = posenc_rotate(request, q, k, positions)
    cos, sin = rotary(q.float(), positions[None])
    if pairing == "half":
        q_rot, k_rot = module.apply_rotary_pos_emb(q[..., :64].float(), k[..., :64].float(), cos, sin)
    else:
        q_rot, k_rot = module.apply_rotary_pos_emb_interleave(q[..., :64].float(), k[..., :64].float(), cos, sin)
        q_rot, k_rot = interleave_back(q_rot), interleave_back(k_rot)
    expected_q, expected_k = torch.cat((q_rot, q[..., 64:]), -1), torch.cat((k_rot, k[..., 64:]), -1)
    assert_within(ours_q, expected_q, tolerance(indexer, q, positions))
    assert_within(ours_k, expected_k, tolerance(indexer, k, positions))
    # the other pairing is a different rotation: what the compare probe finds at once
    other = RotarySetup(indexer.method or "", indexer.params, 64, "half" if pairing == "interleaved" else "interleaved")
    assert compare(RotarySetup.from_layer(indexer), other, max_position=8).first_logit_divergence == 1


def test_a_glm5_config_that_leaves_the_indexer_pairing_out_is_warned_about() -> None:
    """vLLM reads a missing indexer_rope_interleave as false (half pairs); GLM-5's own code rotates interleaved:
    the doctor warns where a glm_moe_dsa config leaves it out, not where it says true, nor for DeepSeek-V3.2."""
    config = {key: value for key, value in PRESETS["glm-5"].items() if key != "indexer_rope_interleave"}
    resolved = resolve_config(config)
    [warning] = [w for w in resolved.warnings if w.code == "indexer_pairing_unspecified"]
    assert warning.evidence["model_code"] == "interleaved"
    assert warning.evidence["vllm_default"] == "half"
    assert resolved.layers[0].indexer is not None
    assert resolved.layers[0].indexer.pairing == "interleaved"
    for name in ("glm-5", "deepseek-v3.2"):
        assert "indexer_pairing_unspecified" not in {w.code for w in resolve_config(PRESETS[name]).warnings}


def test_qwen3_next_linear_attention_layers_have_no_rope() -> None:
    layers = resolve_config(PRESETS["qwen3-next-80b-a3b"]).layers
    text = hf_text(PRESETS["qwen3-next-80b-a3b"])
    assert [layer.layer_type for layer in layers] == list(text.layer_types)
    assert [layer.method is not None for layer in layers] == [kind == "full_attention" for kind in text.layer_types]
    assert layers[3].rotary_dim == 64


def without(config: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in copy.deepcopy(config).items() if key not in keys}


@pytest.mark.parametrize(("name", "key", "value"), [("qwen3-next-80b-a3b", "partial_rotary_factor", 0.25),
                                                    ("glm-4.5", "partial_rotary_factor", 0.5)])  # fmt: skip
def test_a_partial_rotation_left_to_the_model_default_is_warned_about_and_resolved_as_transformers(
    name: str, key: str, value: float
) -> None:
    """Qwen3-Next and GLM-4.5's config classes default partial_rotary_factor (0.25, 0.5): a config.json without it
    still rotates a quarter / half of each head in transformers, where a plain reader rotates the whole head. The
    doctor warns; posenc resolves what transformers runs, and the whole-head port is not that."""
    config = without(PRESETS[name], key)
    resolved = resolve_config(config)
    [warning] = [w for w in resolved.warnings if w.code == "model_type_default"]
    assert warning.evidence["filled"] == {key: value}
    assert "model_type_default" not in {w.code for w in resolve_config(PRESETS[name]).warnings}
    index = next(layer.layer for layer in resolved.layers if layer.method is not None)
    layer = resolved.layers[index]
    assert layer.rotary_dim == int(value * layer.head_dim)
    text = hf_text(config)  # transformers from the same stripped config
    positions = probe_positions(layer, config)
    q, k = draw(layer, len(positions), 3)
    ours_q, _ = posenc_rotate({"config": config, "layer": index}, q, k, positions)
    expected_q, _ = hf_half(text, layer, q, k, positions)
    assert_within(ours_q, expected_q, tolerance(layer, q, positions))
    whole = resolve_config({**config, key: 1.0}).layers[index]  # the port's reading: every pair rotates
    wrong_q, _ = posenc_rotate({"config": {**config, key: 1.0}, "layer": index}, q, k, positions)
    assert whole.rotary_dim == layer.head_dim
    assert float((wrong_q - expected_q.double()).abs().max()) > 0.1


def test_qwen3_next_without_its_interval_keeps_the_linear_layers_nope_and_the_doctor_says_so() -> None:
    """Qwen3NextConfig fills full_attention_interval 4 when config.json has neither it nor layer_types; a reader
    without that default gives all 48 layers full attention with RoPE (the linear layers rotated)."""
    config = without(PRESETS["qwen3-next-80b-a3b"], "full_attention_interval")
    resolved = resolve_config(config)
    [warning] = [w for w in resolved.warnings if w.code == "model_type_default"]
    assert warning.evidence["filled"] == {"full_attention_interval": 4}
    text = hf_text(config)
    assert [layer.layer_type for layer in resolved.layers] == list(text.layer_types)
    assert sum(layer.method is not None for layer in resolved.layers) == 12
    wrong = resolve_config({**config, "layer_types": ["full_attention"] * 48})  # the port's reading
    assert sum(layer.method is not None for layer in wrong.layers) == 48
    assert [layer.layer_type for layer in wrong.layers] != list(text.layer_types)


def test_glm45_in_interleaved_pairs_is_what_the_compare_probe_finds() -> None:
    """GLM-4.5 (glm4_moe) rotates in halves (rotate_half, checked against transformers above), unlike GLM-4's dense
    models and GLM-5's MLA, which interleave: a port that carries the interleaving over is a different rotation
    from position 1."""
    layer = resolve_config(PRESETS["glm-4.5"]).layers[0]
    assert (layer.pairing, layer.rotary_slice) == ("half", (0, 64))
    right = RotarySetup.from_layer(layer)
    wrong = RotarySetup(layer.method or "", layer.params, layer.rotary_dim, "interleaved")
    report = compare(right, wrong, max_position=8)
    assert report.first_angle_divergence is None  # the same frequencies ...
    assert report.first_logit_divergence == 1  # ... on other feature pairs


def test_olmo3_scales_its_full_attention_layers_only_as_transformers_does() -> None:
    config = PRESETS["olmo-3-7b"]
    resolved = resolve_config(config)
    text = hf_text(config)
    assert text.rope_parameters["sliding_attention"]["rope_type"] == "default"
    assert [layer.layer_type for layer in resolved.layers] == list(text.layer_types)
    sliding, full = resolved.layers[0], resolved.layers[3]
    assert (sliding.window, sliding.attention_scale, sliding.params) == (4096, 1.0, {"base": 500000})
    assert full.params["attention_factor"] == full.attention_scale == 1.2079441541679836
    assert [w.code for w in resolved.warnings] == ["static_yarn"]


def test_olmo3_with_yarn_on_its_sliding_layers_is_warned_about_and_found_by_the_compare_probe() -> None:
    """transformers 5.2.0 (and any reader of a flat rope dict) gave Olmo 3's sliding layers the YaRN of its full
    layers: the doctor warns of the per-layer-type config that says so, and the compare probe sees the angles part
    where YaRN interpolates and the logits at position 0 (the attention factor on cos and sin)."""
    rope = {**PRESETS["olmo-3-7b"]["rope_scaling"], "rope_theta": 500000.0}
    config = {
        **without(PRESETS["olmo-3-7b"], "rope_scaling", "rope_theta"),
        "rope_parameters": {"full_attention": rope, "sliding_attention": rope},
    }
    resolved = resolve_config(config)
    [warning] = [w for w in resolved.warnings if w.code == "sliding_layers_scaled"]
    assert warning.layers == [index for index in range(32) if index % 4 != 3]
    right = RotarySetup.from_layer(resolve_config(PRESETS["olmo-3-7b"]).layers[0])
    report = compare(right, RotarySetup.from_layer(resolved.layers[0]), max_position=64)
    assert report.first_angle_divergence is not None
    assert report.first_logit_divergence == 0


def test_olmo3_attention_factor_forwarded_as_a_multiplier_is_found_by_the_compare_probe() -> None:
    """Olmo 3's attention_factor (1.2079…) is exactly YaRN's default 0.1·ln 8 + 1, so a port that ignores it is right
    by coincidence; one that forwards it as vLLM's / EasyDeL's attn_factor multiplies its own default mscale by it
    (cos and sin × 1.2079²): the compare probe sees the logits part at position 0."""
    layer = resolve_config(PRESETS["olmo-3-7b"]).layers[3]
    right = RotarySetup.from_layer(layer)
    ignored = RotarySetup(right.method, without(dict(layer.params), "attention_factor"), layer.rotary_dim)
    assert compare(right, ignored, max_position=64).first_logit_divergence is None
    factor = layer.params["attention_factor"]
    squared = RotarySetup(right.method, {**layer.params, "attention_factor": factor * factor}, layer.rotary_dim)
    report = compare(right, squared, max_position=64)
    assert report.first_angle_divergence is None
    assert report.first_logit_divergence == 0


def test_olmo3_without_rope_theta_resolves_its_own_default_base() -> None:
    """Olmo3Config's default_theta is 5e5, not 1e4: a config without rope_theta is resolved so, with a warning."""
    config = without(PRESETS["olmo-3-7b"], "rope_theta")
    resolved = resolve_config(config)
    [warning] = [w for w in resolved.warnings if w.code == "model_type_default"]
    assert warning.evidence["filled"] == {"rope_theta": 500000.0}
    text = hf_text(config)
    for index in (0, 3):
        expected = text.rope_parameters[resolved.layers[index].layer_type]["rope_theta"]
        assert resolved.layers[index].params["base"] == expected == 500000.0


def test_gpt_oss_notes_its_sinks_and_rotates_without_truncating_the_yarn_range() -> None:
    """Every gpt-oss layer adds a learned sink logit per head to its softmax (transformers' GptOssAttention.sinks):
    noted on each layer. Its YaRN keeps the correction range unrounded (truncate false); the rounded range is
    another rotation, which the compare probe finds."""
    config = PRESETS["gpt-oss-20b"]
    resolved = resolve_config(config)
    module = hf_module(hf_text(config))
    with torch.device("meta"):
        attention = module.GptOssAttention(hf_text(config), layer_idx=0)
    assert tuple(attention.sinks.shape) == (config["num_attention_heads"],)
    assert all(layer.notes and "sink" in layer.notes[0] for layer in resolved.layers)
    assert all(not layer.notes for layer in resolve_config(PRESETS["olmo-3-7b"]).layers)
    assert "notes" in resolved.layers[0].to_json()
    layer = resolved.layers[1]
    assert layer.params["truncate"] is False
    rounded = RotarySetup(layer.method or "", {**layer.params, "truncate": True}, layer.rotary_dim)
    assert compare(RotarySetup.from_layer(layer), rounded, max_position=8192).first_angle_divergence is not None


def test_kimi_linear_rotates_nothing_as_its_transformers_code() -> None:
    """Kimi Linear: KDA linear-attention layers and 7 MLA layers (1-based full_attn_layers) with mla_use_nope: no
    layer rotates (transformers' KimiLinear has no rotary embedding), the MLA softmax scale is (128 + 64)^-1/2."""
    config = PRESETS["kimi-linear-48b-a3b"]
    resolved = resolve_config(config)
    text = hf_text(config)
    module = hf_module(text)
    assert [layer.layer_type for layer in resolved.layers] == list(text.layer_types)
    assert [layer.layer for layer in resolved.layers if layer.layer_type == "full_attention"] == [
        3,
        7,
        11,
        15,
        19,
        23,
        26,
    ]
    assert not [name for name in dir(module) if name.endswith("RotaryEmbedding")]
    assert all(layer.method is None for layer in resolved.layers)
    with torch.device("meta"):
        attention = module.KimiLinearAttention(text, layer_idx=3)
    assert resolved.layers[3].softmax_scale == pytest.approx(attention.scaling, rel=1e-12)
    assert not resolved.warnings


def test_kimi_linear_mla_layers_given_rope_are_what_the_doctor_warns_about() -> None:
    """Without mla_use_nope, vLLM rotates Kimi Linear's MLA rope part; its own code (no rotary embedding at all)
    never does: resolved without rotation, as transformers runs it, and warned on exactly the MLA layers."""
    config = without(PRESETS["kimi-linear-48b-a3b"], "mla_use_nope")
    resolved = resolve_config(config)
    mla = [layer.layer for layer in resolved.layers if layer.layer_type == "full_attention"]
    [warning] = [w for w in resolved.warnings if w.code == "mla_rope_in_nope_model"]
    assert warning.layers == mla
    assert all(layer.method is None for layer in resolved.layers)
    assert not [n for n in dir(hf_module(hf_text(config))) if n.endswith("RotaryEmbedding")]
    assert warning.evidence["model_code"] == "NoPE"


def test_kimi_k2_resolves_its_equal_betas_and_softmax_scale_as_transformers() -> None:
    """Kimi K2 ships beta_fast = beta_slow = 1 (a zero-width YaRN ramp, which transformers accepts): resolved, not
    refused; the MLA's interleaved pairs (model_type kimi_k2 is DeepSeek-V3's code) and its softmax scale
    (192^-1/2 · mscale(64, mscale_all_dim = 1)²) are those of transformers' attention; Kimi K2.5's nesting of the
    same text config resolves the same layers."""
    config = PRESETS["kimi-k2"]
    resolved = resolve_config(config)
    text = hf_text(config)
    layer = resolved.layers[0]
    assert (layer.params["beta_fast"], layer.params["beta_slow"]) == (1.0, 1.0)
    assert (layer.pairing, layer.rotary_slice, layer.head_dim) == ("interleaved", (128, 192), 192)
    assert text.rope_interleave is True
    with torch.device("meta"):
        attention = hf_module(text).DeepseekV3Attention(text, layer_idx=0)
    assert layer.softmax_scale == pytest.approx(attention.scaling, rel=1e-12)
    assert layer.attention_scale == hf_rotary(text).attention_scaling == 1.0
    nested = resolve_config({"model_type": "kimi_k25", "text_config": config})
    assert [one.to_json() for one in nested.layers] == [one.to_json() for one in resolved.layers]


def test_kimi_k2_port_bugs_are_what_the_compare_probe_finds() -> None:
    """Three ports of Kimi K2's rotation, each off from position 0 or 1: half pairs (a reader that does not know
    kimi_k2 is DeepSeek-V3), YaRN without its mscale fields (factor 0.1·ln 64 + 1 on cos and sin), and the betas
    replaced by YaRN's defaults 32 / 1 (a reader that refuses equal betas)."""
    layer = resolve_config(PRESETS["kimi-k2"]).layers[0]
    right = RotarySetup.from_layer(layer)
    half = RotarySetup(right.method, right.params, right.rotary_dim, "half", right.start)
    report = compare(right, half, max_position=64)
    assert report.first_angle_divergence is None
    assert report.first_logit_divergence == 1
    config = copy.deepcopy(PRESETS["kimi-k2"])
    del config["rope_scaling"]["mscale"], config["rope_scaling"]["mscale_all_dim"]
    dropped = resolve_config(config).layers[0]
    assert dropped.attention_scale == pytest.approx(0.1 * math.log(64) + 1, rel=1e-12)
    assert dropped.softmax_scale == pytest.approx(192**-0.5, rel=1e-12)  # no mscale_all_dim: no mscale² either
    assert compare(right, RotarySetup.from_layer(dropped), max_position=64).first_logit_divergence == 0
    defaults = RotarySetup(right.method, {**right.params, "beta_fast": 32.0}, right.rotary_dim, right.pairing)
    assert compare(right, defaults, max_position=8192).first_angle_divergence is not None


def test_deepseek_v4_layers_are_transformers_layer_types_scales_and_compressors() -> None:
    """Every DeepSeek-V4 layer: transformers' layer type (from compress_ratios, the MTP entry dropped), the regime
    its attention picks (sliding: main; else compress), its softmax scale (head_dim^-1/2) and sinks, and on the
    compressed layers the compressor's rate; the compressed sparse layers' indexer rotates the trailing 64 of its
    128 features in the compress regime, with the scorer's scale."""
    config = PRESETS["deepseek-v4-flash"]
    resolved = resolve_config(config)
    text = hf_text(config)
    module = hf_module(text)
    assert [layer.layer_type for layer in resolved.layers] == list(text.layer_types)
    main = resolved.layers[0]
    for layer in resolved.layers:
        with torch.device("meta"):
            attention = module.DeepseekV4Attention(text, layer_idx=layer.layer)
        assert layer.softmax_scale == pytest.approx(attention.scaling, rel=1e-12)
        assert tuple(attention.sinks.shape) == (config["num_attention_heads"],)
        assert any("sink" in note for note in layer.notes)
        regime = attention.rope_layer_type
        assert (regime == "main") == (layer.params == main.params)
        if attention.compressor is None:
            assert (layer.compress_rate, layer.indexer, layer.window) == (None, None, 128)
            continue
        assert attention.compressor.rope_layer_type == regime
        assert layer.compress_rate == attention.compressor.compress_rate
        indexer = getattr(attention.compressor, "indexer", None)
        assert (layer.indexer is None) == (indexer is None)
        if indexer is not None and layer.indexer is not None:
            assert (layer.indexer.head_dim, layer.indexer.rotary_slice) == (indexer.head_dim, (64, 128))
            assert layer.indexer.compress_rate == indexer.compress_rate
            assert layer.indexer.softmax_scale == pytest.approx(indexer.scorer.softmax_scale, rel=1e-12)
            assert (layer.indexer.method, layer.indexer.params) == (layer.method, layer.params)


def test_deepseek_v4_compressed_keys_rotate_at_the_window_start_as_its_compressor() -> None:
    """transformers' heavily compressed compressor, its weights set so that compressed entry i is token i·128's
    key (the gate's softmax all on the window's first slot, the projection the identity, RMS-1 rows), rotates
    the entries as posenc rotates those keys with the layer's setup at positions i·compress_rate."""
    config = {**PRESETS["deepseek-v4-flash"], "hidden_size": 512, "rms_norm_eps": 1e-30}
    text = hf_text(config)
    layer = resolve_config(config).layers[3]
    rate = layer.compress_rate
    assert rate == 128
    compressor = hf_module(text).DeepseekV4HCACompressor(text)
    with torch.no_grad():
        compressor.kv_proj.weight.copy_(torch.eye(512))
        compressor.gate_proj.weight.zero_()
        compressor.position_bias.fill_(-1e4)
        compressor.position_bias[0].zero_()
        compressor.kv_norm.weight.fill_(1.0)
    windows = 3
    generator = torch.Generator().manual_seed(4)
    keys = torch.randn(1, 1, windows, 512, generator=generator, dtype=torch.float64)
    keys = keys / keys.pow(2).mean(-1, keepdim=True).sqrt()  # RMS 1: the compressor's norm leaves them
    hidden = torch.randn(1, windows * rate, 512, generator=generator)
    hidden[0, ::rate] = keys[0, 0].float()
    positions = torch.arange(windows * rate)[None]
    with torch.no_grad():
        compressed, _ = compressor(hidden, None, positions, None, 3)  # (1, 1, windows, 512)
    at = torch.arange(windows) * rate
    ours, _ = posenc_rotate({"config": config, "layer": 3}, keys, keys, at)
    assert_within(ours, compressed.double(), tolerance(layer, keys, at))
    unrotated, _ = posenc_rotate({"config": config, "layer": 3}, keys, keys, torch.arange(windows))
    assert float((unrotated - compressed.double()).abs().max()) > 1e-3  # positions i, not i·128: another rotation


def test_deepseek_v4_port_bugs_are_what_the_compare_probe_finds() -> None:
    """Ports of DeepSeek-V4's compressed layers: the compress regime given the main θ (1e4 for every layer),
    half pairs instead of interleaved, and YaRN's default factor (0.1·ln 16 + 1) instead of the 1 transformers
    forces; and the sliding layers given the compress regime. Each is a different rotation or logit scale."""
    layers = resolve_config(PRESETS["deepseek-v4-flash"]).layers
    sliding, compressed = RotarySetup.from_layer(layers[0]), RotarySetup.from_layer(layers[2])
    assert compressed.start == 448
    main_theta = RotarySetup(compressed.method, {**compressed.params, "base": 10000.0}, 64, "interleaved", 448)
    assert compare(compressed, main_theta, max_position=64).first_angle_divergence == 1
    half = RotarySetup(compressed.method, compressed.params, 64, "half", 448)
    assert compare(compressed, half, max_position=64).first_logit_divergence == 1
    default_factor = RotarySetup(compressed.method, without(dict(compressed.params), "attention_factor"), 64,
                                 "interleaved", 448)  # fmt: skip
    report = compare(compressed, default_factor, max_position=64)
    assert (report.first_angle_divergence, report.first_logit_divergence) == (None, 0)
    assert compare(sliding, compressed, max_position=64).first_angle_divergence == 1
