"""Differential test of the config resolver against Hugging Face transformers' own code (a pinned test-only
dependency): seeded edits of real configs, for every model type the presets name (their text configs' too) and the
model types GGUF files map to, each resolved by ``resolve_config`` and by transformers' config class and the model's
own rotary embedding class (``tests.helpers.transformers_rope``).

The rule, per case: where transformers builds the rotary embedding (its config class, the rotary init and a first
forward pass run, and the cos and sin fit the heads its attention applies them to), ours resolves the config to
the same number of layers, the same NoPE layers, and on every rotating layer the same layer type (where the
buffers are per layer type), inverse frequencies (to float32 rounding), attention scale, rotated width and, for
M-RoPE, the axis (t, h, w) each pair turns by, at init, after transformers' length-dependent update far past the
context (dynamic NTK, LongRoPE) and back at a short length; where transformers refuses the config, ours refuses it
(InvalidInput / FieldErrors) or resolves it with a warning.
"""

from __future__ import annotations

import copy
import logging
import random
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from posenc.errors import FieldErrors, InvalidInput
from posenc.real_models.configs import ResolvedConfig, layer_frequencies, resolve_config
from posenc.real_models.presets import PRESETS
from tests.helpers.transformers_rope import HfRope, hf_rope

# ours are float64 from the formula, transformers' float32: θ^(2k/d) with the exponent rounded to float32 is off
# by up to ln θ · 2^-24 relative (1.1e-6 at θ = 1e8, a dynamic NTK base grown far past the context)
FLOAT32_POW = 2e-6
logging.getLogger("transformers").setLevel(logging.ERROR)  # its rope validation logs every odd key it ignores
# YaRN and Llama 3 blend two frequencies per pair, ω and ω/s, with a weight transformers rounds to float32: the
# weight's rounding (2^-24 relative) moves the result by up to s times that, relative
BLENDED = frozenset({"yarn", "llama3"})


def tolerance(rope: dict[str, Any]) -> float:
    """Relative tolerance on the inverse frequencies of a layer built from the rope dict ``rope``."""
    if rope.get("rope_type") not in BLENDED:
        return FLOAT32_POW
    factor = rope.get("factor")
    return FLOAT32_POW + 2.0**-23 * float(factor if isinstance(factor, int | float) and factor > 1 else 1)


# ---------------------------------------------------------------------------------------------- model types
# presets by the model type they are written as (the top-level one; multimodal text configs below)
PRESET_TYPES: dict[str, list[str]] = {}
for _name, _config in PRESETS.items():
    if "model_type" in _config:
        PRESET_TYPES.setdefault(_config["model_type"], []).append(_name)
# text model types on their own (a text-only checkpoint, or what a GGUF maps to): the preset's text config, flat
TEXT_TYPES: dict[str, str] = {
    str(config["text_config"]["model_type"]): name
    for name, config in PRESETS.items()
    if isinstance(config.get("text_config"), dict) and config["text_config"].get("model_type")
}
# model types a GGUF maps to (gguf_files.ARCH_MODEL_TYPES, and architectures named as model types) that no preset
# is written as, the model types whose config classes fill in rope keys of their own, and Qwen2-VL (its own M-RoPE
# rotary): a minimal config of the class defaults' sizes
CLASS_DEFAULT_TYPES = ["qwen2_moe", "qwen3_moe", "deepseek_v2", "gemma", "gemma2", "glm4", "glm", "phi", "stablelm",
                       "nemotron", "persimmon", "qwen2_vl"]  # fmt: skip
MODEL_TYPES = sorted(set(PRESET_TYPES) | set(TEXT_TYPES) | set(CLASS_DEFAULT_TYPES))
# what a minimal config takes from its class's defaults (the head and context sizes, MLA's parts)
SIZE_KEYS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
             "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "kv_lora_rank", "q_lora_rank",
             "sliding_window")  # fmt: skip
MINIMAL_LAYERS = 6


def base_config(model_type: str, rng: random.Random) -> dict[str, Any]:
    """A real config of ``model_type``: one of its presets, a preset's text config on its own, or the class
    defaults' sizes with no rope key at all (every rope key then comes from the class)."""
    if model_type in PRESET_TYPES:
        return copy.deepcopy(PRESETS[rng.choice(PRESET_TYPES[model_type])])
    if model_type in TEXT_TYPES:
        return copy.deepcopy(dict(PRESETS[TEXT_TYPES[model_type]]["text_config"]))
    defaults = CONFIG_MAPPING[model_type]().get_text_config()  # (a multimodal class's sizes are its text config's)
    config: dict[str, Any] = {"model_type": model_type, "num_hidden_layers": MINIMAL_LAYERS}
    for key in SIZE_KEYS:
        if getattr(defaults, key, None) is not None:
            config[key] = getattr(defaults, key)
    return config


# ---------------------------------------------------------------------------------------------- edits
ROPE_DICTS = ("rope_parameters", "rope_scaling")
THETAS = [1e4, 5e5, 1e6, 2e6, 1e7]
FACTORS = [1.0, 2.0, 4.0, 8.0, 32.0]
LENGTHS = [2048, 4096, 8192, 32768, 131072]
LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def text_part(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def rope_dict(text: dict[str, Any]) -> dict[str, Any] | None:
    """The config's rope dict that edits go to: the flat one, or the full layers' one of a per-layer-type dict."""
    for key in ROPE_DICTS:
        found = text.get(key)
        if isinstance(found, dict):
            nested = found.get("full_attention")
            return nested if isinstance(nested, dict) else found
    return None


def type_key(rope: dict[str, Any]) -> str:
    return "type" if "type" in rope and "rope_type" not in rope else "rope_type"


def rotated_pairs(text: dict[str, Any]) -> int:
    """The pairs transformers' scaled rope types rotate: int(head · partial_rotary_factor) / 2."""
    head = text.get("qk_rope_head_dim") or text.get("head_dim")
    if not head:
        head = int(text.get("hidden_size", 4096)) // int(text.get("num_attention_heads", 32))
    rope = rope_dict(text) or {}
    partial = rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 1.0))
    try:
        return int(int(head) * float(partial)) // 2
    except (TypeError, ValueError):
        return 64


def set_rope(text: dict[str, Any], fields: dict[str, Any], rng: random.Random) -> str:
    """Replace the rope dict's method (keeping its rope_theta / partial_rotary_factor), where it is."""
    rope = rope_dict(text)
    if rope is None:
        text["rope_scaling"] = rope = {}
    kept: dict[str, Any] = {key: rope[key] for key in ("rope_theta", "partial_rotary_factor") if key in rope}
    spelling = type_key(rope) if rope else rng.choice(["type", "rope_type"])
    rope.clear()
    rope.update(kept)
    rope[spelling] = fields.pop("rope_type")
    rope.update(fields)
    return spelling


def edit_yarn(text: dict[str, Any], rng: random.Random) -> str:
    """A YaRN dict with zero to three of its optional keys (the original length, the betas, attention_factor, the
    mscales, truncate)."""
    fields: dict[str, Any] = {"rope_type": "yarn", "factor": rng.choice(FACTORS[1:])}
    extras = {"original_max_position_embeddings": rng.choice(LENGTHS[:3]), "beta_fast": rng.choice([32.0, 16.0, 4]),
              "beta_slow": rng.choice([1.0, 2, 0.5]), "attention_factor": rng.choice([1.0, 0.8, 1.25]),
              "mscale": rng.choice([1.0, 0.707]), "mscale_all_dim": rng.choice([1.0, 0.0, 0.707]),
              "truncate": rng.choice([True, False])}  # fmt: skip
    chosen = rng.sample(sorted(extras), rng.randint(0, 3))
    fields.update({key: extras[key] for key in chosen})
    set_rope(text, fields, rng)
    return "yarn" + "".join(f"+{key}" for key in sorted(chosen))


def edit_llama3(text: dict[str, Any], rng: random.Random) -> str:
    """A Llama 3 dict, now and then without one of the keys its band formula needs."""
    fields = {"rope_type": "llama3", "factor": rng.choice(FACTORS[1:]), "low_freq_factor": rng.choice([1.0, 2.0]),
              "high_freq_factor": rng.choice([4.0, 8.0]),
              "original_max_position_embeddings": rng.choice(LENGTHS[:3])}  # fmt: skip
    missing = rng.choice([None, None, *LLAMA3_KEYS])  # a band key left out: transformers refuses the dict
    if missing is not None:
        del fields[missing]
    set_rope(text, fields, rng)
    return "llama3" + (f"-{missing}" if missing else "")


def edit_longrope(text: dict[str, Any], rng: random.Random) -> str:
    """A LongRoPE dict (or vLLM's spelling "su") with factor lists one per rotated pair, one off, or a single value;
    the original length in the dict, at the top level or nowhere; sometimes a factor or an attention_factor."""
    pairs = rotated_pairs(text)
    length = rng.choice([pairs, pairs, pairs - 1, pairs + 1, 1])
    short = [round(1.0 + 0.01 * i, 2) for i in range(length)]
    long = [round(1.0 + 0.25 * i, 2) for i in range(length)]
    fields: dict[str, Any] = {"rope_type": rng.choice(["longrope", "su"]), "short_factor": short, "long_factor": long}
    where = rng.choice(["dict", "top", "none"])
    if where == "dict":
        fields["original_max_position_embeddings"] = rng.choice(LENGTHS[:3])
    elif where == "top":
        text["original_max_position_embeddings"] = rng.choice(LENGTHS[:3])
    extra = rng.choice([None, "factor", "attention_factor"])
    if extra is not None:
        fields[extra] = rng.choice([1.0, 4.0, 1.2])
    spelling = fields["rope_type"]
    set_rope(text, fields, rng)
    return f"{spelling}[{length}/{pairs}]-orig_{where}" + (f"+{extra}" if extra else "")


def edit_mrope(text: dict[str, Any], rng: random.Random) -> str:
    """M-RoPE sections (t, h, w) in the rope dict: covering the rotated pairs, or missing them by one or two."""
    pairs = rotated_pairs(text)
    t = pairs // 4 + rng.choice([0, 0, 0, 2])
    h = (pairs - t) // 2
    sections = [t, h, pairs - t - h + rng.choice([0, 0, 1, -2])]
    rope = rope_dict(text)
    if rope is None:
        text["rope_scaling"] = rope = {"rope_type": "default"}
    rope["mrope_section"] = sections
    return f"mrope{sections}/{pairs}"


def to_dialect(text: dict[str, Any], to: str) -> None:
    """Move the rope dict to rope_scaling ("type" / "rope_type", rope_theta beside it) or a flat rope_parameters
    holding rope_theta."""
    rope: dict[str, Any] = {}
    for key in ROPE_DICTS:
        found = text.pop(key, None)
        if isinstance(found, dict) and not rope:
            nested = found.get("full_attention")
            rope = dict(nested if isinstance(nested, dict) else found)
    rope = rope or {"rope_type": "default"}
    kind = rope.pop("type", None) or rope.pop("rope_type", "default")
    if to == "v5":
        if "rope_theta" in text:
            rope.setdefault("rope_theta", text.pop("rope_theta"))
        text["rope_parameters"] = {"rope_type": kind, **rope}
    else:
        if "rope_theta" in rope:
            text["rope_theta"] = rope.pop("rope_theta")
        text["rope_scaling"] = {("type" if to == "v4_type" else "rope_type"): kind, **rope}


def to_per_type(text: dict[str, Any], rng: random.Random) -> None:
    """rope_parameters keyed by layer type: the full layers keep the rope dict, the sliding ones plain RoPE."""
    to_dialect(text, "v5")
    full = text.pop("rope_parameters")
    full.setdefault("rope_theta", text.get("rope_theta", 1e6))
    text["rope_parameters"] = {
        "full_attention": full,
        "sliding_attention": {"rope_type": "default", "rope_theta": rng.choice(THETAS[:2])},
    }


def no_rope_layers(text: dict[str, Any], rng: random.Random) -> str:
    """A no_rope_layers list (1: the layer rotates), one per layer or one short."""
    layers = int(text.get("num_hidden_layers", MINIMAL_LAYERS))
    length = rng.choice([layers, layers, layers - 1])
    text["no_rope_layers"] = [rng.choice([0, 1, 1]) for _ in range(length)]
    return f"no_rope_layers[{length}/{layers}]"


def pop_rope_key(text: dict[str, Any], key: str) -> None:
    text.pop(key, None)
    rope = rope_dict(text)
    if rope is not None:
        rope.pop(key, None)


def set_factor(text: dict[str, Any], rng: random.Random) -> None:
    rope = rope_dict(text)
    if rope is not None:
        rope["factor"] = rng.choice(FACTORS)


def set_in_rope(text: dict[str, Any], key: str, value: Any) -> None:
    rope = rope_dict(text)
    if rope is None:
        text["rope_parameters"] = rope = {"rope_type": "default"}
    rope[key] = value


EDITS: dict[str, Any] = {
    # rope_theta: at the top, inside the rope dict, nowhere (the class default)
    "theta": lambda t, r: t.__setitem__("rope_theta", r.choice(THETAS)),
    "theta_in_dict": lambda t, r: set_in_rope(t, "rope_theta", r.choice(THETAS)),
    "drop_theta": lambda t, r: pop_rope_key(t, "rope_theta"),
    # the rope dict: none, plain, each scaled type; its spelling (v4 type / rope_type, v5 flat, v5 per layer type)
    "drop_rope": lambda t, r: [t.pop(key, None) for key in ROPE_DICTS],
    "default": lambda t, r: set_rope(t, {"rope_type": "default"}, r),
    "linear": lambda t, r: set_rope(t, {"rope_type": "linear", "factor": r.choice(FACTORS)}, r),
    "dynamic": lambda t, r: set_rope(t, {"rope_type": "dynamic", "factor": r.choice(FACTORS[1:])}, r),
    "dynamic_orig": lambda t, r: set_rope(
        t, {"rope_type": "dynamic", "factor": r.choice(FACTORS[1:]), "original_max_position_embeddings": 4096}, r
    ),
    "yarn": edit_yarn,
    "llama3": edit_llama3,
    "longrope": edit_longrope,
    "mrope": edit_mrope,
    "factor": set_factor,
    "v4_type": lambda t, r: to_dialect(t, "v4_type"),
    "v4_rope_type": lambda t, r: to_dialect(t, "v4_rope_type"),
    "v5": lambda t, r: to_dialect(t, "v5"),
    "v5_per_type": to_per_type,
    # the rotated width
    "head_dim": lambda t, r: t.__setitem__("head_dim", r.choice([64, 96, 128, 256])),
    "drop_head_dim": lambda t, r: t.pop("head_dim", None),
    "partial": lambda t, r: t.__setitem__("partial_rotary_factor", r.choice([0.25, 0.5, 0.75, 1.0])),
    "partial_in_dict": lambda t, r: set_in_rope(t, "partial_rotary_factor", r.choice([0.25, 0.5, 1.0])),
    "drop_partial": lambda t, r: pop_rope_key(t, "partial_rotary_factor"),
    # the lengths
    "max_pos": lambda t, r: t.__setitem__("max_position_embeddings", r.choice(LENGTHS)),
    "drop_max_pos": lambda t, r: t.pop("max_position_embeddings", None),
    "orig_top": lambda t, r: t.__setitem__("original_max_position_embeddings", r.choice(LENGTHS[:3])),
    "orig_in_dict": lambda t, r: set_in_rope(t, "original_max_position_embeddings", r.choice(LENGTHS[:3])),
    "drop_orig": lambda t, r: pop_rope_key(t, "original_max_position_embeddings"),
    # NoPE layers
    "no_rope_layers": no_rope_layers,
    "no_rope_interval": lambda t, r: t.__setitem__("no_rope_layer_interval", r.choice([2, 3, 4])),
    "drop_no_rope": lambda t, r: [t.pop(key, None) for key in ("no_rope_layers", "no_rope_layer_interval")],
    # the layer schedule: the class's own pattern, or a layer count the lists no longer fit
    "drop_layer_types": lambda t, r: [t.pop(key, None) for key in ("layer_types", "sliding_window_pattern")],
    "layers": lambda t, r: t.__setitem__("num_hidden_layers", r.choice([2, 4, 7, 12])),
    # the sliding layers' θ (Gemma 3's rope_local_base_freq)
    "local_theta": lambda t, r: t.__setitem__("rope_local_base_freq", r.choice(THETAS[:2])),
    "drop_local_theta": lambda t, r: t.pop("rope_local_base_freq", None),
}


DESCRIBED = frozenset({"yarn", "llama3", "longrope", "mrope", "no_rope_layers"})  # edits that name what they chose


@dataclass(frozen=True)
class Case:
    seed: int
    model_type: str
    kinds: tuple[str, ...]  # the edits made (EDITS' names)
    edits: tuple[str, ...]  # the same, with what they chose (for the test id)
    config: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.seed}-{self.model_type}-" + "+".join(self.edits)


def make_case(seed: int) -> Case:
    """Seed → a model type (in turn, so every one is covered), a real config of it and one to three edits."""
    rng = random.Random(seed)
    model_type = MODEL_TYPES[seed % len(MODEL_TYPES)]
    config = base_config(model_type, rng)
    text = text_part(config)
    kinds = rng.sample(sorted(EDITS), rng.randint(1, 3))
    labels = []
    for edit in kinds:
        label = EDITS[edit](text, rng)
        labels.append(label if edit in DESCRIBED else edit)
    return Case(seed, model_type, tuple(kinds), tuple(labels), config)


CASES = [make_case(seed) for seed in range(560)]


# ---------------------------------------------------------------------------------------------- the rule
SHORT_LENGTH = 16
PER_TYPE_LABELS = frozenset({"full_attention", "sliding_attention", "chunked_attention"})


def long_length(hf: HfRope) -> int:
    """A length past every context length the config names, where dynamic NTK has grown its base and LongRoPE
    switched to its long factors."""
    lengths = [int(getattr(hf.text, "max_position_embeddings", 0) or 0)]
    rope = getattr(hf.text, "rope_parameters", None) or {}
    for block in [rope, *[value for value in rope.values() if isinstance(value, dict)]]:
        original = block.get("original_max_position_embeddings") if isinstance(block, dict) else None
        if isinstance(original, int | float):
            lengths.append(int(original))
    return 2 * max(lengths) + 1


def compare(case: Case, ours: ResolvedConfig, hf: HfRope) -> None:
    where = f"{case.id}: {case.config}"
    assert len(ours.layers) == hf.num_layers, where
    rotating = [hf.rotates(index) for index in range(hf.num_layers)]
    assert [layer.method is not None for layer in ours.layers] == rotating, f"NoPE layers differ, {where}"
    # as built; after a forward pass far past the context (dynamic NTK grows its base, LongRoPE takes its long
    # factors); after a short one again (dynamic NTK resets to its original frequencies)
    lengths: list[int | None] = [None, long_length(hf), SHORT_LENGTH]
    for seq_len in lengths:
        seen: dict[str | None, tuple[torch.Tensor, float]] = {}
        for layer in ours.layers:
            if layer.method is None:
                continue
            label = hf.label(layer.layer)
            if label not in seen:
                seen[label] = hf.frequencies(layer.layer, seq_len)
            expected, scaling = seen[label]
            got = layer_frequencies(layer, seq_len or 1).inv_freq.to(torch.float32)
            at = f"layer {layer.layer} ({label or 'one set'}, {hf.rope_type(layer.layer)}) at length {seq_len}"
            if label in PER_TYPE_LABELS:  # buffers per layer type: ours must type the layer as transformers does
                assert layer.layer_type == label, f"{at}: layer type {layer.layer_type}, {where}"
            assert got.shape == expected.shape, f"{at}: {tuple(got.shape)} vs {tuple(expected.shape)}, {where}"
            assert layer.rotary_dim == 2 * expected.numel(), f"{at}: rotary_dim, {where}"
            rtol = tolerance(hf.rope_parameters(layer.layer))
            try:
                torch.testing.assert_close(got, expected.float(), rtol=rtol, atol=0)
            except AssertionError as mismatch:
                raise AssertionError(f"{at}: inverse frequencies {mismatch} {where}") from None
            assert layer.attention_scale == pytest.approx(scaling, rel=1e-6), f"{at}: attention scale, {where}"
            expected_axis = hf.pair_axis(layer.layer)
            if expected_axis is not None:  # M-RoPE: each pair turns by the same axis (t, h or w)
                axis = layer_frequencies(layer).pair_axis
                assert axis is not None, f"{at}: M-RoPE in transformers ({hf.mrope_section}), not here, {where}"
                assert axis.tolist() == expected_axis.tolist(), f"{at}: M-RoPE pair axes ({hf.mrope_section}), {where}"


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_edited_configs_resolve_to_what_transformers_runs(case: Case) -> None:
    ours: ResolvedConfig | Exception
    try:
        ours = resolve_config(case.config)
    except (InvalidInput, FieldErrors) as refused:
        ours = refused
    hf: HfRope | None = None
    try:
        hf = hf_rope(case.config)
    except Exception as error:  # any refusal of transformers' (config class, rotary init, forward, attention)
        refusal = f"{type(error).__name__}: {error}"
    if hf is None:
        assert isinstance(ours, Exception) or ours.warnings, (
            f"transformers refuses ({refusal}) but ours resolves without a warning: {case.id}: {case.config}"
        )
        return
    assert not isinstance(ours, Exception), f"ours refuses ({ours}) what transformers runs: {case.id}: {case.config}"
    compare(case, ours, hf)


def test_the_cases_cover_every_model_type_and_edit() -> None:
    assert {case.model_type for case in CASES} == set(MODEL_TYPES)
    assert {kind for case in CASES for kind in case.kinds} == set(EDITS)
