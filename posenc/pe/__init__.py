"""The positional-encoding math: one module per family, each method one small registered function.

Importing this package registers every method: every module of the package that is not one of the shared
ones below is a family, imported here in sorted order, so a new family module registers itself with no list to
update. Families never import each other; what two or more share lives in ``ops``. The generic half of each kind
(masking, Toeplitz tables, cos/sin, the one shared rotation) lives in ``kinds``, and how each kind enters an
attention layer in ``appliers``. Shapes follow the legend in ``posenc.pe.types``.
"""

import importlib
import pkgutil

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


SHARED_MODULES = frozenset({"appliers", "kinds", "ops", "registry", "types"})
FAMILIES = tuple(sorted(info.name for info in pkgutil.iter_modules(__path__) if info.name not in SHARED_MODULES))
for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
