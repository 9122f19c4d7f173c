"""The regime of a context-extension study: how its rotary pairs fall into each scaling rule's bands.

YaRN and Llama 3 treat a pair k by how often it turns over the original context L,

    r_k = L·ω_k / 2π,   ω_k = θ^(−2k/d),

keeping the fast pairs, dividing the slow ones by the factor and ramping those between: YaRN keeps r_k > β_fast
(32) and interpolates r_k < β_slow (1); Llama 3 keeps wavelengths below L/high_freq_factor (r_k > 4) and
interpolates those above L/low_freq_factor (r_k < 1). A tiny model trained on a few dozen tokens has no pair that
turns 32 times (its fastest, ω_0 = 1, turns L/2π times), so there both rules are close to position interpolation
and a study of them measures PI, not the rules. :func:`rule_bands` says per pair where a rule puts it, read from
the frequencies the rule's registered method produces (kept: ω'_k = ω_k; interpolated: ω'_k = ω_k/s; ramped:
between), beside the rule's own criterion on r_k; :func:`study_bands` does it for every arm of a study and for
the source model the rules were made for (:data:`REFERENCE_PRESET`), with a warning per band a rule relies on
that holds no pair.

NTK, dynamic NTK and ABF (``rope`` with another θ) have no bands: they change every pair's base; their per-pair
scale ω'_k/ω_k is reported instead. PI has one band: every pair interpolated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from posenc.errors import InvalidInput
from posenc.pe import get_method
from posenc.pe.ops import rope_inv_freq
from posenc.real_models.presets import get_preset
from posenc.real_models.rotary_setup import RotarySetup, pair_frequencies, setup_applier

BANDS: tuple[str, ...] = ("kept", "ramped", "interpolated")
# the source model the rules' defaults were made for: its θ, pretraining length and head come from its preset
REFERENCE_PRESET = "llama-3.1-8b"
REFERENCE_NAME = "Llama 3.1 8B"
# relative tolerance for "ω'_k equals ω_k" and "ω'_k equals ω_k / s" (the rules blend in float64)
SCALE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Thresholds:
    """A rule's criterion in rotations over L: a pair turning more than ``kept_above`` times keeps its frequency,
    one turning fewer than ``interpolated_below`` times is divided by the factor, those between are ramped.
    ``names`` are the params the two numbers come from."""

    kept_above: float
    interpolated_below: float
    names: tuple[str, str]

    def band(self, rotations: float) -> str:
        if rotations > self.kept_above:
            return "kept"
        if rotations < self.interpolated_below:
            return "interpolated"
        return "ramped"

    def relied_on(self) -> tuple[str, ...]:
        """The bands the rule uses: a rule whose two edges coincide has no ramp; PI (both infinite) only
        interpolates."""
        if math.isinf(self.interpolated_below):
            return ("interpolated",)
        if self.kept_above == self.interpolated_below:
            return ("kept", "interpolated")
        return BANDS


def thresholds(method: str, params: Mapping[str, Any]) -> Thresholds | None:
    """The rule's band edges in rotations over L, from its filled params (the registry's ``band_edges``: YaRN
    β_fast and β_slow, Llama 3 high_freq_factor and low_freq_factor, PI every pair); None for a rule without
    bands (NTK, dynamic NTK, ABF)."""
    edges = get_method(method).band_edges
    if edges is None:
        return None
    kept_above, interpolated_below, names = edges(params)
    return Thresholds(kept_above, interpolated_below, names)


@dataclass(frozen=True)
class PairBand:
    """Pair k: r_k = L·ω_k/2π (unscaled), the rule's scale ω'_k/ω_k, the band its frequency shows (None for a
    rule without bands) and the band of the rule's criterion on r_k."""

    pair: int
    rotations: float
    scale: float
    band: str | None
    criterion: str | None


@dataclass(frozen=True)
class RuleBands:
    """One rule at one setup (θ, L, d): per pair its band, and the counts per band from the frequencies
    (``counts``) and from the rule's criterion on r_k (``criterion_counts``); both None for a rule without
    bands."""

    method: str
    theta: float
    original_length: int
    rotary_dim: int
    factor: float | None
    thresholds: Thresholds | None
    pairs: list[PairBand]

    @property
    def counts(self) -> dict[str, int] | None:
        if self.thresholds is None:
            return None
        return {band: sum(pair.band == band for pair in self.pairs) for band in BANDS}

    @property
    def criterion_counts(self) -> dict[str, int] | None:
        if self.thresholds is None:
            return None
        return {band: sum(pair.criterion == band for pair in self.pairs) for band in BANDS}

    def empty_bands(self) -> list[str]:
        """The bands the rule relies on that hold no pair, by its frequencies or by its criterion."""
        counts, criterion = self.counts, self.criterion_counts
        if self.thresholds is None or counts is None or criterion is None:
            return []
        return [band for band in self.thresholds.relied_on() if counts[band] == 0 or criterion[band] == 0]

    def to_json(self) -> dict[str, Any]:
        edges = self.thresholds
        return {
            "method": self.method,
            "theta": self.theta,
            "original_length": self.original_length,
            "rotary_dim": self.rotary_dim,
            "pairs": len(self.pairs),
            "fastest_rotations": self.pairs[0].rotations,
            "banded": edges is not None,
            "thresholds": None
            if edges is None or math.isinf(edges.kept_above)
            else {"kept_above": edges.kept_above, "interpolated_below": edges.interpolated_below},
            "counts": self.counts,
            "criterion_counts": self.criterion_counts,
            "scale": [pair.scale for pair in self.pairs],
            "rotations": [pair.rotations for pair in self.pairs],
            "band": [pair.band for pair in self.pairs],
        }


def _frequency_band(scale: float, factor: float) -> str:
    """kept when ω'_k = ω_k, interpolated when ω'_k = ω_k/s, ramped between (checked in that order: at s = 1
    every pair is kept)."""
    if math.isclose(scale, 1.0, rel_tol=SCALE_TOLERANCE):
        return "kept"
    if math.isclose(scale, 1.0 / factor, rel_tol=SCALE_TOLERANCE):
        return "interpolated"
    return "ramped"


def rule_bands(
    method: str, params: Mapping[str, Any], *, theta: float, original_length: int, rotary_dim: int
) -> RuleBands:
    """Per pair k of a rotary_dim-wide head with base θ trained at ``original_length`` L: r_k = L·θ^(−2k/d)/2π,
    the scale ω'_k/ω_k of the frequencies ``method`` produces with ``params`` (float64, at the extended length
    s·L, which only dynamic rules read), and for a banded rule (YaRN, Llama 3, PI) the band those frequencies
    show and the band of the rule's criterion on r_k. ``params`` are the rule's as the study fills them (its
    ``base`` may differ from θ: ABF)."""
    applier = setup_applier(RotarySetup(method=method, params=dict(params), rotary_dim=rotary_dim), torch.float64)
    filled = applier.params.model_dump()  # the params with the method's defaults, as its frequencies read them
    factor = None if filled.get("factor") is None else float(filled["factor"])
    extended = original_length if factor is None else max(original_length, round(factor * original_length))
    scaled = pair_frequencies(applier, extended).inv_freq.to(torch.float64)  # (d/2,)
    unscaled = rope_inv_freq(theta, rotary_dim, dtype=torch.float64)  # (d/2,)
    edges = thresholds(method, filled)
    pairs = []
    for k, (omega, new) in enumerate(zip(unscaled.tolist(), scaled.tolist(), strict=True)):
        rotations = original_length * omega / (2 * math.pi)
        scale = new / omega
        pairs.append(
            PairBand(
                pair=k,
                rotations=rotations,
                scale=scale,
                band=_frequency_band(scale, factor) if factor is not None and edges is not None else None,
                criterion=edges.band(rotations) if edges is not None else None,
            )
        )
    return RuleBands(method, theta, original_length, rotary_dim, factor, edges, pairs)


def reference_setup() -> tuple[float, int, int]:
    """(θ, L, d) of :data:`REFERENCE_PRESET` from its preset: rope_theta, the rope scaling's
    original_max_position_embeddings, the head dim (head_dim, else hidden_size / num_attention_heads)."""
    config = get_preset(REFERENCE_PRESET)
    head_dim = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    return float(config["rope_theta"]), int(config["rope_scaling"]["original_max_position_embeddings"]), head_dim


def regime_warning(label: str, bands: RuleBands, band: str) -> str:
    """One sentence on a band the rule relies on that holds no pair at this setup, with the numbers why."""
    edges = bands.thresholds
    assert edges is not None
    fastest, slowest = bands.pairs[0].rotations, bands.pairs[-1].rotations
    length = bands.original_length
    if band == "kept":
        why = f"the fastest pair turns {fastest:.1f} times over {length} tokens; {edges.names[0]} {edges.kept_above:g}"
        counts = bands.counts
        if counts is not None and counts["kept"] > 0:
            why += f"; {counts['kept']} pair(s) keep their frequency only where the ramp is clamped at pair 0"
    elif band == "interpolated":
        why = (
            f"the slowest pair turns {slowest:.2f} times over {length} tokens; {edges.names[1]} "
            f"{edges.interpolated_below:g}"
        )
    else:
        why = f"no pair turns between {edges.interpolated_below:g} and {edges.kept_above:g} times over {length} tokens"
    return f"{label}: no pair in the {band} band at this setup ({why})"


def study_bands(
    rules: Mapping[str, tuple[str, Mapping[str, Any]]], *, theta: float, original_length: int, rotary_dim: int
) -> tuple[dict[str, Any], list[str]]:
    """Per rule (label -> (method, params as the study fills them)): its bands at the study's setup and at the
    reference model's (the same rule params with the reference's θ and L), and the warnings, one per band a rule
    relies on that holds no pair at the study's setup; a rule with no frequency per pair goes to ``"unbanded"``
    with the reason. ABF (``rope`` with its own θ) keeps its ratio to the base θ at the reference."""
    ref_theta, ref_length, ref_dim = reference_setup()
    report: dict[str, Any] = {
        "setup": {"theta": theta, "original_length": original_length, "rotary_dim": rotary_dim},
        "reference": {
            "name": REFERENCE_NAME,
            "preset": REFERENCE_PRESET,
            "theta": ref_theta,
            "original_length": ref_length,
            "rotary_dim": ref_dim,
        },
        "rules": {},
        "unbanded": {},
    }
    warnings: list[str] = []
    for label, (method, params) in rules.items():
        try:
            here = rule_bands(method, params, theta=theta, original_length=original_length, rotary_dim=rotary_dim)
        except InvalidInput as exc:  # a method that rotates blocks by matrices: no frequency per pair
            report["unbanded"][label] = str(exc)
            continue
        moved = dict(params)
        if "original_max_position_embeddings" in moved:
            moved["original_max_position_embeddings"] = ref_length
        if "base" in moved:
            moved["base"] = float(moved["base"]) * ref_theta / theta
        there = rule_bands(method, moved, theta=ref_theta, original_length=ref_length, rotary_dim=ref_dim)
        report["rules"][label] = {"method": method, "setup": here.to_json(), "reference": there.to_json()}
        warnings += [regime_warning(label, here, band) for band in here.empty_bands()]
    return report, warnings
