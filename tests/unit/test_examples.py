"""The files under examples/ are what the docs' commands say they are: every job spec passes the gateway's
checks for its kind, every model config resolves into its layers, and the committed GGUF is llama.cpp's conversion
of the tiny Llama 3 config beside it (its header's sizes, θ and Llama 3 frequency factors match that config)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from posenc_client._gguf import read_gguf

from posenc.jobspec import validate_job
from posenc.real_models.configs import resolve_config
from posenc.schemas.jobs import JobCreate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KINDS = {
    "train": "train",
    "benchmark": "benchmark",
    "study": "benchmark",
    "suite": "benchmark",
    "leaderboard": "benchmark",
    "compute": "compute",
}


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def test_every_job_spec_is_listed_with_its_kind() -> None:
    assert {path.stem for path in (EXAMPLES / "jobs").glob("*.json")} == set(KINDS)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_job_spec_passes_the_gateways_checks(name: str) -> None:
    create = JobCreate.model_validate({"kind": KINDS[name], "spec": load(EXAMPLES / "jobs" / f"{name}.json")})
    validate_job(create)


def test_the_study_and_the_suite_are_what_their_names_say() -> None:
    assert load(EXAMPLES / "jobs" / "study.json")["extension"]["factor"] == 2
    assert load(EXAMPLES / "jobs" / "suite.json")["suite"] == "quick"


@pytest.mark.parametrize("path", sorted((EXAMPLES / "models").glob("*/config.json")), ids=lambda path: path.parent.name)
def test_a_model_config_resolves_into_its_layers(path: Path) -> None:
    config = load(path)
    text = config.get("text_config", config)
    layers = resolve_config(config).layers
    assert len(layers) == text["num_hidden_layers"]


def llama3_factors(config: dict[str, Any]) -> list[float]:
    """The per-pair divisors of Llama 3.1's rope scaling (Meta's apply_scaling; llama.cpp writes them as the
    rope_freqs tensor): 1 for short wavelengths, factor for long ones, a smooth blend between."""
    rope = config["rope_parameters"]
    dim = config["head_dim"]
    low_wavelength = rope["original_max_position_embeddings"] / rope["high_freq_factor"]
    high_wavelength = rope["original_max_position_embeddings"] / rope["low_freq_factor"]
    factors = []
    for pair in range(dim // 2):
        wavelength = 2 * math.pi * rope["rope_theta"] ** (2 * pair / dim)
        if wavelength < low_wavelength:
            factors.append(1.0)
        elif wavelength > high_wavelength:
            factors.append(rope["factor"])
        else:
            smooth = (rope["original_max_position_embeddings"] / wavelength - rope["low_freq_factor"]) / (
                rope["high_freq_factor"] - rope["low_freq_factor"]
            )
            factors.append(1 / ((1 - smooth) / rope["factor"] + smooth))
    return factors


def test_the_gguf_is_the_conversion_of_its_config() -> None:
    config = load(EXAMPLES / "models" / "tiny-llama3" / "config.json")
    header = read_gguf(EXAMPLES / "models" / "tiny-llama3.gguf")
    metadata = header["metadata"]
    assert metadata["general.architecture"] == "llama"
    assert metadata["llama.block_count"] == config["num_hidden_layers"]
    assert metadata["llama.attention.head_count"] == config["num_attention_heads"]
    assert metadata["llama.rope.dimension_count"] == config["head_dim"]
    assert metadata["llama.rope.freq_base"] == config["rope_parameters"]["rope_theta"]
    factors = llama3_factors(config)
    assert len(set(factors)) > 2  # all three bands are present
    assert header["tensors"]["rope_freqs.weight"] == pytest.approx(factors, rel=1e-6)
    assert (EXAMPLES / "models" / "tiny-llama3.gguf").stat().st_size < 200_000
