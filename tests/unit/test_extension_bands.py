"""A context-extension study's regime: how the pairs of its setup fall into YaRN's and Llama 3's bands (kept,
ramped, interpolated), read from the frequencies the registered methods produce and checked against the
registry's own band functions; the source model's counts; a warning per band a rule relies on that is empty;
the study's result carrying both."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest

from posenc.extension import arm_ref, regime
from posenc.extension_bands import BANDS, reference_setup, rule_bands, study_bands, thresholds
from posenc.pe import get_method
from posenc.schemas.jobs import JobSpec
from posenc.training.jobs import run_job
from tests.unit.training.conftest import RecordingHooks

# the registry's band names (``rope_scaling.yarn_bands`` / ``llama3_bands``) by what they do to ω_k
REGISTRY_BAND = {"extrapolated": "kept", "high": "kept", "ramp": "ramped", "smooth": "ramped",
                 "interpolated": "interpolated", "low": "interpolated"}  # fmt: skip


def registry_bands(method: str, params: dict[str, Any], rotary_dim: int) -> list[str]:
    """The bands of the registry's per-method band function, by interpolation weight: 0 kept, 1 interpolated."""
    spec = get_method(method)
    assert spec.bands is not None
    named = spec.bands(spec.parse_params(params), rotary_dim)
    return ["kept" if w == 0.0 else "interpolated" if w == 1.0 else REGISTRY_BAND[name] for name, w in named]


GRID = list(itertools.product((100.0, 10_000.0, 500_000.0), (32, 48, 256, 4096, 8192), (8, 16, 64, 128), (2.0, 8.0)))


@pytest.mark.parametrize("method", ["rope_yarn", "rope_llama3"])
def test_the_bands_the_frequencies_show_are_the_registry_bands_of_the_method(method: str) -> None:
    for theta, length, dim, factor in GRID:
        params = {"base": theta, "factor": factor, "original_max_position_embeddings": length}
        bands = rule_bands(method, params, theta=theta, original_length=length, rotary_dim=dim)
        assert [pair.band for pair in bands.pairs] == registry_bands(method, params, dim), (theta, length, dim)
        for pair in bands.pairs:
            expected = {"kept": 1.0, "interpolated": 1.0 / factor}.get(str(pair.band))
            if expected is None:
                assert 1.0 / factor < pair.scale < 1.0
            else:
                assert pair.scale == pytest.approx(expected, rel=1e-12)


def test_yarn_without_truncation_and_with_equal_edges_still_matches_its_registry_bands() -> None:
    for theta, length, dim, _ in GRID[::3]:
        for extra in ({"truncate": False}, {"beta_fast": 4.0, "beta_slow": 4.0}):
            params = {"base": theta, "factor": 4.0, "original_max_position_embeddings": length, **extra}
            bands = rule_bands("rope_yarn", params, theta=theta, original_length=length, rotary_dim=dim)
            assert [pair.band for pair in bands.pairs] == registry_bands("rope_yarn", params, dim)


def test_llama3_bands_by_criterion_are_its_bands_by_frequency() -> None:
    """Llama 3 decides by wavelength: λ_k < L/high is r_k > high, so both readings agree pair by pair."""
    for theta, length, dim, factor in GRID:
        params = {"base": theta, "factor": factor, "original_max_position_embeddings": length}
        bands = rule_bands("rope_llama3", params, theta=theta, original_length=length, rotary_dim=dim)
        assert bands.counts == bands.criterion_counts


def test_pi_interpolates_every_pair_and_ntk_has_no_bands_but_a_scale_per_pair() -> None:
    pi = rule_bands("rope_linear", {"base": 10_000.0, "factor": 2.0}, theta=10_000.0, original_length=48,
                    rotary_dim=16)  # fmt: skip
    assert pi.counts == {"kept": 0, "ramped": 0, "interpolated": 8}
    ntk = rule_bands("rope_ntk", {"base": 10_000.0, "factor": 2.0}, theta=10_000.0, original_length=48, rotary_dim=16)
    assert ntk.counts is None
    assert ntk.thresholds is None
    scales = [pair.scale for pair in ntk.pairs]
    assert scales[0] == pytest.approx(1.0)
    assert scales[-1] == pytest.approx(0.5)
    assert scales == sorted(scales, reverse=True)


def test_rotations_are_the_turns_of_each_unscaled_pair_over_the_original_context() -> None:
    bands = rule_bands("rope_yarn", {"base": 10_000.0, "factor": 2.0, "original_max_position_embeddings": 48},
                       theta=10_000.0, original_length=48, rotary_dim=16)  # fmt: skip
    for pair in bands.pairs:
        assert pair.rotations == pytest.approx(48 * 10_000.0 ** (-2 * pair.pair / 16) / (2 * math.pi))


# --------------------------------------------------------------------------------- the source model's numbers
def test_llama_3_1_8b_keeps_29_pairs_under_its_rule_and_would_keep_19_under_yarn() -> None:
    theta, length, dim = reference_setup()
    assert (theta, length, dim) == (500_000.0, 8192, 128)
    filled = {"base": theta, "factor": 8.0, "original_max_position_embeddings": length}
    llama3 = rule_bands("rope_llama3", {**filled, "low_freq_factor": 1.0, "high_freq_factor": 4.0}, theta=theta,
                        original_length=length, rotary_dim=dim)  # fmt: skip
    yarn = rule_bands("rope_yarn", {**filled, "beta_fast": 32.0, "beta_slow": 1.0}, theta=theta,
                      original_length=length, rotary_dim=dim)  # fmt: skip
    assert llama3.counts == {"kept": 29, "ramped": 6, "interpolated": 29}
    assert yarn.counts == {"kept": 19, "ramped": 16, "interpolated": 29}
    # kept: r_k = 8192·500000^(−k/64)/2π above 4 (Llama 3) or 32 (YaRN)
    assert [pair.rotations > 4 for pair in llama3.pairs].count(True) == 29
    assert [pair.rotations > 32 for pair in yarn.pairs].count(True) == 19


# ------------------------------------------------------------------------------------------ the study's regime
RULES = [{"method": "rope_linear", "label": "pi"}, {"method": "rope_ntk", "label": "ntk"},
         {"method": "rope_yarn", "label": "yarn"}, {"method": "rope_llama3", "label": "llama3"}]  # fmt: skip


def study(length: int, dim: int, heads: int, **train: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "methods": RULES,
            "extension": {"factor": 2},
            "data": {"task": "probes", "probes": ["passkey"]},
            "model": {"layers": 1, "dim": dim, "heads": heads},
            "train": {"length": length, "steps": 2, "batch_size": 2, "checkpoint_every": 2, **train},
            "eval": {"lengths": [length], "samples": 1},
        }
    )


def test_the_48_token_setup_warns_that_yarn_keeps_no_pair_by_its_criterion() -> None:
    bands, warnings = regime(study(48, 64, 4))
    assert bands["setup"] == {"theta": 10_000.0, "original_length": 48, "rotary_dim": 16}
    yarn = bands["rules"]["yarn"]["setup"]
    assert yarn["criterion_counts"]["kept"] == 0  # the fastest pair turns 48/2π = 7.6 times, β_fast = 32
    assert yarn["counts"]["kept"] == 1  # pair 0: the ramp's lower edge is clamped at pair 0
    assert len(warnings) == 1
    assert warnings[0].startswith("yarn: no pair in the kept band")
    assert "7.6 times over 48 tokens" in warnings[0]
    assert bands["rules"]["yarn"]["reference"]["counts"] == {"kept": 19, "ramped": 16, "interpolated": 29}
    assert bands["rules"]["llama3"]["reference"]["counts"] == {"kept": 29, "ramped": 6, "interpolated": 29}
    assert bands["rules"]["ntk"]["setup"]["counts"] is None


def test_a_setup_whose_fastest_pair_turns_past_beta_fast_fills_every_band_and_warns_of_none() -> None:
    bands, warnings = regime(study(256, 64, 2))
    assert warnings == []
    for label in ("yarn", "llama3"):
        for counts in (bands["rules"][label]["setup"]["counts"], bands["rules"][label]["setup"]["criterion_counts"]):
            assert all(counts[band] > 0 for band in BANDS), (label, counts)


def test_an_empty_interpolated_band_is_named_with_the_slowest_pair() -> None:
    """At θ = 2 with few pairs every pair turns more than once over L: nothing for the rules to interpolate."""
    report, warnings = study_bands(
        {"llama3": ("rope_llama3", {"base": 2.0, "factor": 2.0, "original_max_position_embeddings": 256})},
        theta=2.0,
        original_length=256,
        rotary_dim=4,
    )
    assert report["rules"]["llama3"]["setup"]["counts"]["interpolated"] == 0
    assert any(w.startswith("llama3: no pair in the interpolated band") and "slowest pair" in w for w in warnings)


def test_the_thresholds_are_the_params_the_frequencies_use() -> None:
    spec = study(48, 64, 4)
    yarn = arm_ref(spec, spec.methods[2].model_copy(update={"params": {"beta_fast": 16.0, "beta_slow": 2.0}}))
    edges = thresholds("rope_yarn", yarn.params)
    assert edges is not None
    assert (edges.kept_above, edges.interpolated_below) == (16.0, 2.0)
    assert thresholds("rope_ntk", {}) is None


def test_the_study_result_carries_its_bands_and_warnings(tmp_path: Path) -> None:
    spec = study(48, 32, 2)
    result = run_job("benchmark", spec, job_dir=tmp_path, artifact_root=tmp_path, hooks=RecordingHooks())
    bands = result["study"]["bands"]
    assert set(bands["rules"]) == {"pi", "ntk", "yarn", "llama3"}
    assert bands["reference"]["name"] == "Llama 3.1 8B"
    assert bands["rules"]["yarn"]["setup"]["pairs"] == 8
    assert any(w.startswith("yarn: no pair in the kept band") for w in result["study"]["regime_warnings"])
