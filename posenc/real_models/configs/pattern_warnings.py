"""The warnings a resolved config's layer pattern raises: what a port or an engine gets wrong with it, said with
the layers it concerns (sliding layers scaled, a narrowed rotation where the model uses proportional RoPE, MLA
rotated in a NoPE model, the sparse indexer's pairing, what the registry says of each method, dynamic scaling's
stale cache)."""

from __future__ import annotations

from collections.abc import Sequence

from posenc.pe import get_method
from posenc.real_models.config_fields import TextFields
from posenc.real_models.configs.common import FULL, LINEAR, SLIDING, ConfigWarning, LayerRope, takes_fraction
from posenc.real_models.model_types import ModelTypeRecord


def _sliding_theta_key(record: ModelTypeRecord) -> str:
    """Where a model type's config gives the sliding layers' θ."""
    by_type = record.layer_type_rope
    if by_type is not None and by_type.sliding_theta_key is None:
        return f"rope_parameters.{SLIDING}.rope_theta"
    return "rope_local_base_freq"


def pattern_warnings(
    text: TextFields, record: ModelTypeRecord, layers: Sequence[LayerRope], nested: bool
) -> list[ConfigWarning]:
    """Every warning the resolved ``layers`` of a config of ``record``'s model type raise."""
    model_type = record.model_type
    warnings: list[ConfigWarning] = []
    sliding_scaled = [
        layer.layer
        for layer in layers
        if layer.layer_type == SLIDING and layer.method is not None and layer.params.get("factor", 1) != 1
    ]
    expects_unscaled = record.sliding_unscaled or text.rope_local_base_freq is not None
    if sliding_scaled and expects_unscaled:
        first = layers[sliding_scaled[0]]
        fix = (
            "Give the sliding_attention rope parameters rope_type default and the local rope_theta."
            if nested
            else "Give rope parameters per layer type."
        )
        warnings.append(
            ConfigWarning(
                "sliding_layers_scaled",
                f"the sliding-window layers get the global scaling ({first.method}, factor "
                f"{first.params.get('factor')}); {model_type} trains them unscaled with their own rope_theta "
                f"({_sliding_theta_key(record)}). {fix}",
                sliding_scaled,
                {
                    "method": first.method,
                    "factor": first.params.get("factor"),
                    "base": first.params.get("base"),
                    "per_layer_type": nested,
                },
            )
        )
    narrowed = [
        layer.layer
        for layer in layers
        if record.proportional_global
        and layer.layer_type == FULL
        and layer.method is not None
        and not takes_fraction(layer.method)
        and layer.rotary_dim < layer.head_dim
    ]
    if narrowed:
        first = layers[narrowed[0]]
        warnings.append(
            ConfigWarning(
                "partial_rotary_not_proportional",
                f"{model_type}'s global layers rotate with proportional RoPE (rope_type proportional): ω over the "
                f"whole {first.head_dim}-wide head and the pairs past partial_rotary_factor·d/2 left unrotated. "
                f"This config rotates a {first.rotary_dim}-feature slice with ω over {first.rotary_dim} instead "
                "(another denominator, other features): set rope_type proportional for full_attention.",
                narrowed,
                {"method": first.method, "rotary_dim": first.rotary_dim, "head_dim": first.head_dim},
            )
        )
    vllm_rotated = [layer.layer for layer in layers if layer.layer_type != LINEAR]
    if record.nope_mla and text.qk_rope_head_dim is not None and not text.mla_use_nope and vllm_rotated:
        warnings.append(
            ConfigWarning(
                "mla_rope_in_nope_model",
                f"{model_type}'s MLA layers are trained without position (its own code has no rotary embedding), "
                f"but this config does not say mla_use_nope: true, so vLLM rotates the "
                f"qk_rope_head_dim={text.qk_rope_head_dim} part of every MLA head: positions the model never saw. "
                "Resolved without rotation, as transformers runs the model. Set mla_use_nope: true.",
                vllm_rotated,
                {"mla_use_nope": text.mla_use_nope, "qk_rope_head_dim": text.qk_rope_head_dim, "model_code": "NoPE"},
            )
        )
    indexed = [layer.layer for layer in layers if layer.indexer is not None]
    if indexed and record.indexer_interleaved and text.indexer_rope_interleave is None:
        warnings.append(
            ConfigWarning(
                "indexer_pairing_unspecified",
                f"the config does not say indexer_rope_interleave: {model_type}'s own code rotates the sparse "
                "indexer's q and k in interleaved pairs (resolved so), but vLLM reads a missing key as false and "
                "rotates them in halves, which picks other keys. Set indexer_rope_interleave: true.",
                indexed,
                {"model_code": "interleaved", "vllm_default": "half", "indexer_rope_interleave": None},
            )
        )
    by_method: dict[str, list[int]] = {}
    for layer in layers:
        if layer.method is not None:
            by_method.setdefault(layer.method, []).append(layer.layer)
    for name, indices in by_method.items():  # what the registry says of each method a config uses (static YaRN)
        describe = get_method(name).config_warning
        said = None if describe is None else describe(layers[indices[0]].params, layers[indices[0]].attention_scale)
        if said is not None:
            code, message, evidence = said
            warnings.append(ConfigWarning(code, message, indices, evidence))
    dynamic = [
        layer.layer
        for layer in layers
        if layer.method is not None and get_method(layer.method).depends_on_length(layer.params)
    ]
    if dynamic:
        first = layers[dynamic[0]]
        warnings.append(
            ConfigWarning(
                "dynamic_scaling_stale_cache",
                f"{first.method} changes its frequencies with the sequence length: keys cached before the length "
                f"passed original_max_position_embeddings={first.params.get('original_max_position_embeddings')} "
                "were rotated with other frequencies than the queries after it (recompute or do not cache).",
                dynamic,
                {
                    "method": first.method,
                    "original_max_position_embeddings": first.params.get("original_max_position_embeddings"),
                },
            )
        )
    return warnings
