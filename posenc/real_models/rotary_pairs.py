"""What one rotary setup does pair by pair: its frequencies and bands, its precision in a dtype, and the
checkpoint permutation between pairings.

- ``frequencies(setup, train_length)``: per pair k its ω_k, wavelength 2π/ω_k, rotations train_length·ω_k/2π,
  whether it wraps, and the band of methods that have bands (YaRN's ramp, Llama 3's wavelength bands);
- ``precision(setup, dtype, positions_bands)``: the error of rotating in float32 / bfloat16 / float16 against
  float64, per band of positions;
- ``pairing_permutation(head_dim, to)`` and ``convert_qk_rows(weight, num_heads, head_dim, to)``: the row
  permutation of q / k projections between interleaved and half pairing (Meta <-> Hugging Face).

Setups are ``posenc.real_models.rotary_setup.RotarySetup``; every rotation goes through the service's rotary
applier. ``posenc.real_models.diagnostics`` re-exports every name here. Errors are ``InvalidInput`` located in the
function's own arguments (``("setup", "params", "factor")``, ``("dtype",)``, ``("positions_bands", i)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast

import torch

from posenc.errors import InvalidInput, Loc
from posenc.pe import get_method
from posenc.pe.ops import Pairing, half_to_interleaved_permutation
from posenc.real_models.rotary_setup import (
    PAIRINGS,
    RotarySetup,
    as_argument,
    pair_frequencies,
    positive_int,
    rotate,
    setup_applier,
    unit_vectors,
    valid_seed,
)
from posenc.schemas.compute import MAX_ROTARY_POSITION

DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
# [start, stop) position bands ``precision`` reports by default: short, the common trained lengths, long, 1M
DEFAULT_POSITION_BANDS: tuple[tuple[int, int], ...] = ((0, 1024), (1024, 8192), (8192, 65536), (65536, 1 << 20))
POSITIONS_PER_BAND = 256  # evenly spaced positions per band, both ends included


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
    length = positive_int(train_length, ("train_length",), maximum=MAX_ROTARY_POSITION)
    with as_argument("setup"):
        applier = setup_applier(setup)
        freqs = pair_frequencies(applier, length)
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
    seed = valid_seed(seed)
    count = positive_int(positions_per_band, ("positions_per_band",), minimum=2, maximum=4096)
    with as_argument("setup"):
        low = setup_applier(setup, work_dtype)
        reference = setup_applier(setup, torch.float64)
    results: list[BandPrecision] = []
    for index, (start, stop) in enumerate(bands):
        pos = torch.linspace(start, stop - 1, min(count, stop - start), dtype=torch.float64).round().to(torch.int64)
        pos = torch.unique(pos)  # (P,) sorted
        vectors = unit_vectors(2 * pos.shape[0], setup.rotary_dim, seed + index).to(work_dtype)
        q, k = vectors[: pos.shape[0]], vectors[pos.shape[0] :]  # (P, d) each, as dtype holds them
        with as_argument("setup"):
            q_low = rotate(low, q, pos, stop, keys=False).to(torch.float64)
            k_low = rotate(low, k, pos, stop, keys=True).to(torch.float64)
            q_ref = rotate(reference, q, pos, stop, keys=False)
            k_ref = rotate(reference, k, pos, stop, keys=True)
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


# ------------------------------------------------------------------------------------------------ pairings
def pairing_permutation(head_dim: int, to: Pairing, *, rotary_dim: int | None = None) -> list[int]:
    """The row order within one head that converts between pairings: new row r = old row order[r].

    to = "half" (Meta/interleaved -> Hugging Face): order = [0, 2, …, d−2, 1, 3, …, d−1], so the pair (2i, 2i+1)
    becomes (i, i + d/2): the permute of transformers' convert_llama_weights_to_hf,
    w.view(H, d/2, 2, D).transpose(1, 2). to = "interleaved": its inverse, [0, d/2, 1, d/2 + 1, …]. With
    ``rotary_dim`` r < head_dim only the first r features (the rotated ones) are reordered. Errors at
    ("head_dim",), ("rotary_dim",), ("to",).
    """
    dim = positive_int(head_dim, ("head_dim",))
    rotated = dim if rotary_dim is None else positive_int(rotary_dim, ("rotary_dim",), maximum=dim)
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
    heads = positive_int(num_heads, ("num_heads",))
    order = torch.tensor(pairing_permutation(head_dim, to, rotary_dim=rotary_dim), dtype=torch.int64)  # (d,)
    if not isinstance(weight, torch.Tensor) or weight.dim() not in (1, 2) or weight.shape[0] != heads * head_dim:
        shape = list(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise InvalidInput(
            ("weight", "shape"),
            f"expected (num_heads·head_dim = {heads * head_dim}, in_features) or ({heads * head_dim},), got {shape}",
        )
    rows = (torch.arange(heads, dtype=torch.int64)[:, None] * head_dim + order[None, :]).reshape(-1)  # (H·d,)
    return weight.index_select(0, rows.to(weight.device))
