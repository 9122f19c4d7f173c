"""Where inference engines are known to compute a config's rotation differently from Hugging Face.

Only Hugging Face transformers and diffusers run here, so each note says two things of different standing: what
Hugging Face computes for this config (the resolved numbers, which posenc checks against transformers' own code),
and, as documented text with the public thread that shows it, what another engine did or does differently. Nothing
about another engine is claimed beyond what the cited thread shows; a note names the engine version or fix where
the thread does.

A note applies when the resolved layers have the pattern it is about (YaRN's factor on cos/sin, DeepSeek's mscale²
on the logits, a YaRN-scaled context, a rope dict nested where a loader may not look, sliding layers with a
rotation of their own), never by a model or method name: the patterns come from the resolved setup, and the YaRN
notes from the rope_type spellings the cited threads are about.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from posenc.pe import get_method
from posenc.real_models.configs import FULL, SLIDING, LayerRope, ResolvedConfig, text_config

# the rope_type spellings the YaRN threads below are about: a layer whose method a config names so
YARN_SPELLINGS = frozenset({"yarn", "deepseek_yarn"})


def _named_yarn(layer: LayerRope) -> bool:
    return layer.method is not None and bool(YARN_SPELLINGS & set(get_method(layer.method).config_spellings))


@dataclass(frozen=True)
class EngineNote:
    code: str
    layers: list[int]  # the layers it concerns (empty: the whole config)
    huggingface: str  # what Hugging Face computes for this config
    elsewhere: str  # what a cited thread shows another engine did or does
    sources: list[str]  # the public threads' addresses

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Rule = Callable[[Mapping[str, Any], Sequence[LayerRope]], EngineNote | None]


def _cos_sin_scale(text: Mapping[str, Any], layers: Sequence[LayerRope]) -> EngineNote | None:
    scaled = [layer.layer for layer in layers if _named_yarn(layer) and float(layer.params.get("factor", 1)) > 1]
    if not scaled:
        return None
    first = layers[scaled[0]]
    if "attention_factor" in first.params:
        source = "the config's explicit attention_factor"
    elif "mscale" in first.params or "mscale_all_dim" in first.params:
        source = "mscale(s, mscale) / mscale(s, mscale_all_dim), DeepSeek's ratio"
    else:
        source = "0.1 ln s + 1"
    return EngineNote(
        "cos_sin_scale",
        scaled,
        f"cos and sin are multiplied by {first.attention_scale:.9g} ({source}; the logits by its square); the "
        "softmax scale is separate.",
        "mlx-lm computed YaRN's factor from the formula and ignored an explicit attention_factor until a fix of "
        "2026-07; llama.cpp adjusts its YaRN attention factor by architecture and generalised the adjustment in "
        "2025-12; a llama.cpp bug report shows DeepSeek-V2's mscale ratio against llama.cpp's 1 + 0.1 ln s.",
        [
            "https://github.com/ml-explore/mlx-lm/pull/1507",
            "https://github.com/ggml-org/llama.cpp/pull/17945",
            "https://github.com/ggml-org/llama.cpp/issues/7118",
        ],
    )


def _mla_mscale(text: Mapping[str, Any], layers: Sequence[LayerRope]) -> EngineNote | None:
    scaled = [layer.layer for layer in layers if layer.shared_key_rope and "mscale" in layer.softmax_scale_source]
    if not scaled:
        return None
    first = layers[scaled[0]]
    return EngineNote(
        "mla_mscale_softmax",
        scaled,
        f"the logits' softmax scale is {first.softmax_scale:.9g} = {first.softmax_scale_source}: the YaRN mscale "
        "squared belongs to the softmax scale, not to cos and sin.",
        "transformers itself applied mscale_all_dim for DeepSeek-V3 but not for DeepSeek-V2 and Mistral 4 until "
        "pull request 47435 (2026-07): versions before it compute a smaller softmax scale for those; llama.cpp "
        "folds mscale² into kq_scale and stores 0.1 * mscale_all_dim in its GGUF (pull request 17945); vLLM's TPU "
        "backend fixed the same factor in tpu-inference pull request 521.",
        [
            "https://github.com/huggingface/transformers/pull/47435",
            "https://github.com/ggml-org/llama.cpp/pull/17945",
            "https://github.com/vllm-project/tpu-inference/pull/521",
        ],
    )


def _derived_length(text: Mapping[str, Any], layers: Sequence[LayerRope]) -> EngineNote | None:
    scaled = [
        layer.layer
        for layer in layers
        if _named_yarn(layer) and "factor" in layer.params and "original_max_position_embeddings" in layer.params
    ]
    longest = text.get("max_position_embeddings")
    if not scaled or not isinstance(longest, int):
        return None
    params = layers[scaled[0]].params
    product = float(params["factor"]) * float(params["original_max_position_embeddings"])
    return EngineNote(
        "derived_max_length",
        scaled,
        f"the model's length is max_position_embeddings = {longest} as given; the scaling reads "
        f"original_max_position_embeddings = {params['original_max_position_embeddings']} and factor "
        f"{params['factor']} (their product: {product:g}), and never multiplies max_position_embeddings.",
        "vLLM derives its max_model_len from the rope scaling: it multiplied an already scaled "
        "max_position_embeddings by the factor again for YaRN spellings other than 'yarn' (deepseek_yarn) until "
        "pull requests 53634 and 56446 (2026-08/09); the latter aligned vLLM with transformers, which never "
        "multiplies it.",
        ["https://github.com/vllm-project/vllm/pull/56446", "https://github.com/vllm-project/vllm/pull/53634"],
    )


def _nested_rope(text: Mapping[str, Any], layers: Sequence[LayerRope], *, nested: bool) -> EngineNote | None:
    sections = [layer.layer for layer in layers if layer.mrope_section is not None]
    if not nested and not sections:
        return None
    where = "text_config" if nested else "the config's top level"
    return EngineNote(
        "nested_rope_fields",
        sections,
        f"the rope dict is read from {where}"
        + (f", with mrope_section {layers[sections[0]].mrope_section} on top of its rope type" if sections else "")
        + "; every layer above is resolved from it.",
        "loaders that read the rope dict from the top level of a multimodal config, or only for some rope types, "
        "fall back to defaults: rtp-llm's Qwen3-VL loader read rope_scaling at the top level and used the default "
        "sections (pull request 1279, review), exllamav3's YaRN branch ignored mrope_section (pull request 332), "
        "and a trainer's DeepSeek-V3 read rope_parameters where the config only normalised rope_scaling "
        "(prime-rl pull request 2681, review).",
        [
            "https://github.com/alibaba/rtp-llm/pull/1279",
            "https://github.com/turboderp-org/exllamav3/pull/332",
            "https://github.com/PrimeIntellect-ai/prime-rl/pull/2681",
        ],
    )


def _sliding_rotation(text: Mapping[str, Any], layers: Sequence[LayerRope]) -> EngineNote | None:
    sliding = [layer for layer in layers if layer.layer_type == SLIDING and layer.method is not None]
    full = [layer for layer in layers if layer.layer_type == FULL and layer.method is not None]
    if not sliding or not full:
        return None
    a, b = sliding[0], full[0]
    if (a.method, a.params) == (b.method, b.params):
        return None
    return EngineNote(
        "sliding_layers_own_rotation",
        [layer.layer for layer in sliding],
        f"sliding-window layers rotate with {a.method} {a.params}, full-attention layers with {b.method} "
        f"{b.params}: two rotations in one model.",
        "llama.cpp rotated Gemma 3's sliding layers with the global scale, vLLM regressed Gemma 3's sliding layers "
        "to the scaled rotation and then fixed it, and candle hard-coded the local base (the sources: each "
        "project's public thread).",
        [
            "https://github.com/ggml-org/llama.cpp/issues/14367",
            "https://github.com/vllm-project/vllm/pull/29111",
            "https://github.com/huggingface/candle/issues/2891",
        ],
    )


def engine_notes(config: Mapping[str, Any], resolved: ResolvedConfig) -> list[EngineNote]:
    """The notes that apply to ``config`` as ``resolved`` (``resolve_config(config)``) resolves it."""
    text = text_config(config)
    layers = resolved.layers
    rules: list[Rule] = [_cos_sin_scale, _mla_mscale, _derived_length, _sliding_rotation]
    notes = [note for rule in rules if (note := rule(text, layers)) is not None]
    nested = _nested_rope(text, layers, nested="text_config" in config)
    return notes + ([nested] if nested is not None else [])
