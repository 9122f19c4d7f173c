"""The positional-encoding math: one module per family, each method one small registered function.

Importing this package registers every method. Families never import each other; what two or more
share lives in ``ops``. The generic half of each kind (masking, Toeplitz tables, cos/sin, the one shared
rotation) lives in ``kinds``. Shapes follow the legend in ``posenc.pe.types``.
"""

from posenc.pe import (  # noqa: F401  (imported for their registrations, in sorted order)
    absolute,
    alibi,
    fire,
    kerple,
    rope,
    rope_2d,
    rope_scaling,
    sandwich,
    t5,
    xpos,
)
from posenc.pe.kinds import (
    apply_rotary,
    bias_dense,
    bias_toeplitz,
    causal_mask,
    encoding,
    rotary_angles,
    rotary_frequencies,
    rotary_tables,
    toeplitz_to_dense,
    xpos_scale,
)
from posenc.pe.registry import MethodParams, MethodSpec, UnknownMethodError, get_method, list_methods, register
from posenc.pe.types import AbsoluteContext, BiasContext, RotaryContext, RotaryFrequencies

__all__ = [
    "AbsoluteContext",
    "BiasContext",
    "MethodParams",
    "MethodSpec",
    "RotaryContext",
    "RotaryFrequencies",
    "UnknownMethodError",
    "apply_rotary",
    "bias_dense",
    "bias_toeplitz",
    "causal_mask",
    "encoding",
    "get_method",
    "list_methods",
    "register",
    "rotary_angles",
    "rotary_frequencies",
    "rotary_tables",
    "toeplitz_to_dense",
    "xpos_scale",
]
