"""The rotation of one layer (``RotarySetup``, ``rotation``) and what every diagnostic shares to run it.

A *setup* is what rotates one layer: a registered rotary method, its raw params (in the method's own names), the
rotated width d = rotary_dim and the pairing (half = rotate_half, interleaved = GPT-J/Meta).
``RotarySetup.from_layer`` takes a layer of ``posenc.real_models.configs.resolve_config``; ``rotation`` resolves a
request's method or config layer into one. Every rotation goes through posenc's own rotary applier
(``posenc.pe.appliers.rotary_applier``, built by ``setup_applier``), so what is diagnosed is what the service
computes.

The helpers here are the diagnostics' common plumbing (``posenc.real_models.diagnostics`` and
``posenc.real_models.divergence``): the applier of a setup, its per-pair frequencies, rotating vectors at
positions, seeded random unit vectors, the checks of scalar arguments and ``as_argument``, which locates a setup's
errors under the argument it was passed as.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from pydantic import ValidationError

from posenc.errors import InvalidInput, Loc, located
from posenc.pe import get_method
from posenc.pe.appliers import Layer, RotaryApplier, rotary_applier
from posenc.pe.ops import Pairing
from posenc.pe.registry import UnknownMethodError
from posenc.pe.types import RotaryFrequencies, RotaryGenerators
from posenc.real_models.configs import LayerRope, requested_layer

PAIRINGS: tuple[Pairing, ...] = ("half", "interleaved")


# ------------------------------------------------------------------------------------------------ the setup
@dataclass(frozen=True)
class RotarySetup:
    """The rotation of one layer, the one type for it (``/v1/rotary``, ``/v1/rope/*``, the doctor): ``method``
    (a registered rotary method), ``params`` (raw, the method's names), ``rotary_dim`` (d, the rotated features:
    pairs k ∈ [0, d/2)), ``pairing`` (half or interleaved), ``start`` (where the rotated slice begins in a head:
    0, or an MLA head's rope part after its no-rope part) and, for a config's layer, ``layer`` (its resolved
    setup). :func:`rotation` makes one from a method or from a config and a layer index."""

    method: str
    params: Mapping[str, Any] = field(default_factory=dict)
    rotary_dim: int = 128
    pairing: Pairing = "half"
    start: int = 0
    layer: LayerRope | None = field(default=None, compare=False)  # where it came from; not part of the rotation

    @classmethod
    def from_layer(cls, layer: LayerRope) -> RotarySetup:
        """The setup of a resolved config layer; a NoPE layer (no method) is refused at ("layer",)."""
        if layer.method is None:
            raise InvalidInput(
                ("layer",),
                f"layer {layer.layer} ({layer.layer_type}) is a NoPE layer: it has no rotation"
                + (" (its query temperature: POST /v1/rope/temperature)" if layer.query_temperature else ""),
            )
        pairing: Pairing = "interleaved" if layer.pairing == "interleaved" else "half"
        return cls(
            method=layer.method,
            params=dict(layer.params),
            rotary_dim=layer.rotary_dim,
            pairing=pairing,
            start=layer.rotary_slice[0],
            layer=layer,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "params": dict(self.params),
            "rotary_dim": self.rotary_dim,
            "pairing": self.pairing,
        }


def rotation(
    method: str | None,
    params: Mapping[str, Any],
    rotary_dim: int,
    pairing: Pairing | None,
    config: Mapping[str, Any] | str | None = None,
    layer: int | None = None,
) -> RotarySetup:
    """The one way a request's rotation is resolved: a method with its params, rotated features and pairing (None:
    the method's own, the first of its registered ``pairings``), or a model config's layer
    (``posenc.real_models.configs.config_layer``: errors at ("config", …) and ("layer",); a NoPE layer refused at
    ("layer",))."""
    chosen = requested_layer(method, config, layer)
    if chosen is None:
        assert method is not None  # (requested_layer refuses neither)
        if pairing is None:
            try:
                pairing = cast(Pairing, get_method(method).pairings[0])
            except UnknownMethodError:
                pairing = "half"  # the method is refused, naming it, when the setup is applied
        return RotarySetup(method, dict(params), rotary_dim, pairing)
    return RotarySetup.from_layer(chosen)


def setup_applier(setup: RotarySetup, dtype: torch.dtype = torch.float64) -> RotaryApplier:
    """The service's rotary applier for ``setup`` computing in ``dtype`` (one head of d = rotary_dim features).
    Errors at ("method",), ("params", …), ("rotary_dim",), ("pairing",)."""
    try:
        spec = get_method(setup.method)
    except UnknownMethodError as exc:
        raise InvalidInput(("method",), str(exc)) from None
    if isinstance(setup.rotary_dim, bool) or not isinstance(setup.rotary_dim, int) or setup.rotary_dim < 2:
        raise InvalidInput(("rotary_dim",), f"must be an even integer >= 2, got {setup.rotary_dim!r}")
    if setup.rotary_dim % 2:
        raise InvalidInput(("rotary_dim",), f"rotary methods rotate pairs: must be even, got {setup.rotary_dim}")
    if setup.pairing not in PAIRINGS:
        raise InvalidInput(("pairing",), f"must be one of {list(PAIRINGS)}, got {setup.pairing!r}")
    try:
        params = spec.parse_params(dict(setup.params))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput(("params", *first["loc"]), str(first["msg"]).removeprefix("Value error, ")) from None
    layer = Layer(
        num_heads=1,
        head_dim=setup.rotary_dim,
        causal=True,
        pairing=setup.pairing,
        rotary_dim=setup.rotary_dim,
        dtype=dtype,
    )
    applier = rotary_applier(spec, params, layer)
    applier.check()
    return applier


def pair_frequencies(applier: RotaryApplier, seq_len: int) -> RotaryFrequencies:
    """The applier's per-pair frequencies at ``seq_len``; block-rotation methods have none (refused)."""
    freqs = applier.frequencies(seq_len, torch.device("cpu"))
    if isinstance(freqs, RotaryGenerators):
        raise InvalidInput(
            ("method",),
            f"{applier.spec.name!r} rotates blocks by matrices R(p) = expm(Σ p_a G_a): it has no angle per pair",
        )
    return freqs


def method_positions(applier: RotaryApplier, values: torch.Tensor) -> torch.Tensor:
    """Positions (N,) int64 as the method takes them: (N,) for 1D methods, the diagonal (N, A) otherwise."""
    axes = applier.spec.axes
    return values if axes <= 1 else values[:, None].expand(-1, axes).contiguous()


def rotate(applier: RotaryApplier, t: torch.Tensor, pos: torch.Tensor, seq_len: int, *, keys: bool) -> torch.Tensor:
    """t (N, d) rotated at positions (N,) for a sequence of ``seq_len``, in (and returned as) the applier's
    dtype: the applier's ``rotate_side``, the cos/sin tables including the attention scale."""
    dtype = applier.layer.dtype
    rotated = applier.rotate_side(t.to(dtype)[None, None], method_positions(applier, pos), seq_len, keys=keys)
    return rotated[0, 0].to(dtype)


def unit_vectors(count: int, dim: int, seed: int) -> torch.Tensor:
    """``count`` seeded random unit vectors (count, dim), float64: Gaussian draws divided by their norms."""
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randn(count, dim, dtype=torch.float64, generator=generator)
    unit: torch.Tensor = draws / torch.linalg.vector_norm(draws, dim=-1, keepdim=True)
    return unit


def positive_int(value: Any, loc: Loc, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an integer in [minimum, maximum] (no bool), refused at ``loc`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(loc, f"must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidInput(loc, f"must be at most {maximum}, got {value}")
    return value


def valid_seed(value: Any, loc: Loc = ("seed",)) -> int:
    """``value`` as a torch.Generator seed, an integer in [0, 2^63) (no bool), refused at ``loc`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise InvalidInput(loc, f"must be an integer in [0, 2^63), got {value!r}")
    return value


def valid_tolerance(value: Any, loc: Loc) -> float:
    """``value`` as a finite tolerance >= 0 (no bool), refused at ``loc`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidInput(loc, f"must be a finite number >= 0, got {value!r}")
    return float(value)


@contextmanager
def as_argument(name: str) -> Iterator[None]:
    """Errors about a setup are located under the argument it was passed as (``setup``, ``setup_a``)."""
    with located((name,)):
        yield
