"""diffusers video and image transformers (``transformer/config.json`` with a ``_class_name``): every block
rotates q and k by (t, h, w) with the method its class names (FLUX.1, Wan 2.1)."""

from __future__ import annotations

from posenc.errors import InvalidInput
from posenc.pe import list_methods
from posenc.real_models.config_fields import DiffusersFields
from posenc.real_models.configs.common import FULL, LayerRope, ResolvedConfig

# a diffusers config's _class_name -> the method its blocks rotate with (each method's ``config_classes``)
DIFFUSERS_TRANSFORMERS: dict[str, str] = {name: spec.name for spec in list_methods() for name in spec.config_classes}
DIFFUSERS_THETA = 10000.0  # both models fix θ in code (FluxPosEmbed(theta=10000), WanRotaryPosEmbed's default)
FLUX_AXES_DIMS = (16, 56, 56)


def resolve_diffusers(config: DiffusersFields) -> ResolvedConfig:
    """A diffusers video/image transformer config (``transformer/config.json``): every block rotates its q and k
    by (t, h, w) with ``rope_nd``, interleaved pairs. FLUX.1: ``axes_dims_rope`` (16, 56, 56), its double and
    single blocks; Wan 2.1: h = w = 2·(d // 6) features, t the rest."""
    name, head_dim = config.class_name, config.attention_head_dim
    if name == "FluxTransformer2DModel":
        dims = list(config.axes_dims_rope or FLUX_AXES_DIMS)
        if any(dim % 2 for dim in dims):
            raise InvalidInput(("axes_dims_rope",), f"each axis rotates pairs of features: must be even, got {dims}")
        if sum(dims) > head_dim:
            raise InvalidInput(
                ("axes_dims_rope",), f"rotates {sum(dims)} features, more than attention_head_dim = {head_dim}"
            )
        blocks = config.num_layers + config.num_single_layers
    else:
        spatial = 2 * (head_dim // 6)
        dims = [head_dim - 2 * spatial, spatial, spatial]
        blocks = config.num_layers
    params = {"axes_dims": dims, "theta": DIFFUSERS_THETA}
    rotary_dim = sum(dims)
    layers = [
        LayerRope(
            layer=index,
            layer_type=FULL,
            method=DIFFUSERS_TRANSFORMERS[name],
            params=params,
            head_dim=head_dim,
            rotary_dim=rotary_dim,
            rotary_slice=(0, rotary_dim),
            pairing="interleaved",
            attention_scale=1.0,
            softmax_scale=head_dim**-0.5,
            softmax_scale_source="attention_head_dim ** -0.5",
        )
        for index in range(blocks)
    ]
    return ResolvedConfig(model_type=name, layers=layers, warnings=[])
