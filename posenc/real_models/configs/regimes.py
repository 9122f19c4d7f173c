"""DeepSeek-V4's rotary setup: its rope parameters are keyed by regime ("main", "compress"), not by layer type,
and each layer's type (sliding, compressed sparse, heavily compressed) picks its regime; the compressed layers also
attend to compressed keys, and the compressed sparse layers' indexer rotates with the compress regime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posenc.errors import InvalidInput, Loc
from posenc.real_models.config_fields import RopeFields, TextFields, read
from posenc.real_models.configs.common import (
    ATTENTION_SINK_NOTE,
    HF_ROPE_TYPES,
    SLIDING,
    LayerRope,
    ResolvedConfig,
    required,
)
from posenc.real_models.configs.method_params import Method, attention_scale, method_params
from posenc.real_models.configs.pattern_warnings import pattern_warnings
from posenc.real_models.configs.rope_blocks import Block
from posenc.real_models.model_types import ModelTypeRecord

# DeepSeek-V4 (transformers' DeepseekV4Config and modeling_deepseek_v4): its rope parameters are keyed by regime, not
# by layer type. "main" rotates the sliding-window-only layers (plain RoPE at rope_theta); "compress" rotates every
# other layer's queries and keys, its compressor's compressed keys and its indexer's (compress_rope_theta with the
# config's rope_scaling, whose YaRN gets attention_factor 1 unless the config gives one). Each head rotates its
# trailing partial_rotary_factor·head_dim features (qk_rope_head_dim) in interleaved pairs.
MAIN_REGIME, COMPRESS_REGIME = "main", "compress"
COMPRESSED_SPARSE, HEAVILY_COMPRESSED = "compressed_sparse_attention", "heavily_compressed_attention"
V4_LAYER_TYPES = (SLIDING, COMPRESSED_SPARSE, HEAVILY_COMPRESSED)
V4_RATIO_TYPES = {0: SLIDING, 4: COMPRESSED_SPARSE, 128: HEAVILY_COMPRESSED}  # compress_ratios' values (transformers)
V4_DEFAULT_RATES = {COMPRESSED_SPARSE: 4, HEAVILY_COMPRESSED: 128}
V4_COMPRESS_THETA = 160000.0  # DeepseekV4Config's compress_rope_theta
V4_ROPE_FRACTION = 64 / 512  # DeepseekV4Config's default partial_rotary_factor (qk_rope_head_dim / head_dim)
V4_INDEX_HEAD_DIM = 128  # DeepseekV4Config's index_head_dim
V4_UNIT_FACTOR_ROPE_TYPE = "yarn"  # the flat compress rope dict DeepseekV4Config gives attention_factor 1.0
V4_KEY_IS_VALUE_NOTE = (
    "keys are values (one shared KV head): the value picked up the key's rotation, so the attention output's "
    "rotated features are turned back by the query's position (cos, -sin) before the output projection"
)
V4_COMPRESSED_NOTE = (
    "besides the last sliding_window raw keys, attends to compressed keys, one per compress_rate tokens: entry i "
    "is rotated like the layer's keys at position i·compress_rate (the first token of its window)"
)


@dataclass(frozen=True)
class Regime:
    """One of DeepSeek-V4's rope regimes: its method and params, and the trailing features it rotates."""

    method: Method
    fraction: float  # of head_dim (partial_rotary_factor as read)
    rotary_dim: int
    attention_scale: float


def _v4_layer_types(text: TextFields, layers: int) -> list[str]:
    """``layer_types``, else ``compress_ratios`` (0, 4, 128 per layer; entries past the decoder's layers are the MTP
    layers', which transformers drops)."""
    if text.layer_types is not None:
        if len(text.layer_types) != layers:
            raise InvalidInput(("layer_types",), f"must list one attention type per layer ({layers})")
        for index, kind in enumerate(text.layer_types):
            if kind not in V4_LAYER_TYPES:
                raise InvalidInput(("layer_types", index), f"{kind!r} is not one of {list(V4_LAYER_TYPES)}")
        return list(text.layer_types)
    ratios = text.compress_ratios
    if ratios is None:
        raise InvalidInput(
            ("compress_ratios",),
            "is required (or layer_types): which layers attend to compressed keys decides their rotation, and "
            "transformers' DeepseekV4Config would fill in another model's schedule (V4-Pro's)",
        )
    if len(ratios) < layers:
        raise InvalidInput(("compress_ratios",), f"must give one ratio per layer ({layers}), got {len(ratios)}")
    for index, ratio in enumerate(ratios[:layers]):
        if ratio not in V4_RATIO_TYPES:
            raise InvalidInput(
                ("compress_ratios", index),
                f"is {ratio}: each layer's is 0 (sliding window only), 4 (compressed sparse) or 128 (heavily "
                "compressed), as transformers reads them",
            )
    return [V4_RATIO_TYPES[ratio] for ratio in ratios[:layers]]


def _v4_rates(text: TextFields) -> dict[str, int]:
    rates = dict(V4_DEFAULT_RATES)
    rates |= {kind: rate for kind, rate in (text.compress_rates or {}).items() if kind in rates}
    if text.compress_rate_csa is not None:
        rates[COMPRESSED_SPARSE] = text.compress_rate_csa
    if text.compress_rate_hca is not None:
        rates[HEAVILY_COMPRESSED] = text.compress_rate_hca
    return rates


def v4_regimes(text: TextFields, head_dim: int) -> tuple[dict[str, Regime], bool]:
    """The "main" and "compress" regimes as DeepseekV4Config builds them, and whether the config nests them.

    Nested (``rope_parameters: {"main": {...}, "compress": {...}}``, as transformers saves it): each dict as it is,
    partial_rotary_factor 1 where it says none. Flat (the published ``rope_scaling`` next to ``rope_theta`` and
    ``compress_rope_theta``): main is plain RoPE at rope_theta; compress is the rope dict at compress_rope_theta
    (the dict's own rope_theta is not read), its YaRN with attention_factor 1 unless given; both rotate
    partial_rotary_factor (else qk_rope_head_dim / head_dim, else 64 / 512) of each head."""
    source = "rope_parameters" if text.rope_parameters is not None else "rope_scaling"
    given: Mapping[str, Any] = getattr(text, source) or {}
    nested = isinstance(given.get(MAIN_REGIME), Mapping) and isinstance(given.get(COMPRESS_REGIME), Mapping)
    blocks: dict[str, tuple[Block, float, Loc]] = {}
    if nested:
        for regime in (MAIN_REGIME, COMPRESS_REGIME):
            loc: Loc = (source, regime)
            fields = read(RopeFields, given[regime], loc)
            if fields.rope_theta is None:
                raise InvalidInput((*loc, "rope_theta"), f"is required: the {regime} regime's base (transformers)")
            fraction = fields.partial_rotary_factor if fields.partial_rotary_factor is not None else 1.0
            blocks[regime] = (Block(fields, loc), fraction, (*loc, "partial_rotary_factor"))
    else:
        flat = {key: value for key, value in given.items() if key not in (MAIN_REGIME, COMPRESS_REGIME)}
        fields = read(RopeFields, flat, (source,))
        if text.partial_rotary_factor is not None:
            fraction, fraction_loc = text.partial_rotary_factor, ("partial_rotary_factor",)
        elif text.qk_rope_head_dim is not None:
            fraction, fraction_loc = text.qk_rope_head_dim / head_dim, ("qk_rope_head_dim",)
        else:
            fraction, fraction_loc = V4_ROPE_FRACTION, ("head_dim",)
        theta = text.compress_rope_theta if text.compress_rope_theta is not None else V4_COMPRESS_THETA
        update: dict[str, Any] = {"rope_theta": theta}
        if HF_ROPE_TYPES.get(fields.kind, fields.kind) == V4_UNIT_FACTOR_ROPE_TYPE and fields.attention_factor is None:
            update["attention_factor"] = 1.0
        theta_loc = ("compress_rope_theta",) if text.compress_rope_theta is not None else (source,)
        main = Block(RopeFields(rope_type="default"), (source,))
        blocks[MAIN_REGIME] = (main, fraction, fraction_loc)
        blocks[COMPRESS_REGIME] = (
            Block(fields.model_copy(update=update), (source,), theta_loc, regime=True),
            fraction,
            fraction_loc,
        )
    regimes: dict[str, Regime] = {}
    for regime, (block, fraction, where) in blocks.items():
        method = method_params(block, text)
        rotary_dim = int(head_dim * fraction)
        rotary_dim += rotary_dim % 2  # (inv_freq over arange(0, dim, 2): an odd width rotates one more feature)
        if not 2 <= rotary_dim <= head_dim:
            raise InvalidInput(where, f"gives {rotary_dim} rotated features of a {head_dim}-dim head")
        regimes[regime] = Regime(method, fraction, rotary_dim, attention_scale(method, rotary_dim))
    return regimes, nested


def resolve_regimes(text: TextFields, record: ModelTypeRecord, model_type: str | None) -> ResolvedConfig:
    """DeepSeek-V4: each layer rotates with the regime of its layer type (sliding: main; compressed sparse and
    heavily compressed: compress), over the trailing rotated features of its head_dim-wide heads, interleaved;
    the compressed layers' compressed keys with the same rotation at i·compress_rate (``compress_rate``), and the
    compressed sparse layers' indexer (``indexer``) with the compress regime over its index_head_dim features."""
    layers = required(text.num_hidden_layers, "num_hidden_layers")
    head_dim = required(text.head_dim, "head_dim")  # (transformers' default 512 is not derived from the sizes)
    types = _v4_layer_types(text, layers)
    rates = _v4_rates(text)
    regimes, nested = v4_regimes(text, head_dim)
    index_dim = text.index_head_dim if text.index_head_dim is not None else V4_INDEX_HEAD_DIM
    scale, source = head_dim**-0.5, "head_dim ** -0.5"

    def setup(index: int, layer_type: str, regime: Regime, width: int, **extra: Any) -> LayerRope:
        return LayerRope(
            layer=index,
            layer_type=layer_type,
            method=regime.method.name,
            params=dict(regime.method.params),
            head_dim=width,
            rotary_dim=regime.rotary_dim,
            rotary_slice=(width - regime.rotary_dim, width),
            pairing="interleaved",
            attention_scale=regime.attention_scale,
            **extra,
        )

    resolved: list[LayerRope] = []
    for index, layer_type in enumerate(types):
        notes = [ATTENTION_SINK_NOTE, V4_KEY_IS_VALUE_NOTE]
        if layer_type == SLIDING:
            layer = setup(index, layer_type, regimes[MAIN_REGIME], head_dim, softmax_scale=scale,
                          softmax_scale_source=source, window=text.sliding_window, notes=notes)  # fmt: skip
            resolved.append(layer)
            continue
        compress = regimes[COMPRESS_REGIME]
        indexer = None
        if layer_type == COMPRESSED_SPARSE:
            if compress.rotary_dim > index_dim:
                raise InvalidInput(
                    ("index_head_dim",), f"is {index_dim}: the indexer rotates {compress.rotary_dim} of its features"
                )
            indexer = setup(index, layer_type, compress, index_dim, softmax_scale=index_dim**-0.5,
                            softmax_scale_source="index_head_dim ** -0.5", compress_rate=rates[layer_type])  # fmt: skip
        layer = setup(index, layer_type, compress, head_dim, softmax_scale=scale, softmax_scale_source=source,
                      indexer=indexer, notes=[*notes, V4_COMPRESSED_NOTE], compress_rate=rates[layer_type])  # fmt: skip
        resolved.append(layer)
    warnings = pattern_warnings(text, record, resolved, nested)
    return ResolvedConfig(model_type=model_type, layers=resolved, warnings=warnings)
