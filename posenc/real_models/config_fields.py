"""Model configs read as data: the rope-relevant keys of a ``config.json``, typed and range-checked before the
resolver (``posenc.real_models.configs``) uses any of them.

A config is an arbitrary JSON object, so nothing about it is trusted: a key the resolver reads is validated
here once (its type, finite, positive where it must be, within the bounds below), and an error names the key the
user sent with its path inside the config (``text_config.rope_theta``, ``rope_scaling.factor``,
``axes_dims_rope.0``). Keys posenc does not read are kept as they are and never looked at, except that every
string anywhere in the config must be valid Unicode (a lone surrogate cannot be sent back in an answer) and the
whole config is bounded (``MAX_CONFIG_VALUES`` values, ``MAX_CONFIG_CHARS`` characters), checked before anything
else reads it (``check_json_value``, the first step of ``resolve_config``).

The bounds keep one request's work bounded (every per-layer list and every size is capped), while staying far
above any published model: the deepest has about 128 decoder layers, the widest head 512 features.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from posenc.errors import FieldErrors, InvalidInput, Loc

MAX_LAYERS = 1024  # decoder layers (or diffusers blocks) a config may have
MAX_HEAD_DIM = 8192  # features per attention head, as rotary_dim everywhere else
MAX_HEADS = 4096
MAX_HIDDEN = 1 << 20
MAX_POSITIONS = 1 << 26  # lengths read from a config (max_position_embeddings, windows): rotary angles stay exact
MAX_FACTOR = 1 << 20  # scaling factors
MAX_THETA = 1e30  # rope_theta: far above any model's (1e6-1e7), below where θ^(-2k/d) loses every frequency
MAX_STRING = 256  # characters of a name the resolver reads (model_type, rope_type, a layer type)
MAX_DEPTH = 32  # nesting of the config object
# The size of a whole config: every value (numbers, strings, booleans, nulls, arrays and objects, the config
# itself included; keys are not values) and every character of its strings and keys. Published config.json files
# hold at most a few thousand values in a few tens of KiB (a multimodal model's nested configs, a quantization
# config's module list); the limits are far above them, and bound the work (and the stored job) that keys the
# resolver never reads could cost.
MAX_CONFIG_VALUES = 20_000
MAX_CONFIG_CHARS = 256 * 1024

_STRICT = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, frozen=True)

PositiveInt = Annotated[int, Field(ge=1)]
Layers = Annotated[int, Field(ge=1, le=MAX_LAYERS)]
HeadDim = Annotated[int, Field(ge=1, le=MAX_HEAD_DIM)]
Length = Annotated[int, Field(ge=1, le=MAX_POSITIONS)]
Theta = Annotated[float, Field(gt=0, le=MAX_THETA)]
Factor = Annotated[float, Field(gt=0, le=MAX_FACTOR)]
Fraction = Annotated[float, Field(gt=0, le=1)]
Name = Annotated[str, Field(max_length=MAX_STRING)]


class RopeFields(BaseModel):
    """One rope dict: ``rope_scaling`` (v4), ``rope_parameters`` (v5), or one layer type's entry of either."""

    model_config = _STRICT

    rope_type: Name | None = None
    type: Name | None = None  # the older spelling of rope_type
    rope_theta: Theta | None = None
    partial_rotary_factor: Fraction | None = None
    factor: Factor | None = None
    original_max_position_embeddings: Length | None = None
    max_position_embeddings: Length | None = None
    beta_fast: Factor | None = None
    beta_slow: Factor | None = None
    attention_factor: Factor | None = None
    mscale: Annotated[float, Field(ge=0, le=MAX_FACTOR)] | None = None
    mscale_all_dim: Annotated[float, Field(ge=0, le=MAX_FACTOR)] | None = None
    truncate: bool | None = None
    short_factor: list[Factor] | None = Field(default=None, max_length=MAX_HEAD_DIM // 2)
    long_factor: list[Factor] | None = Field(default=None, max_length=MAX_HEAD_DIM // 2)
    low_freq_factor: Factor | None = None
    high_freq_factor: Factor | None = None
    mrope_section: list[Annotated[int, Field(ge=0, le=MAX_HEAD_DIM // 2)]] | None = Field(
        default=None, min_length=3, max_length=3
    )
    mrope_interleaved: bool | None = None
    # Mistral 3 / Ministral 3 / Mistral 4: q times 1 + β·ln(1 + floor(n / original_max_position_embeddings))
    llama_4_scaling_beta: Annotated[float, Field(ge=0, le=MAX_FACTOR)] | None = None

    @property
    def kind(self) -> str:
        """The rope type as spelled (``rope_type``, else the older ``type``), ``default`` when neither."""
        return self.rope_type or self.type or "default"

    def given(self, key: str) -> Any:
        """The typed value of ``key`` if the config gave it (not None), else None."""
        return getattr(self, key) if key in self.model_fields_set else None


class TextFields(BaseModel):
    """The text model's keys (the config itself, or its ``text_config``)."""

    model_config = _STRICT

    model_type: Name | None = None
    num_hidden_layers: Layers | None = None
    num_attention_heads: Annotated[int, Field(ge=1, le=MAX_HEADS)] | None = None
    hidden_size: Annotated[int, Field(ge=1, le=MAX_HIDDEN)] | None = None
    head_dim: HeadDim | None = None
    rope_theta: Theta | None = None
    partial_rotary_factor: Fraction | None = None
    rotary_pct: Fraction | None = None
    rotary_dim: HeadDim | None = None
    max_position_embeddings: Length | None = None
    original_max_position_embeddings: Length | None = None
    rope_scaling: dict[str, Any] | None = None
    rope_parameters: dict[str, Any] | None = None
    rope_local_base_freq: Theta | None = None
    layer_types: list[Name] | None = Field(default=None, max_length=MAX_LAYERS)
    sliding_window: Length | None = None
    sliding_window_pattern: Layers | None = None
    attention_chunk_size: Length | None = None
    no_rope_layers: list[Annotated[int, Field(ge=0, le=1)]] | None = Field(default=None, max_length=MAX_LAYERS)
    no_rope_layer_interval: Layers | None = None
    query_pre_attn_scalar: Annotated[float, Field(gt=0, le=MAX_HIDDEN)] | None = None
    qk_rope_head_dim: HeadDim | None = None
    qk_nope_head_dim: Annotated[int, Field(ge=0, le=MAX_HEAD_DIM)] | None = None
    rope_interleave: bool | None = None
    is_neox_style: bool | None = None
    attn_temperature_tuning: Any = None  # Llama 4: true (Hugging Face) or a non-negative integer (Meta's params)
    floor_scale: Annotated[float, Field(gt=0, le=MAX_POSITIONS)] | None = None
    attn_scale: Annotated[float, Field(ge=0, le=MAX_FACTOR)] | None = None
    global_head_dim: HeadDim | None = None  # Gemma 4: the full-attention layers' head width
    full_attention_interval: Layers | None = None  # Qwen3-Next: every n-th layer full attention, the rest linear
    index_head_dim: HeadDim | None = None  # DeepSeek-V3.2 / GLM-5 sparse-attention indexer's head width
    indexer_rope_interleave: bool | None = None  # the indexer's pairing (vLLM; absent: half)
    mla_use_nope: bool | None = None  # Kimi Linear / GLM-5: the MLA layers rotate nothing
    linear_attn_config: dict[str, Any] | None = None  # Kimi Linear: kda_layers / full_attn_layers (1-based)
    # DeepSeek-V4: per-layer compression (0 sliding only, 4 compressed sparse, 128 heavily compressed; may list the
    # MTP layers after the decoder's), the compressed layers' rates and their own rope_theta
    compress_ratios: list[Annotated[int, Field(ge=0, le=MAX_POSITIONS)]] | None = Field(
        default=None, max_length=2 * MAX_LAYERS
    )
    compress_rates: dict[Name, Length] | None = None
    compress_rate_csa: Length | None = None
    compress_rate_hca: Length | None = None
    compress_rope_theta: Theta | None = None

    @field_validator("sliding_window", mode="before")
    @classmethod
    def _zero_window_is_none(cls, value: Any) -> Any:
        # a window of 0 is no window (Qwen2-MoE's class sets 0 when use_sliding_window is false)
        return None if value == 0 and not isinstance(value, bool) else value

    @field_validator("attn_temperature_tuning", mode="before")
    @classmethod
    def _on_or_off(cls, value: Any) -> Any:
        if value is None or isinstance(value, bool) or (isinstance(value, int) and value >= 0):
            return value
        raise ValueError("must be true, false or a non-negative integer")


class LinearAttentionFields(BaseModel):
    """Kimi Linear's ``linear_attn_config``: which layers (1-based, as its checkpoints count) are linear (KDA) and
    which full attention."""

    model_config = _STRICT

    kda_layers: list[Layers] | None = Field(default=None, max_length=MAX_LAYERS)
    full_attn_layers: list[Layers] | None = Field(default=None, max_length=MAX_LAYERS)


class DiffusersFields(BaseModel):
    """A diffusers transformer's ``config.json`` (``_class_name``): the keys its rotary embedding reads."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, frozen=True, populate_by_name=True)

    class_name: Name = Field(alias="_class_name")
    attention_head_dim: HeadDim
    num_layers: Annotated[int, Field(ge=0, le=MAX_LAYERS)] = 0
    num_single_layers: Annotated[int, Field(ge=0, le=MAX_LAYERS)] = 0
    axes_dims_rope: list[HeadDim] | None = Field(default=None, min_length=3, max_length=3)

    @field_validator("num_single_layers")
    @classmethod
    def _blocks_bounded(cls, value: int, info: Any) -> int:
        if value + info.data.get("num_layers", 0) > MAX_LAYERS:
            raise ValueError(f"num_layers + num_single_layers must be at most {MAX_LAYERS}")
        return value


ModelT = TypeVar("ModelT", bound=BaseModel)


def read(model: type[ModelT], value: Any, loc: Loc = ()) -> ModelT:
    """``value`` validated as ``model``; every error located at ``loc`` + the key path inside ``value``."""
    if not isinstance(value, Mapping):
        raise InvalidInput(loc, f"must be an object, got {_type_name(value)}")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise FieldErrors(
            {"loc": (*loc, *error["loc"]), "msg": _message(error), "type": error["type"]} for error in errors
        ) from None


def check_json_value(value: Any, loc: Loc = ()) -> int:
    """Refuse what no answer could carry back, and what no model's config holds: a string (or a key) that is not
    valid Unicode (a lone surrogate from a ``\\ud800`` escape), nesting deeper than ``MAX_DEPTH``, more than
    ``MAX_CONFIG_VALUES`` values or more than ``MAX_CONFIG_CHARS`` characters of strings and keys (errors at
    ``loc``, the config itself). Returns how many values it holds.

    The sizes are counted as the walk goes (a container's entries when it is reached, a string's length before it
    is read), so a config over a limit is refused after at most the limit's worth of work, whatever it holds."""
    stack: list[tuple[Any, Loc]] = [(value, loc)]
    values = 1
    chars = 0
    while stack:
        item, where = stack.pop()
        if len(where) - len(loc) > MAX_DEPTH:
            raise InvalidInput(where, f"is nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, str):
            chars = _count_chars(chars, len(item), loc)
            _check_text(item, where)
        elif isinstance(item, Mapping | list | tuple):
            values += len(item)
            if values > MAX_CONFIG_VALUES:
                raise InvalidInput(loc, _too_large(f"more than {MAX_CONFIG_VALUES} values", "MAX_CONFIG_VALUES"))
            if isinstance(item, Mapping):
                for key, child in item.items():
                    name = str(key)
                    chars = _count_chars(chars, len(name), loc)
                    _check_text(name, (*where, name) if _encodable(name) else where)
                    stack.append((child, (*where, name)))
            else:
                stack.extend((child, (*where, index)) for index, child in enumerate(item))
    return values


def _count_chars(chars: int, more: int, loc: Loc) -> int:
    chars += more
    if chars > MAX_CONFIG_CHARS:
        raise InvalidInput(
            loc, _too_large(f"more than {MAX_CONFIG_CHARS} characters of strings and keys", "MAX_CONFIG_CHARS")
        )
    return chars


def _too_large(what: str, name: str) -> str:
    return (
        f"holds {what}, over the limit of a model config ({name}; a published config.json holds at most a few "
        "thousand values in a few tens of KiB): send the config.json as published, without keys added to it"
    )


def _check_text(text: str, loc: Loc) -> None:
    if not _encodable(text):
        raise InvalidInput(loc, "holds a string that is not valid Unicode (a lone surrogate escape such as \\ud800)")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _message(error: Mapping[str, Any]) -> str:
    if error["type"] == "float_type" and isinstance(error.get("input"), int) and not isinstance(error["input"], bool):
        return "is too large to be a finite number"
    if error["type"] == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    if error["type"] in ("float_type", "int_type", "bool_type", "string_type", "list_type", "dict_type"):
        return f"{error['msg']} (JSON {_json_kind(error['type'])} expected)"
    return str(error["msg"])


def _json_kind(error_type: str) -> str:
    return {
        "float_type": "number",
        "int_type": "integer",
        "bool_type": "true or false",
        "string_type": "string",
        "list_type": "array",
        "dict_type": "object",
    }[error_type]


def _type_name(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
