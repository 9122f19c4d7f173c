"""How many features of a head rotate, and where they start: the partial-rotation keys (``partial_rotary_factor``
at the top level or in the rope dict, ``rotary_pct``, ``rotary_dim``), MLA's ``qk_rope_head_dim``, and what the
model type's rotary code does with them (its record: some ignore partial rotation for the default rope type, some
for every rope type)."""

from __future__ import annotations

from collections.abc import Mapping

from posenc.errors import InvalidInput
from posenc.real_models.config_fields import RopeFields, TextFields
from posenc.real_models.configs.common import (
    DEFAULT_ROPE_METHOD,
    ROPE_TYPE_METHODS,
    ConfigWarning,
    takes_fraction,
)
from posenc.real_models.model_types import ModelTypeRecord


def rotary_dims(
    text: TextFields, head_dim: int, rope: RopeFields, method: str, record: ModelTypeRecord
) -> tuple[int, int, list[ConfigWarning]]:
    """(rotary_dim, start of the rotated slice, warnings) from the partial-rotation keys; a method that reads the
    fraction itself (``FRACTION_PARAM``: Gemma 4's proportional RoPE) turns the whole head. An MLA head rotates its
    trailing qk_rope_head_dim features; a partial rotation there narrows them where the model's rotary code reads
    it (DeepSeek's scaled rope types), and nowhere else."""
    warnings: list[ConfigWarning] = []
    if takes_fraction(method):
        return head_dim, 0, warnings
    width, start = head_dim, 0
    if text.qk_rope_head_dim is not None:
        if text.qk_rope_head_dim < 2 or text.qk_rope_head_dim % 2:
            raise InvalidInput(
                ("qk_rope_head_dim",),
                f"is {text.qk_rope_head_dim}: the rotated part of an MLA head turns features in pairs, so it is an "
                "even number of at least 2",
            )
        width, start = text.qk_rope_head_dim, text.qk_nope_head_dim or 0
        if record.default_rope_spans_head and method == DEFAULT_ROPE_METHOD:
            warnings.append(_spans_head_warning(record.model_type, width, head_dim))
        if record.partial_rotary_ignored is None:  # (Mistral 4: its partial_rotary_factor is qk_rope / head_dim)
            return width, start, warnings
    spellings = _spellings(text, rope, width)
    top, inner = text.partial_rotary_factor, rope.partial_rotary_factor
    if top is not None and inner is not None and top != inner:
        warnings.append(
            ConfigWarning(
                "partial_rotary_conflict",
                f"partial_rotary_factor is {top} at the top level and {inner} in the rope parameters; readers that "
                "apply one after the other rotate the product of the two. Resolved with the rope parameters' value "
                "(Hugging Face v5 priority).",
                [],
                {"top_level": top, "rope_parameters": inner},
            )
        )
    elif len(set(spellings.values())) > 1:
        warnings.append(
            ConfigWarning(
                "partial_rotary_conflict",
                f"the partial-rotation keys disagree on the rotated features: {spellings}; resolved with the first.",
                [],
                {"rotary_dims": spellings},
            )
        )
    rotary_dim = next(iter(spellings.values()), width)
    every_type = record.partial_rotary_ignored
    if spellings and rotary_dim != width and every_type is not None:
        # (rope_type "default", M-RoPE's sections included)
        ignored = every_type or ROPE_TYPE_METHODS.get(rope.kind) == DEFAULT_ROPE_METHOD
        warnings.append(whole_head_warning(record.model_type, method, spellings, rotary_dim, width, ignored))
        if ignored:
            return width, start, warnings
    if rotary_dim % 2:
        rotary_dim += 1  # Hugging Face rounds an odd partial rotary dim up (inv_freq over arange(0, dim, 2))
    if not 2 <= rotary_dim <= width:
        key = next(iter(spellings), "head_dim").removeprefix("rope_parameters.")
        raise InvalidInput((key,), f"gives {rotary_dim} rotated features of a {width}-dim head")
    return rotary_dim, start, warnings


def _spellings(text: TextFields, rope: RopeFields, width: int) -> dict[str, int]:
    """The rotated features each partial-rotation key asks for, in the order of priority (rope dict first)."""
    spellings: dict[str, int] = {}
    if rope.partial_rotary_factor is not None:
        spellings["rope_parameters.partial_rotary_factor"] = int(width * rope.partial_rotary_factor)
    if text.partial_rotary_factor is not None:
        spellings["partial_rotary_factor"] = int(width * text.partial_rotary_factor)
    if text.rotary_pct is not None:
        spellings["rotary_pct"] = int(width * text.rotary_pct)
    if text.rotary_dim is not None:
        spellings["rotary_dim"] = text.rotary_dim
    return spellings


def whole_head_warning(
    model_type: str | None, method: str, spellings: Mapping[str, int], rotary_dim: int, head_dim: int, ignored: bool
) -> ConfigWarning:
    """partial_rotary_ignored (the model's rotary code turns the whole head: resolved so) or
    partial_rotary_does_not_fit (its frequencies narrow but its attention rotates the whole head: it fails)."""
    keys = ", ".join(spellings)
    if ignored:
        return ConfigWarning(
            "partial_rotary_ignored",
            f"{keys} asks for {rotary_dim} rotated features of each {head_dim}-feature head, but {model_type}'s "
            f"rotary embedding in transformers computes {method} over the whole head and never reads it. "
            f"Resolved over the whole head; an engine that reads {keys} rotates {rotary_dim}.",
            [],
            {"keys": dict(spellings), "head_dim": head_dim, "rotary_dim_asked": rotary_dim},
        )
    return ConfigWarning(
        "partial_rotary_does_not_fit",
        f"{keys} asks for {rotary_dim} rotated features of each {head_dim}-feature head: for {method}, transformers "
        f"computes frequencies for {rotary_dim} features, but {model_type}'s attention applies them to the whole "
        f"head, and its forward pass fails on the shapes. Resolved with {rotary_dim}; this config does not run in "
        "transformers.",
        [],
        {"keys": dict(spellings), "head_dim": head_dim, "rotary_dim_asked": rotary_dim},
    )


def _spans_head_warning(model_type: str, rope_dim: int, head_dim: int) -> ConfigWarning:
    return ConfigWarning(
        "mla_default_rope_does_not_fit",
        f"{model_type}'s rotary embedding in transformers computes default RoPE over head_dim = {head_dim} "
        f"features, but its MLA heads rotate their last {rope_dim} (qk_rope_head_dim): its forward pass fails on "
        f"the shapes. Resolved over the {rope_dim} rope features; this config does not run in transformers (its "
        "published configs use YaRN, whose partial_rotary_factor narrows the frequencies to the rope part).",
        [],
        {"head_dim": head_dim, "qk_rope_head_dim": rope_dim},
    )
