"""RoPE diagnostics: plain ``def`` routes (CPU-bound, run in the threadpool), the same transport and error rules
as the compute routes; the math is in ``posenc``."""

from __future__ import annotations

from typing import Any

import torch
from fastapi import APIRouter

from posenc import rope_diagnostics as diagnostics
from posenc.errors import InvalidInput, located
from posenc.model_configs import convert_config, query_temperature, resolve_config
from posenc.mrope_positions import Segment, mrope_position_ids
from posenc.schemas.errors import Problem
from posenc.schemas.rope import (
    CompareRequest,
    ConvertRequest,
    ConvertResponse,
    DecodeRequest,
    FrequenciesRequest,
    PermutationRequest,
    PermutationResponse,
    PositionIdsRequest,
    PositionIdsResponse,
    PrecisionRequest,
    SetupIn,
    TemperatureRequest,
    TemperatureResponse,
)

router = APIRouter(prefix="/v1", tags=["rope"])
_PROBLEMS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "missing or invalid X-API-Key"},
    422: {"model": Problem, "description": "invalid request; the error names the field"},
    429: {"model": Problem, "description": "rate limited; see Retry-After"},
}


@router.post("/rope/position_ids", name="position_ids", response_model=PositionIdsResponse, responses=_PROBLEMS)
def position_ids(request: PositionIdsRequest) -> PositionIdsResponse:
    """Qwen-VL M-RoPE (t, h, w) position ids of text, image and video segments, by the model's own rule."""
    segments = [
        Segment(
            kind=segment.kind,
            length=segment.length,
            grid=None if segment.grid is None else (segment.grid[0], segment.grid[1], segment.grid[2]),
            seconds_per_grid=segment.seconds_per_grid,
        )
        for segment in request.segments
    ]
    with located(("body",)):
        result = mrope_position_ids(
            segments,
            rule=request.rule,
            spatial_merge_size=request.spatial_merge_size,
            tokens_per_second=request.tokens_per_second,
            advance=request.advance,
        )
    return PositionIdsResponse(ids=result.ids.tolist(), next_position=result.next_position, warnings=result.warnings)


@router.post("/models/convert", name="convert", response_model=ConvertResponse, responses=_PROBLEMS)
def convert(request: ConvertRequest) -> ConvertResponse:
    """The config in the other Hugging Face dialect (v4 rope_scaling <-> v5 rope_parameters); it resolves to the
    same layers."""
    with located(("body", "config")):
        return ConvertResponse(config=convert_config(request.config, request.to))


def _setup(setup: SetupIn, field: str) -> diagnostics.RotarySetup:
    """The library's setup; a config's layer is resolved first (errors under ``body.<field>.config``)."""
    if setup.config is None:
        assert setup.method is not None
        return diagnostics.RotarySetup(setup.method, setup.params, setup.rotary_dim, setup.pairing)
    assert setup.layer is not None
    with located(("body", field, "config")):
        layers = resolve_config(setup.config).layers
    if setup.layer >= len(layers):
        raise InvalidInput(("body", field, "layer"), f"the config has {len(layers)} layers")
    with located(("body", field)):
        return diagnostics.RotarySetup.from_layer(layers[setup.layer])


@router.post("/rope/frequencies", name="frequencies", responses=_PROBLEMS)
def frequencies(request: FrequenciesRequest) -> dict[str, Any]:
    """Per pair: ω, wavelength, rotations over the training length, whether it wraps, and the band of methods
    that have bands (YaRN's ramp, Llama 3's wavelength bands); the axis of each pair for multi-axis methods."""
    setup = _setup(request.setup, "setup")
    with located(("body",)):
        return diagnostics.frequencies(setup, request.train_length).to_json()


@router.post("/rope/precision", name="precision", responses=_PROBLEMS)
def precision(request: PrecisionRequest) -> dict[str, Any]:
    """The error of rotating q and k (and of their logits) in a dtype against float64, per band of positions."""
    setup = _setup(request.setup, "setup")
    with located(("body",)):
        report = diagnostics.precision(
            setup,
            request.dtype,
            request.positions_bands,
            seed=request.seed,
            positions_per_band=request.positions_per_band,
        )
    return report.to_json()


@router.post("/rope/compare", name="compare", responses=_PROBLEMS)
def compare(request: CompareRequest) -> dict[str, Any]:
    """A weightless divergence probe: the first position where two setups' angles, or the logits of seeded random
    q and k, differ by more than a tolerance (null where they never do)."""
    setup_a, setup_b = _setup(request.setup_a, "setup_a"), _setup(request.setup_b, "setup_b")
    with located(("body",)):
        report = diagnostics.compare(
            setup_a,
            setup_b,
            request.max_position,
            request.tolerance_angle,
            request.tolerance_logit,
            request.seed,
        )
    return report.to_json()


@router.post("/rope/decode", name="decode", responses=_PROBLEMS)
def decode(request: DecodeRequest) -> dict[str, Any]:
    """Prefill, then decode step by step with a KV cache, against full recomputation: the logit error per step
    and the first step that diverges (dynamic scalings once the length passes their original length)."""
    setup = _setup(request.setup, "setup")
    with located(("body",)):
        report = diagnostics.decode(
            setup, request.prefill, request.steps, tolerance=request.tolerance, seed=request.seed
        )
    return report.to_json()


@router.post("/rope/permutation", name="permutation", response_model=PermutationResponse, responses=_PROBLEMS)
def permutation(request: PermutationRequest) -> PermutationResponse:
    """The row order of a q / k projection within each head between interleaved (Meta) and half (Hugging Face)
    pairing: new row r = old row order[r]."""
    with located(("body",)):
        order = diagnostics.pairing_permutation(request.head_dim, request.to, rotary_dim=request.rotary_dim)
    return PermutationResponse(order=order)


@router.post("/rope/temperature", name="temperature", response_model=TemperatureResponse, responses=_PROBLEMS)
def temperature(request: TemperatureRequest) -> TemperatureResponse:
    """Llama 4's position-dependent query temperature of a config's layer, per position (1 where the layer does
    not scale its queries)."""
    with located(("body", "config")):
        layers = resolve_config(request.config).layers
    if request.layer >= len(layers):
        raise InvalidInput(("body", "layer"), f"the config has {len(layers)} layers")
    tuning = layers[request.layer].query_temperature
    positions = torch.arange(request.length, dtype=torch.int64) + request.offset  # (N,)
    if tuning is None:
        return TemperatureResponse(applies=False, temperature=[1.0] * request.length, formula=None)
    scale = query_temperature(positions, float(tuning["floor_scale"]), float(tuning["attn_scale"]))
    return TemperatureResponse(applies=True, temperature=scale.tolist(), formula=str(tuning["formula"]))
