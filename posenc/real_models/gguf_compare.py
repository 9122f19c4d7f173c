"""A GGUF's rope setup compared with the Hugging Face config it was made from: the fields the conversion dropped,
renamed, changed or wrote where llama.cpp does not read them, and the layers whose resolved rotations differ,
judged by their frequencies and scales rather than by how the fields are spelled."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gguf.constants import Keys

from posenc.errors import located
from posenc.pe.registry import get_method
from posenc.real_models.configs import (
    ConfigWarning,
    LayerRope,
    convert_config,
    resolve_config,
    rope_frequencies,
    text_config,
)
from posenc.real_models.gguf_files import (
    GGUF_KEYS,
    GGUF_OTHER_SPELLINGS,
    GGUF_TENSOR_FIELDS,
    NO_KEY,
    config_from_gguf,
)

LLAMA3_FIELDS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
# the rope fields compared with a config (in its v4 spelling: rope_scaling next to rope_theta); None: no GGUF key
COMPARED_FIELDS: dict[str, str | None] = {
    "rope_theta": "rope_theta",
    "rope_local_base_freq": "rope_local_base_freq",
    "max_position_embeddings": "max_position_embeddings",
    "sliding_window": "sliding_window",
    "rope_scaling.rope_type": "rope_type",
    "rope_scaling.factor": "factor",
    "rope_scaling.original_max_position_embeddings": "original_max_position_embeddings",
    "rope_scaling.low_freq_factor": None,
    "rope_scaling.high_freq_factor": None,
    "rope_scaling.attention_factor": "attention_factor",
    "rope_scaling.beta_fast": "beta_fast",
    "rope_scaling.beta_slow": "beta_slow",
    "rope_scaling.mscale_all_dim": "mscale_all_dim",
    "rope_scaling.mscale": None,
    "rope_scaling.truncate": None,
    "rope_scaling.mrope_section": "mrope_section",
    "rope_scaling.short_factor": None,
    "rope_scaling.long_factor": None,
}
# top-level fields that only set frequencies: where every layer turns the same, their spelling does not matter
FREQUENCY_FIELDS = frozenset({"rope_theta", "rope_local_base_freq"})
LAYER_FIELDS = ("layer_type", "method", "params", "rotary_dim", "rotary_slice", "pairing", "attention_scale",
                "softmax_scale", "window", "mrope_section")  # fmt: skip


# ---------------------------------------------------------------------------------------------- comparing
def _v4_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config's compared fields, by their v4 names (``rope_scaling.factor``)."""
    text = text_config(convert_config(config, "v4"))
    scaling = text.get("rope_scaling") or {}
    fields: dict[str, Any] = {}
    for name in COMPARED_FIELDS:
        source, key = (scaling, name.split(".", 1)[1]) if name.startswith("rope_scaling.") else (text, name)
        value = source.get(key) if isinstance(source, Mapping) else None
        if value is None and name == "rope_scaling.rope_type" and isinstance(scaling, Mapping):
            value = scaling.get("type")  # the v4 dialect's older spelling (DeepSeek-V3's config.json)
        if value is not None:
            fields[name] = value
    fields.setdefault("rope_scaling.rope_type", "default")
    return fields


def _same(a: Any, b: Any) -> bool:
    """Equal as GGUF stores them: floats to float32 (a GGUF keeps float32), lists element by element."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool | str):
        return bool(np.float32(a) == np.float32(b)) or math.isclose(a, b, rel_tol=1e-6)
    return bool(a == b)


def compare(
    metadata: Mapping[str, Any], tensors: Mapping[str, Sequence[float]] | None, config: Mapping[str, Any]
) -> list[ConfigWarning]:
    """Every rope field of ``config`` (a Hugging Face config.json) that the GGUF dropped, renamed or changed, with
    both values (codes ``gguf_field_dropped``, ``gguf_field_renamed``, ``gguf_field_changed``, and
    ``gguf_field_ignored`` for a key the file has but llama.cpp does not read for its architecture), and the
    layers whose resolved rotations differ (``gguf_layers_differ``). Frequencies and scales decide: where every
    layer turns and scales the same, rope_scaling fields spelled otherwise (a Llama 3 band with other bounds
    giving the same wavelengths, a default left out) draw no warning. Errors in ``config`` at ("against", ...)."""
    converted = config_from_gguf(metadata, tensors)
    with located(("against",)):
        expected = _v4_fields(config)
        reference = resolve_config(config)
    with located(("metadata",)):
        found = _v4_fields(converted.config)
    resolved = converted.resolve()
    arch = str(metadata[Keys.General.ARCHITECTURE])
    llama3 = expected.get("rope_scaling.rope_type") == "llama3"
    layers = _layer_differences(reference.layers, resolved.layers)
    warnings: list[ConfigWarning] = []
    for name, wanted in expected.items():
        got = found.get(name) if name in converted.origins else None  # None: not in the GGUF (a default)
        if _same(wanted, "default" if got is None and name == "rope_scaling.rope_type" else got):
            continue
        if not layers and (name.startswith("rope_scaling.") or name in FREQUENCY_FIELDS):
            continue  # the same rotation, spelled otherwise (or a key left out whose default llama.cpp runs)
        short = COMPARED_FIELDS[name]
        key = converted.origins.get(name) or _expected_key(name, short, arch, llama3)
        evidence = {"field": name, "config": wanted, "gguf": got, "gguf_key": key}
        ignored = converted.ignored.get(name.removeprefix("rope_scaling."))
        if ignored is not None:
            warnings.append(
                ConfigWarning(
                    "gguf_field_ignored",
                    f"{name} is {wanted!r} in the config and in the GGUF as {ignored[0]} = {ignored[1]!r}, but "
                    f"llama.cpp's {arch} loader does not read that key: it runs {ignored[2]!r}.",
                    [],
                    {**evidence, "gguf": ignored[2], "gguf_key": ignored[0], "gguf_value": ignored[1]},
                )
            )
            continue
        if got is not None:
            where = (
                key
                if key in metadata or key in (tensors or {})
                else f"llama.cpp's {arch} default" + ("; no GGUF key sets it" if key == NO_KEY else f": no {key}")
            )
            warnings.append(
                ConfigWarning(
                    "gguf_field_changed",
                    f"{name} is {wanted!r} in the config and {got!r} in the GGUF ({where}).",
                    [],
                    evidence,
                )
            )
            continue
        other = _other_spelling(metadata, short, arch)
        if other is not None:
            warnings.append(
                ConfigWarning(
                    "gguf_field_renamed",
                    f"{name} ({wanted!r} in the config) is in the GGUF as {other[0]} = {other[1]!r}, not as {key}: "
                    "llama.cpp reads only the latter.",
                    [],
                    {**evidence, "gguf": other[1], "gguf_key_found": other[0]},
                )
            )
            continue
        where = (
            f"{key} is in the GGUF but does not give it"
            if key in metadata or key in (tensors or {})
            else (f"no {key} in the GGUF" if key else "llama.cpp has no GGUF key for it")
        )
        warnings.append(
            ConfigWarning(
                "gguf_field_dropped",
                f"{name} is {wanted!r} in the config and missing from the GGUF ({where}).",
                [],
                evidence,
            )
        )
    warnings.extend(layers)
    return warnings


def _expected_key(name: str, short: str | None, arch: str, llama3: bool) -> str | None:
    if llama3 and name.removeprefix("rope_scaling.") in (*LLAMA3_FIELDS, "rope_type"):
        return "rope_freqs.weight"  # llama.cpp's converter writes the llama3 scaling as this tensor only
    tensor = GGUF_TENSOR_FIELDS.get(name.removeprefix("rope_scaling."))
    if tensor is not None:
        return tensor  # LongRoPE's factors
    return GGUF_KEYS[short].format(arch=arch) if short is not None else None


def _other_spelling(metadata: Mapping[str, Any], short: str | None, arch: str) -> tuple[str, Any] | None:
    """The field under another spelling: an older key, or the right key under another architecture's prefix."""
    if short is None:
        return None
    for template in GGUF_OTHER_SPELLINGS.get(short, ()):
        key = template.format(arch=arch)
        if key in metadata:
            return key, metadata[key]
    suffix = GGUF_KEYS[short].removeprefix("{arch}")
    for key, value in metadata.items():
        if key.endswith(suffix) and key != GGUF_KEYS[short].format(arch=arch) and "." not in key.removesuffix(suffix):
            return key, value
    return None


def _layer_differences(config_layers: Sequence[LayerRope], gguf_layers: Sequence[LayerRope]) -> list[ConfigWarning]:
    """Layers whose resolved setups differ, grouped by the same differences."""
    if len(config_layers) != len(gguf_layers):
        return [
            ConfigWarning(
                "gguf_layers_differ",
                f"the config has {len(config_layers)} layers and the GGUF {len(gguf_layers)}.",
                [],
                {"config": {"layers": len(config_layers)}, "gguf": {"layers": len(gguf_layers)}},
            )
        ]
    groups: dict[str, tuple[list[int], dict[str, Any], dict[str, Any]]] = {}
    for ours, theirs in zip(config_layers, gguf_layers, strict=True):
        a, b = ours.to_json(), theirs.to_json()
        if a["method"] == b["method"] and a["method"] is not None:  # a param left at its default is the same value
            a["params"], b["params"] = (
                _with_defaults(a["method"], a["params"]),
                _with_defaults(b["method"], b["params"]),
            )
        differing = [name for name in LAYER_FIELDS if not _same_layer_value(a[name], b[name])]
        if {"method", "params"} & set(differing) and _same_frequencies(ours, theirs):
            differing = [name for name in differing if name not in ("method", "params")]  # other spellings only
        if differing:
            left, right = {name: a[name] for name in differing}, {name: b[name] for name in differing}
            entry = groups.setdefault(repr((left, right)), ([], left, right))
            entry[0].append(ours.layer)
    return [
        ConfigWarning(
            "gguf_layers_differ",
            f"{len(layers)} layer(s) resolve differently from the GGUF than from the config: {', '.join(left)}.",
            layers,
            {"config": left, "gguf": right},
        )
        for layers, left, right in groups.values()
    ]


# the context lengths at which the frequencies are compared: a method that depends on it (LongRoPE's short and long
# factors, dynamic NTK) is compared on both sides of its switch
COMPARED_LENGTHS = (1, 1 << 22)


def _same_frequencies(a: LayerRope, b: LayerRope) -> bool:
    """Whether two rotated layers turn each pair by the same frequencies (to 1e-6: a GGUF holds float32 values)
    at every compared length: the same rotation under other params (a Llama 3 band with other low, high and
    original bounds that give the same wavelengths) or another method's name."""
    if a.method is None or b.method is None or a.rotary_dim != b.rotary_dim:
        return False
    for length in COMPARED_LENGTHS:
        ours = rope_frequencies(a.method, a.params, a.rotary_dim, length).inv_freq.double()
        theirs = rope_frequencies(b.method, b.params, b.rotary_dim, length).inv_freq.double()
        if ours.shape != theirs.shape or not bool(((ours - theirs).abs() <= 1e-6 * ours.abs()).all()):
            return False
    return True


def _with_defaults(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with every default of ``method``'s params filled in (as the method runs them)."""
    return get_method(method).parse_params(params).model_dump()


def _same_layer_value(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    return _same(a, b)
