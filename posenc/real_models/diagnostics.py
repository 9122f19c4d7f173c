"""Diagnostics for rotary setups: what each pair does, how precise a dtype is, where two setups part, what a
KV cache does to scalings that depend on the length, and the checkpoint permutation between pairings.

A *setup* (``RotarySetup``) is what rotates one layer: a registered rotary method, its raw params (in the
method's own names), the rotated width d = rotary_dim and the pairing (half = rotate_half, interleaved =
GPT-J/Meta). ``RotarySetup.from_layer`` takes a layer of ``posenc.real_models.configs.resolve_config``. Every rotation
goes through posenc's own rotary applier (``posenc.pe.appliers.rotary_applier``), so what is diagnosed is what
the service computes.

Functions (pure; each returns a dataclass with ``to_json()``, or a tensor / list for the permutations):

- ``frequencies(setup, train_length)``: per pair k its ω_k, wavelength 2π/ω_k, rotations train_length·ω_k/2π,
  whether it wraps, and the band of methods that have bands (YaRN's ramp, Llama 3's wavelength bands);
- ``precision(setup, dtype, positions_bands)``: the error of rotating in float32 / bfloat16 / float16 against
  float64, per band of positions;
- ``compare(setup_a, setup_b, max_position, tolerance_angle, tolerance_logit, seed)``: the first position where
  the rotations, or the logits of seeded random q and k, differ by more than a tolerance;
- ``decode(setup, prefill, steps)``: KV-cache decoding against recomputation at every step;
- ``pairing_permutation(head_dim, to)`` and ``convert_qk_rows(weight, num_heads, head_dim, to)``: the row
  permutation of q / k projections between interleaved and half pairing (Meta <-> Hugging Face).

Multi-axis methods (2D RoPE) take positions (N, A); the position scans here use the diagonal p·(1, …, 1).
Errors are ``InvalidInput`` located in the function's own arguments (``("setup", "params", "factor")``,
``("setup_b", "rotary_dim")``, ``("dtype",)``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

import torch
from pydantic import ValidationError

from posenc.errors import InvalidInput, Loc, located
from posenc.pe import get_method
from posenc.pe.appliers import Layer, RotaryApplier, rotary_applier
from posenc.pe.kinds import rotary_angles
from posenc.pe.ops import Pairing, half_to_interleaved_permutation
from posenc.pe.registry import UnknownMethodError
from posenc.pe.types import RotaryFrequencies, RotaryGenerators
from posenc.real_models.configs import LayerRope, requested_layer
from posenc.schemas.compute import MAX_ROTARY_POSITION

PAIRINGS: tuple[Pairing, ...] = ("half", "interleaved")
DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
# [start, stop) position bands ``precision`` reports by default: short, the common trained lengths, long, 1M
DEFAULT_POSITION_BANDS: tuple[tuple[int, int], ...] = ((0, 1024), (1024, 8192), (8192, 65536), (65536, 1 << 20))
POSITIONS_PER_BAND = 256  # evenly spaced positions per band, both ends included
SCAN_FEATURES = 1 << 20  # positions x rotated features per chunk of the ``compare`` scan (bounds its memory)


def scan_chunk(rotary_dim: int) -> int:
    """Positions per chunk of the ``compare`` scan: ``SCAN_FEATURES`` features of float64 in each of its (C, d)
    tensors (8 MiB), whatever the rotary dim (its memory, not its result)."""
    return max(1, SCAN_FEATURES // max(rotary_dim, 1))


MAX_DECODE_LENGTH = 1 << 15  # prefill + steps: recomputation re-rotates every key each step the rotation changes


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


def _applier(setup: RotarySetup, dtype: torch.dtype = torch.float64) -> RotaryApplier:
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


def _pair_frequencies(applier: RotaryApplier, seq_len: int) -> RotaryFrequencies:
    """The applier's per-pair frequencies at ``seq_len``; block-rotation methods have none (refused)."""
    freqs = applier.frequencies(seq_len, torch.device("cpu"))
    if isinstance(freqs, RotaryGenerators):
        raise InvalidInput(
            ("method",),
            f"{applier.spec.name!r} rotates blocks by matrices R(p) = expm(Σ p_a G_a): it has no angle per pair",
        )
    return freqs


def _positions(applier: RotaryApplier, values: torch.Tensor) -> torch.Tensor:
    """Positions (N,) int64 as the method takes them: (N,) for 1D methods, the diagonal (N, A) otherwise."""
    axes = applier.spec.axes
    return values if axes <= 1 else values[:, None].expand(-1, axes).contiguous()


def _rotate(applier: RotaryApplier, t: torch.Tensor, pos: torch.Tensor, seq_len: int, *, keys: bool) -> torch.Tensor:
    """t (N, d) rotated at positions (N,) for a sequence of ``seq_len``, in (and returned as) the applier's
    dtype: the applier's ``rotate_side``, the cos/sin tables including the attention scale."""
    dtype = applier.layer.dtype
    rotated = applier.rotate_side(t.to(dtype)[None, None], _positions(applier, pos), seq_len, keys=keys)
    return rotated[0, 0].to(dtype)


def _unit_vectors(count: int, dim: int, seed: int) -> torch.Tensor:
    """``count`` seeded random unit vectors (count, dim), float64: Gaussian draws divided by their norms."""
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randn(count, dim, dtype=torch.float64, generator=generator)
    unit: torch.Tensor = draws / torch.linalg.vector_norm(draws, dim=-1, keepdim=True)
    return unit


def _positive_int(value: Any, loc: Loc, *, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(loc, f"must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidInput(loc, f"must be at most {maximum}, got {value}")
    return value


def _seed(value: Any, loc: Loc = ("seed",)) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise InvalidInput(loc, f"must be an integer in [0, 2^63), got {value!r}")
    return value


def _tolerance(value: Any, loc: Loc) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidInput(loc, f"must be a finite number >= 0, got {value!r}")
    return float(value)


@contextmanager
def _as_argument(name: str) -> Iterator[None]:
    """Errors about a setup are located under the argument it was passed as (``setup``, ``setup_a``)."""
    with located((name,)):
        yield


# ------------------------------------------------------------------------------------------------ frequencies
Band = Literal["extrapolated", "ramp", "interpolated", "high", "smooth", "low"]


@dataclass(frozen=True)
class PairFrequency:
    """One rotated pair k: ω_k, its wavelength λ_k = 2π/ω_k, rotations r_k = train_length·ω_k/2π over the
    training length, wraps = r_k >= 1 (the pair turns all the way round within train_length); where the method
    has bands, the band and the interpolation weight w_k (0: ω_k kept, 1: ω_k divided by the factor); the
    position axis the pair turns with for multi-axis methods."""

    pair: int
    inv_freq: float
    wavelength: float
    rotations: float
    wraps: bool
    band: Band | None = None
    interpolation: float | None = None
    axis: int | None = None


@dataclass(frozen=True)
class FrequencyReport:
    setup: RotarySetup
    train_length: int
    attention_scale: float  # multiplies cos and sin: logits x its square
    wrapping_pairs: int  # pairs with rotations >= 1 over train_length
    pairs: list[PairFrequency]

    def to_json(self) -> dict[str, Any]:
        return {
            "setup": self.setup.to_json(),
            "train_length": self.train_length,
            "attention_scale": self.attention_scale,
            "wrapping_pairs": self.wrapping_pairs,
            "pairs": [asdict(pair) for pair in self.pairs],
        }


def frequencies(setup: RotarySetup, train_length: int) -> FrequencyReport:
    """Per pair k of ``setup`` at a sequence of ``train_length`` (dynamic scalings read the length):

        ω_k (inv_freq),  λ_k = 2π/ω_k,  r_k = train_length·ω_k/(2π),  wraps = r_k >= 1,

    plus the band of each pair for the methods that register bands (YaRN's ramp, Llama 3's wavelength bands: the
    registry's ``bands``, computed as the method computes them), and the axis of each pair for multi-axis
    methods. Errors at ("setup", …) and ("train_length",).
    """
    length = _positive_int(train_length, ("train_length",), maximum=MAX_ROTARY_POSITION)
    with _as_argument("setup"):
        applier = _applier(setup)
        freqs = _pair_frequencies(applier, length)
    inv_freq = freqs.inv_freq.to(torch.float64)  # (d/2,)
    banding = get_method(setup.method).bands
    bands = None if banding is None else banding(applier.params, setup.rotary_dim)
    axes = freqs.pair_axis.tolist() if freqs.pair_axis is not None else None
    pairs: list[PairFrequency] = []
    for k, omega in enumerate(inv_freq.tolist()):
        rotations = length * omega / (2 * math.pi)
        pairs.append(
            PairFrequency(
                pair=k,
                inv_freq=omega,
                wavelength=2 * math.pi / omega if omega > 0 else math.inf,
                rotations=rotations,
                wraps=rotations >= 1.0,
                band=cast(Band, bands[k][0]) if bands is not None else None,
                interpolation=bands[k][1] if bands is not None else None,
                axis=int(axes[k]) if axes is not None else None,
            )
        )
    return FrequencyReport(
        setup=setup,
        train_length=length,
        attention_scale=float(freqs.attention_scale),
        wrapping_pairs=sum(pair.wraps for pair in pairs),
        pairs=pairs,
    )


# ------------------------------------------------------------------------------------------------ precision
@dataclass(frozen=True)
class BandPrecision:
    """Errors in one band [start, stop) of positions, against float64: |q'_dtype − q'_64| over every feature of
    the rotated queries, and |q'_i·k'_j − (q'_i·k'_j)_64| over every pair (i, j) of the band's positions."""

    start: int
    stop: int
    positions: int  # how many positions were rotated (evenly spaced, both ends included)
    q_max_error: float
    q_mean_error: float
    logit_max_error: float
    logit_mean_error: float


@dataclass(frozen=True)
class PrecisionReport:
    setup: RotarySetup
    dtype: str
    seed: int
    unit_roundoff: float  # u = eps/2 of dtype: the error of storing one number in it
    bands: list[BandPrecision]

    def to_json(self) -> dict[str, Any]:
        return {
            "setup": self.setup.to_json(),
            "dtype": self.dtype,
            "seed": self.seed,
            "unit_roundoff": self.unit_roundoff,
            "bands": [asdict(band) for band in self.bands],
        }


def _dtype(value: str | torch.dtype, loc: Loc = ("dtype",)) -> tuple[str, torch.dtype]:
    for name, dtype in DTYPES.items():
        if value in (name, dtype):
            return name, dtype
    raise InvalidInput(loc, f"must be one of {list(DTYPES)}, got {value!r}")


def _bands(value: Sequence[Sequence[int]] | None) -> list[tuple[int, int]]:
    given = DEFAULT_POSITION_BANDS if value is None else value
    if not given:
        raise InvalidInput(("positions_bands",), "give at least one [start, stop) band of positions")
    bands: list[tuple[int, int]] = []
    for index, band in enumerate(given):
        loc: Loc = ("positions_bands", index)
        if len(band) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in band):
            raise InvalidInput(loc, f"must be two integers [start, stop), got {band!r}")
        start, stop = int(band[0]), int(band[1])
        if not 0 <= start < stop <= MAX_ROTARY_POSITION + 1:
            raise InvalidInput(loc, f"needs 0 <= start < stop <= 2^26 + 1, got [{start}, {stop})")
        bands.append((start, stop))
    return bands


def precision(
    setup: RotarySetup,
    dtype: str | torch.dtype,
    positions_bands: Sequence[Sequence[int]] | None = None,
    *,
    seed: int = 0,
    positions_per_band: int = POSITIONS_PER_BAND,
) -> PrecisionReport:
    """How far rotating in ``dtype`` (float32, bfloat16, float16) is from float64, per band of positions.

    Per band [start, stop) (default ``DEFAULT_POSITION_BANDS``), P = ``positions_per_band`` evenly spaced
    positions p_i (both ends included), seeded random unit q_i and k_i (d = rotary_dim), first rounded to
    ``dtype``; each rotated by the same applier in ``dtype`` and in float64, for a sequence of ``stop``:

        q_error     = |R_dtype(p_i) q_i − R_64(p_i) q_i|                   (every feature, every i)
        logit_error = |⟨R_dtype(p_i) q_i, R_dtype(p_j) k_j⟩ − ⟨R_64(p_i) q_i, R_64(p_j) k_j⟩|   (every i, j)

    Both references start from the rounded inputs, so the errors are the rotation's own; the dot products are
    float64 sums of the rotated values as ``dtype`` holds them (a kernel's accumulation is not measured). The
    tables include the attention scale, so the logits carry its square. Errors at ("setup", …), ("dtype",),
    ("positions_bands", i), ("seed",), ("positions_per_band",).
    """
    dtype_name, work_dtype = _dtype(dtype)
    bands = _bands(positions_bands)
    seed = _seed(seed)
    count = _positive_int(positions_per_band, ("positions_per_band",), minimum=2, maximum=4096)
    with _as_argument("setup"):
        low = _applier(setup, work_dtype)
        reference = _applier(setup, torch.float64)
    results: list[BandPrecision] = []
    for index, (start, stop) in enumerate(bands):
        pos = torch.linspace(start, stop - 1, min(count, stop - start), dtype=torch.float64).round().to(torch.int64)
        pos = torch.unique(pos)  # (P,) sorted
        vectors = _unit_vectors(2 * pos.shape[0], setup.rotary_dim, seed + index).to(work_dtype)
        q, k = vectors[: pos.shape[0]], vectors[pos.shape[0] :]  # (P, d) each, as dtype holds them
        with _as_argument("setup"):
            q_low = _rotate(low, q, pos, stop, keys=False).to(torch.float64)
            k_low = _rotate(low, k, pos, stop, keys=True).to(torch.float64)
            q_ref = _rotate(reference, q, pos, stop, keys=False)
            k_ref = _rotate(reference, k, pos, stop, keys=True)
        q_error = (q_low - q_ref).abs()  # (P, d)
        logit_error = (q_low @ k_low.T - q_ref @ k_ref.T).abs()  # (P, P)
        results.append(
            BandPrecision(
                start=start,
                stop=stop,
                positions=int(pos.shape[0]),
                q_max_error=float(q_error.max()),
                q_mean_error=float(q_error.mean()),
                logit_max_error=float(logit_error.max()),
                logit_mean_error=float(logit_error.mean()),
            )
        )
    return PrecisionReport(
        setup=setup,
        dtype=dtype_name,
        seed=seed,
        unit_roundoff=float(torch.finfo(work_dtype).eps) / 2,
        bands=results,
    )


# ------------------------------------------------------------------------------------------------ compare
@dataclass(frozen=True)
class ComparisonReport:
    """Where two setups part, scanning positions p = 0 … max_position (each setup evaluated for one sequence of
    max_position + 1 tokens). ``first_angle_divergence``: the first p with max_k δ_k(p) > tolerance_angle,
    δ_k(p) the angle between the two rotations of pair k (wrapped to [0, π]); ``angle_pair`` the k of that
    maximum, ``angle_difference`` its δ. ``first_logit_divergence``: the first p with |ℓ_a(p) − ℓ_b(p)| >
    tolerance_logit, ℓ(p) = ⟨R(p) q, R(0) k⟩ for the seeded random unit q and k; ``logit_a`` and ``logit_b``
    there. None (and the values None) when they never do within the scan."""

    setup_a: RotarySetup
    setup_b: RotarySetup
    max_position: int
    tolerance_angle: float
    tolerance_logit: float
    seed: int
    first_angle_divergence: int | None
    angle_pair: int | None
    angle_difference: float | None
    first_logit_divergence: int | None
    logit_a: float | None
    logit_b: float | None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["setup_a"], data["setup_b"] = self.setup_a.to_json(), self.setup_b.to_json()
        return data


def wrapped_angle_difference(angle_a: torch.Tensor, angle_b: torch.Tensor) -> torch.Tensor:
    """δ = |((a − b + π) mod 2π) − π| ∈ [0, π]: the angle between two rotations (a whole turn apart is 0)."""
    return ((angle_a - angle_b + math.pi).remainder(2 * math.pi) - math.pi).abs()


def probe_vectors(rotary_dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The seeded random unit q and k (rotary_dim,) float64 that ``compare`` probes the logits with: two
    Gaussian draws (torch.Generator seeded with ``seed``), each divided by its norm."""
    q, k = _unit_vectors(2, rotary_dim, seed)
    return q, k


def compare(
    setup_a: RotarySetup,
    setup_b: RotarySetup,
    max_position: int,
    tolerance_angle: float = 1e-3,
    tolerance_logit: float = 1e-3,
    seed: int = 0,
) -> ComparisonReport:
    """A weightless divergence probe between two setups of the same rotary_dim d.

    For p = 0 … max_position, in float64, with each setup's frequencies for a sequence of max_position + 1:

        angle:  δ(p) = max_k |((p·ω_k^a − p·ω_k^b + π) mod 2π) − π|           (pair k by index: pairing-free)
        logit:  ℓ_s(p) = ⟨R_s(p) q, R_s(0) k⟩ = Σ_k c_s²·(…)                  (c_s the attention scale of s)

    through each setup's own applier (its pairing, its cos/sin scaled by c_s, so the logit carries c_s²), q and
    k seeded random unit vectors shared by both. Reports the first p with δ(p) > tolerance_angle and the first
    with |ℓ_a(p) − ℓ_b(p)| > tolerance_logit; the scan checks every position (chunked for memory), so each is
    exactly the first. Errors at ("setup_a", …), ("setup_b", …), ("max_position",), ("tolerance_angle",),
    ("tolerance_logit",), ("seed",).
    """
    last = _positive_int(max_position, ("max_position",), minimum=0, maximum=MAX_ROTARY_POSITION)
    angle_tolerance = _tolerance(tolerance_angle, ("tolerance_angle",))
    logit_tolerance = _tolerance(tolerance_logit, ("tolerance_logit",))
    seed = _seed(seed)
    seq_len = last + 1
    with _as_argument("setup_a"):
        applier_a = _applier(setup_a)
        freqs_a = _pair_frequencies(applier_a, seq_len)
    with _as_argument("setup_b"):
        applier_b = _applier(setup_b)
        freqs_b = _pair_frequencies(applier_b, seq_len)
    if setup_b.rotary_dim != setup_a.rotary_dim:
        raise InvalidInput(
            ("setup_b", "rotary_dim"),
            f"must equal setup_a's rotary_dim ({setup_a.rotary_dim}) to compare pair by pair, got {setup_b.rotary_dim}",
        )
    if freqs_a.num_axes != freqs_b.num_axes:
        raise InvalidInput(
            ("setup_b", "method"),
            f"rotates by {freqs_b.num_axes}-axis positions, setup_a by {freqs_a.num_axes}: not comparable",
        )
    q, k = probe_vectors(setup_a.rotary_dim, seed)  # (d,) each
    zero = torch.zeros(1, dtype=torch.int64)
    with _as_argument("setup_a"):
        key_a = _rotate(applier_a, k[None], zero, seq_len, keys=True)[0]  # (d,): R_a(0) k
    with _as_argument("setup_b"):
        key_b = _rotate(applier_b, k[None], zero, seq_len, keys=True)[0]

    angle_at: tuple[int, int, float] | None = None  # (position, pair, δ)
    logit_at: tuple[int, float, float] | None = None  # (position, ℓ_a, ℓ_b)
    chunk = scan_chunk(setup_a.rotary_dim)
    for start in range(0, seq_len, chunk):
        pos = torch.arange(start, min(start + chunk, seq_len), dtype=torch.int64)  # (C,)
        if angle_at is None:
            coords = _positions(applier_a, pos)
            delta = wrapped_angle_difference(rotary_angles(freqs_a, coords), rotary_angles(freqs_b, coords))  # (C, d/2)
            worst, pair = delta.max(dim=-1)  # (C,) each
            over = torch.nonzero(worst > angle_tolerance)
            if over.numel():
                row = int(over[0, 0])
                angle_at = (start + row, int(pair[row]), float(worst[row]))
        if logit_at is None:
            queries = q[None].expand(pos.shape[0], -1)  # (C, d)
            with _as_argument("setup_a"):  # a method's own check of a position (xPos's decay) names its setup
                logits_a = _rotate(applier_a, queries, pos, seq_len, keys=False) @ key_a  # (C,)
            with _as_argument("setup_b"):
                logits_b = _rotate(applier_b, queries, pos, seq_len, keys=False) @ key_b
            over = torch.nonzero((logits_a - logits_b).abs() > logit_tolerance)
            if over.numel():
                row = int(over[0, 0])
                logit_at = (start + row, float(logits_a[row]), float(logits_b[row]))
        if angle_at is not None and logit_at is not None:
            break
    return ComparisonReport(
        setup_a=setup_a,
        setup_b=setup_b,
        max_position=last,
        tolerance_angle=angle_tolerance,
        tolerance_logit=logit_tolerance,
        seed=seed,
        first_angle_divergence=angle_at[0] if angle_at else None,
        angle_pair=angle_at[1] if angle_at else None,
        angle_difference=angle_at[2] if angle_at else None,
        first_logit_divergence=logit_at[0] if logit_at else None,
        logit_a=logit_at[1] if logit_at else None,
        logit_b=logit_at[2] if logit_at else None,
    )


# ------------------------------------------------------------------------------------------------ decode
@dataclass(frozen=True)
class DecodeStep:
    """Decode step s: the token at ``position`` = prefill + s joins, the sequence is ``length`` = position + 1
    long; ``max_logit_error`` = max_j |⟨q'_n, k'_j(cached)⟩ − ⟨q'_n, k'_j(recomputed)⟩| over the keys j ≤ n."""

    step: int
    position: int
    length: int
    max_logit_error: float


@dataclass(frozen=True)
class DecodeReport:
    setup: RotarySetup
    prefill: int
    steps: int
    tolerance: float
    seed: int
    first_divergent_step: int | None  # the first step with max_logit_error > tolerance, None if none
    first_divergent_length: int | None  # the sequence length at that step
    max_logit_error: float  # over every step
    per_step: list[DecodeStep]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["setup"] = self.setup.to_json()
        return data


def _same_rotation(a: RotaryFrequencies | RotaryGenerators, b: RotaryFrequencies | RotaryGenerators) -> bool:
    """Whether two frequency sets rotate every position identically (every field equal, tensors exactly)."""
    if type(a) is not type(b):
        return False
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def decode(setup: RotarySetup, prefill: int, steps: int, *, tolerance: float = 1e-9, seed: int = 0) -> DecodeReport:
    """KV-cache decoding against recomputation, in float64, one query and one key per position (seeded random
    unit vectors), f_ℓ the setup's frequencies for a sequence of length ℓ:

        prefill:   keys 0 … P−1 rotated once with f_P (one pass over the prompt), P = ``prefill``
        step s:    n = P + s, ℓ = n + 1; q_n and the new k_n rotated with f_ℓ; k_n joins the cache
        cached:    c_j = ⟨R_{f_ℓ}(n) q_n, R_{f_{ℓ_j}}(j) k_j⟩, ℓ_j = P for j < P, else j + 1 (when it was added)
        recomputed r_j = ⟨R_{f_ℓ}(n) q_n, R_{f_ℓ}(j) k_j⟩ (every key re-rotated with the current length's f)
        error(s) = max_j |c_j − r_j|

    Plain RoPE's f does not depend on ℓ, so the error is exactly 0; dynamic NTK (ℓ > L grows the base) and
    LongRoPE's length rule (long factors once ℓ > L) first diverge at the step whose length first exceeds L.
    Errors at ("setup", …), ("prefill",), ("steps",), ("tolerance",), ("seed",).
    """
    first = _positive_int(prefill, ("prefill",), maximum=MAX_DECODE_LENGTH)
    count = _positive_int(steps, ("steps",), maximum=MAX_DECODE_LENGTH - first)
    limit = _tolerance(tolerance, ("tolerance",))
    seed = _seed(seed)
    total = first + count
    with _as_argument("setup"):
        applier = _applier(setup)
    vectors = _unit_vectors(2 * total, setup.rotary_dim, seed)  # (2T, d)
    queries, keys = vectors[:total], vectors[total:]  # (T, d) each
    pos = torch.arange(total, dtype=torch.int64)
    cpu = torch.device("cpu")
    cache = torch.empty(total, setup.rotary_dim, dtype=torch.float64)  # (T, d): keys as they were cached
    # every key so far rotated with the latest frequencies; None while that is exactly the cache (no change yet)
    recomputed: torch.Tensor | None = None
    with _as_argument("setup"):
        cache[:first] = _rotate(applier, keys[:first], pos[:first], first, keys=True)  # (P, d) rotated with f_P
        latest = applier.frequencies(first, cpu)
        per_step: list[DecodeStep] = []
        for step in range(count):
            n, length = first + step, first + step + 1
            current = applier.frequencies(length, cpu)
            cache[n : n + 1] = _rotate(applier, keys[n : n + 1], pos[n : n + 1], length, keys=True)  # (1, d)
            if not _same_rotation(current, latest):
                # the rotation changed: every key re-rotated (identical to re-rotating them all every step)
                recomputed = _rotate(applier, keys[: n + 1], pos[: n + 1], length, keys=True)  # (n + 1, d)
            elif recomputed is not None:
                recomputed = torch.cat((recomputed, cache[n : n + 1]))  # (n + 1, d)
            latest = current
            query = _rotate(applier, queries[n : n + 1], pos[n : n + 1], length, keys=False)[0]  # (d,)
            # while no rotation changed, the recomputed keys are the cached ones, bit for bit: the error is 0
            error = 0.0 if recomputed is None else float(((cache[: n + 1] - recomputed) @ query).abs().max())
            per_step.append(DecodeStep(step=step, position=n, length=length, max_logit_error=error))
    divergent = next((entry for entry in per_step if entry.max_logit_error > limit), None)
    return DecodeReport(
        setup=setup,
        prefill=first,
        steps=count,
        tolerance=limit,
        seed=seed,
        first_divergent_step=divergent.step if divergent else None,
        first_divergent_length=divergent.length if divergent else None,
        max_logit_error=max(entry.max_logit_error for entry in per_step),
        per_step=per_step,
    )


def rotation_changes(setup: RotarySetup, shortest: int, longest: int) -> bool:
    """Whether ``setup`` rotates differently for sequences of ``shortest`` and ``longest`` tokens (dynamic NTK
    past its original length, LongRoPE's factor switch): then a KV cache holds stale keys. Two evaluations of the
    frequencies; a rotation that depends on the length only between the two is not missed, since every such
    method changes monotonically with it. Errors at ("method",), ("params", …), ("rotary_dim",)."""
    applier = _applier(setup)
    cpu = torch.device("cpu")
    return not _same_rotation(applier.frequencies(shortest, cpu), applier.frequencies(longest, cpu))


# ------------------------------------------------------------------------------------------------ pairings
def pairing_permutation(head_dim: int, to: Pairing, *, rotary_dim: int | None = None) -> list[int]:
    """The row order within one head that converts between pairings: new row r = old row order[r].

    to = "half" (Meta/interleaved -> Hugging Face): order = [0, 2, …, d−2, 1, 3, …, d−1], so the pair (2i, 2i+1)
    becomes (i, i + d/2): the permute of transformers' convert_llama_weights_to_hf,
    w.view(H, d/2, 2, D).transpose(1, 2). to = "interleaved": its inverse, [0, d/2, 1, d/2 + 1, …]. With
    ``rotary_dim`` r < head_dim only the first r features (the rotated ones) are reordered. Errors at
    ("head_dim",), ("rotary_dim",), ("to",).
    """
    dim = _positive_int(head_dim, ("head_dim",))
    rotated = dim if rotary_dim is None else _positive_int(rotary_dim, ("rotary_dim",), maximum=dim)
    if rotated % 2:
        raise InvalidInput(("rotary_dim",) if rotary_dim is not None else ("head_dim",), f"must be even, got {rotated}")
    if to not in PAIRINGS:
        raise InvalidInput(("to",), f"must be one of {list(PAIRINGS)}, got {to!r}")
    to_half = half_to_interleaved_permutation(rotated)  # (r,)
    order = to_half if to == "half" else torch.argsort(to_half)
    return [*order.tolist(), *range(rotated, dim)]


def convert_qk_rows(
    weight: torch.Tensor, num_heads: int, head_dim: int, to: Pairing, *, rotary_dim: int | None = None
) -> torch.Tensor:
    """A q or k projection (its weight (H·d, in_features), or its bias (H·d,)) with the rows of every head
    reordered by ``pairing_permutation(head_dim, to)``: converted[h·d + r] = weight[h·d + order[r]].

    Rotating q = W x with interleaved pairing and then reordering equals reordering W and rotating with half
    pairing (and the other way round with to="interleaved"); q·k is unchanged since both sides move together.
    Errors at ("weight", "shape"), ("num_heads",), ("head_dim",), ("rotary_dim",), ("to",).
    """
    heads = _positive_int(num_heads, ("num_heads",))
    order = torch.tensor(pairing_permutation(head_dim, to, rotary_dim=rotary_dim), dtype=torch.int64)  # (d,)
    if not isinstance(weight, torch.Tensor) or weight.dim() not in (1, 2) or weight.shape[0] != heads * head_dim:
        shape = list(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise InvalidInput(
            ("weight", "shape"),
            f"expected (num_heads·head_dim = {heads * head_dim}, in_features) or ({heads * head_dim},), got {shape}",
        )
    rows = (torch.arange(heads, dtype=torch.int64)[:, None] * head_dim + order[None, :]).reshape(-1)  # (H·d,)
    return weight.index_select(0, rows.to(weight.device))
