"""Diagnostics for rotary setups: what each pair does, how precise a dtype is, where two setups part, what a
KV cache does to scalings that depend on the length, and the checkpoint permutation between pairings.

This module is the diagnostics' public entry point. It holds the probes of where rotations part (``compare``,
``decode``, ``rotation_changes``) and re-exports the names of its two siblings: ``posenc.real_models.rotary_setup``
(``RotarySetup``, ``rotation``: the setup and the plumbing every diagnostic shares) and
``posenc.real_models.rotary_pairs`` (``frequencies``, ``precision``, ``pairing_permutation``,
``convert_qk_rows``: what one setup does pair by pair).

A *setup* (``RotarySetup``) is what rotates one layer: a registered rotary method, its raw params (in the
method's own names), the rotated width d = rotary_dim and the pairing (half = rotate_half, interleaved =
GPT-J/Meta). ``RotarySetup.from_layer`` takes a layer of ``posenc.real_models.configs.resolve_config``. Every rotation
goes through posenc's own rotary applier (``posenc.pe.appliers.rotary_applier``), so what is diagnosed is what
the service computes.

Functions (pure; each returns a dataclass with ``to_json()``, or a tensor / list for the permutations):

- ``frequencies(setup, train_length)`` (from ``rotary_pairs``): per pair k its ω_k, wavelength 2π/ω_k, rotations
  train_length·ω_k/2π, whether it wraps, and the band of methods that have bands (YaRN's ramp, Llama 3's
  wavelength bands);
- ``precision(setup, dtype, positions_bands)`` (from ``rotary_pairs``): the error of rotating in float32 /
  bfloat16 / float16 against float64, per band of positions;
- ``compare(setup_a, setup_b, max_position, tolerance_angle, tolerance_logit, seed)``: the first position where
  the rotations, or the logits of seeded random q and k, differ by more than a tolerance;
- ``decode(setup, prefill, steps)``: KV-cache decoding against recomputation at every step;
- ``pairing_permutation(head_dim, to)`` and ``convert_qk_rows(weight, num_heads, head_dim, to)`` (from
  ``rotary_pairs``): the row permutation of q / k projections between interleaved and half pairing (Meta <->
  Hugging Face).

Multi-axis methods (2D RoPE) take positions (N, A); the position scans here use the diagonal p·(1, …, 1).
Errors are ``InvalidInput`` located in the function's own arguments (``("setup", "params", "factor")``,
``("setup_b", "rotary_dim")``, ``("dtype",)``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from posenc.errors import InvalidInput
from posenc.pe.kinds import rotary_angles
from posenc.pe.types import RotaryFrequencies, RotaryGenerators
from posenc.real_models.rotary_pairs import (
    DEFAULT_POSITION_BANDS,
    DTYPES,
    POSITIONS_PER_BAND,
    BandPrecision,
    FrequencyReport,
    PairFrequency,
    PrecisionReport,
    convert_qk_rows,
    frequencies,
    pairing_permutation,
    precision,
)
from posenc.real_models.rotary_setup import (
    PAIRINGS,
    RotarySetup,
    as_argument,
    method_positions,
    pair_frequencies,
    positive_int,
    rotate,
    rotation,
    setup_applier,
    unit_vectors,
    valid_seed,
    valid_tolerance,
)
from posenc.schemas.compute import MAX_ROTARY_POSITION

__all__ = [
    "DEFAULT_POSITION_BANDS",
    "DTYPES",
    "MAX_DECODE_LENGTH",
    "PAIRINGS",
    "POSITIONS_PER_BAND",
    "SCAN_FEATURES",
    "BandPrecision",
    "ComparisonReport",
    "DecodeReport",
    "DecodeStep",
    "FrequencyReport",
    "PairFrequency",
    "PrecisionReport",
    "RotarySetup",
    "compare",
    "convert_qk_rows",
    "decode",
    "frequencies",
    "pairing_permutation",
    "precision",
    "probe_vectors",
    "rotation",
    "rotation_changes",
    "scan_chunk",
    "wrapped_angle_difference",
]

SCAN_FEATURES = 1 << 20  # positions x rotated features per chunk of the ``compare`` scan (bounds its memory)


def scan_chunk(rotary_dim: int) -> int:
    """Positions per chunk of the ``compare`` scan: ``SCAN_FEATURES`` features of float64 in each of its (C, d)
    tensors (8 MiB), whatever the rotary dim (its memory, not its result)."""
    return max(1, SCAN_FEATURES // max(rotary_dim, 1))


MAX_DECODE_LENGTH = 1 << 15  # prefill + steps: recomputation re-rotates every key each step the rotation changes


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
    q, k = unit_vectors(2, rotary_dim, seed)
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
    last = positive_int(max_position, ("max_position",), minimum=0, maximum=MAX_ROTARY_POSITION)
    angle_tolerance = valid_tolerance(tolerance_angle, ("tolerance_angle",))
    logit_tolerance = valid_tolerance(tolerance_logit, ("tolerance_logit",))
    seed = valid_seed(seed)
    seq_len = last + 1
    with as_argument("setup_a"):
        applier_a = setup_applier(setup_a)
        freqs_a = pair_frequencies(applier_a, seq_len)
    with as_argument("setup_b"):
        applier_b = setup_applier(setup_b)
        freqs_b = pair_frequencies(applier_b, seq_len)
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
    with as_argument("setup_a"):
        key_a = rotate(applier_a, k[None], zero, seq_len, keys=True)[0]  # (d,): R_a(0) k
    with as_argument("setup_b"):
        key_b = rotate(applier_b, k[None], zero, seq_len, keys=True)[0]

    angle_at: tuple[int, int, float] | None = None  # (position, pair, δ)
    logit_at: tuple[int, float, float] | None = None  # (position, ℓ_a, ℓ_b)
    chunk = scan_chunk(setup_a.rotary_dim)
    for start in range(0, seq_len, chunk):
        pos = torch.arange(start, min(start + chunk, seq_len), dtype=torch.int64)  # (C,)
        if angle_at is None:
            coords = method_positions(applier_a, pos)
            delta = wrapped_angle_difference(rotary_angles(freqs_a, coords), rotary_angles(freqs_b, coords))  # (C, d/2)
            worst, pair = delta.max(dim=-1)  # (C,) each
            over = torch.nonzero(worst > angle_tolerance)
            if over.numel():
                row = int(over[0, 0])
                angle_at = (start + row, int(pair[row]), float(worst[row]))
        if logit_at is None:
            queries = q[None].expand(pos.shape[0], -1)  # (C, d)
            with as_argument("setup_a"):  # a method's own check of a position (xPos's decay) names its setup
                logits_a = rotate(applier_a, queries, pos, seq_len, keys=False) @ key_a  # (C,)
            with as_argument("setup_b"):
                logits_b = rotate(applier_b, queries, pos, seq_len, keys=False) @ key_b
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
    first = positive_int(prefill, ("prefill",), maximum=MAX_DECODE_LENGTH)
    count = positive_int(steps, ("steps",), maximum=MAX_DECODE_LENGTH - first)
    limit = valid_tolerance(tolerance, ("tolerance",))
    seed = valid_seed(seed)
    total = first + count
    with as_argument("setup"):
        applier = setup_applier(setup)
    vectors = unit_vectors(2 * total, setup.rotary_dim, seed)  # (2T, d)
    queries, keys = vectors[:total], vectors[total:]  # (T, d) each
    pos = torch.arange(total, dtype=torch.int64)
    cpu = torch.device("cpu")
    cache = torch.empty(total, setup.rotary_dim, dtype=torch.float64)  # (T, d): keys as they were cached
    # every key so far rotated with the latest frequencies; None while that is exactly the cache (no change yet)
    recomputed: torch.Tensor | None = None
    with as_argument("setup"):
        cache[:first] = rotate(applier, keys[:first], pos[:first], first, keys=True)  # (P, d) rotated with f_P
        latest = applier.frequencies(first, cpu)
        per_step: list[DecodeStep] = []
        for step in range(count):
            n, length = first + step, first + step + 1
            current = applier.frequencies(length, cpu)
            cache[n : n + 1] = rotate(applier, keys[n : n + 1], pos[n : n + 1], length, keys=True)  # (1, d)
            if not _same_rotation(current, latest):
                # the rotation changed: every key re-rotated (identical to re-rotating them all every step)
                recomputed = rotate(applier, keys[: n + 1], pos[: n + 1], length, keys=True)  # (n + 1, d)
            elif recomputed is not None:
                recomputed = torch.cat((recomputed, cache[n : n + 1]))  # (n + 1, d)
            latest = current
            query = rotate(applier, queries[n : n + 1], pos[n : n + 1], length, keys=False)[0]  # (d,)
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
    applier = setup_applier(setup)
    cpu = torch.device("cpu")
    return not _same_rotation(applier.frequencies(shortest, cpu), applier.frequencies(longest, cpu))
